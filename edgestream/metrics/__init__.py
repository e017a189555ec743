"""edgestream.metrics — see DESIGN.md."""
