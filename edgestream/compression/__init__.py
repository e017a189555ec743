"""edgestream.compression — see DESIGN.md."""
