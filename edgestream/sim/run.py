"""`run_sim`: one simulated run of a config, written as the run directory of DESIGN.md.

`<out>/<name>-<run id>/`: config.yaml (resolved; secrets masked, see ExperimentConfig.to_yaml),
events.jsonl, summary.json, accuracy.png (test accuracy vs virtual time) and buffer.png (buffer
samples, max over devices, vs step; log scale).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from edgestream.metrics import EventLog, RunDir, accuracy_plot, buffer_plot, read_events
from edgestream.runid import check_run_id, new_run_id
from edgestream.sim.engine import SimEngine


def buffer_series(events: Iterable[dict]) -> list[tuple[int, float]]:
    """(step, max buffer_samples over devices) from step lines, in step order."""
    per_step: dict[int, float] = {}
    for e in events:
        if e.get("kind") == "step" and e.get("buffer_samples") is not None and e.get("step") is not None:
            s = int(e["step"])
            per_step[s] = max(per_step.get(s, 0.0), float(e["buffer_samples"]))
    return sorted(per_step.items())


def run_sim(cfg: Any, out: str | Path | None = None, run_id: str | None = None, progress: bool = True,
            base_dir: str | Path | None = None) -> tuple[Path, dict]:
    """Simulate `cfg` (an ExperimentConfig) and write its run directory; returns (path, summary).

    out: parent folder (default cfg.runtime.out); run_id: default a new one; progress: a rich bar when
    stderr is a terminal; base_dir: folder for relative paths in the config (rate traces).
    """
    run = f"{cfg.name}-{check_run_id(run_id or new_run_id())}"
    rd = RunDir(out if out is not None else cfg.runtime.out, run)
    rd.write_config(cfg.to_yaml())
    t_start = time.perf_counter()
    events = EventLog(rd.events_path)
    try:
        engine = SimEngine(cfg, events, progress=progress, base_dir=str(base_dir) if base_dir else None)
        t_run = time.perf_counter()
        engine.run()
        sim_wall = time.perf_counter() - t_run
    finally:
        events.close()
    wall = time.perf_counter() - t_start
    summary = events.summary(target_accuracy=cfg.stop.target_accuracy, wall_s=wall, engine="sim", run=run,
                             sim_wall_s=round(sim_wall, 3), **engine.extra_summary(sim_wall))
    rd.write_summary(summary)
    label = f"{cfg.algorithm.name}"
    accuracy_plot({label: events.evals}, rd.path / "accuracy.png", title=run)
    buffer_plot({label: buffer_series(read_events(rd.events_path))}, rd.path / "buffer.png", title=run)
    return rd.path, summary
