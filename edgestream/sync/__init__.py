"""edgestream.sync — see DESIGN.md."""
