"""edgestream.streams — see DESIGN.md."""
