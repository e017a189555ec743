"""edgestream.data — see DESIGN.md."""
