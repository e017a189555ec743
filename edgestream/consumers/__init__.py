"""edgestream.consumers — see DESIGN.md."""
