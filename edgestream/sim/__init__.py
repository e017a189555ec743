"""edgestream.sim — see DESIGN.md."""
