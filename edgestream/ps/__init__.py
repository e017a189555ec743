"""edgestream.ps — see DESIGN.md."""
