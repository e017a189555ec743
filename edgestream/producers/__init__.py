"""edgestream.producers — see DESIGN.md."""
