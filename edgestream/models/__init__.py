"""edgestream.models — see DESIGN.md."""
