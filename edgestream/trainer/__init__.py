"""edgestream.trainer — see DESIGN.md."""
