"""The run directory shared by both engines: `<out>/<name>-<run id>/` with config.yaml, events.jsonl,
summary.json and plots."""

from __future__ import annotations

import json
from pathlib import Path


class RunDir:
    """Create and fill one run's directory."""

    def __init__(self, out: str | Path, run: str) -> None:
        self.path = Path(out) / run
        self.path.mkdir(parents=True, exist_ok=True)
        self.events_path = self.path / "events.jsonl"
        self.summary_path = self.path / "summary.json"

    def write_config(self, yaml_text: str) -> None:
        (self.path / "config.yaml").write_text(yaml_text)

    def write_summary(self, summary: dict) -> None:
        self.summary_path.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")

    def read_summary(self) -> dict:
        return json.loads(self.summary_path.read_text())
