"""One run of a config on a named engine, and the run directory of in-process engines.

`run_config(cfg, engine)` looks the engine up in the registry (edgestream.runner.engines) and runs it;
every engine writes the same run directory, `<out>/<name>-<run id>/`: config.yaml (resolved; secrets
masked, see ExperimentConfig.to_yaml), events.jsonl, summary.json (with `engine`), accuracy.png (test
accuracy vs engine time) and buffer.png (buffer samples, max over devices, vs step; log scale).
`write_run` writes it for an engine that runs inside this process (the simulator): it opens the
events, builds and runs the engine, and adds the engine's own figures to the summary.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from edgestream.metrics import EventLog, RunDir, accuracy_plot, buffer_plot, read_events
from edgestream.runid import check_run_id, new_run_id
from edgestream.runner.engines import get_engine


class InProcessEngine(Protocol):
    """What `write_run` needs of an engine object: run to the end (writing step and eval lines to the
    EventLog it was built with), then its own summary figures (stop_reason, engine time, ...)."""

    def run(self) -> Any: ...

    def extra_summary(self, wall_s: float) -> dict[str, Any]: ...


def buffer_series(events: Iterable[dict]) -> list[tuple[int, float]]:
    """(step, max buffer_samples over devices) from step lines, in step order."""
    per_step: dict[int, float] = {}
    for e in events:
        if e.get("kind") == "step" and e.get("buffer_samples") is not None and e.get("step") is not None:
            s = int(e["step"])
            per_step[s] = max(per_step.get(s, 0.0), float(e["buffer_samples"]))
    return sorted(per_step.items())


def run_config(cfg: Any, engine: str | None = None, *, out: str | Path | None = None, run_id: str | None = None,
               progress: bool = True, **options: Any) -> tuple[Path, dict]:
    """Run `cfg` (an ExperimentConfig) on `engine` (default cfg.runtime.engine) and write its run
    directory; returns (path, summary). options go to the engine (base_dir for the simulator: the folder
    relative paths in the config are relative to). EngineUnavailable when the engine is not available,
    EngineError for problems only the engine can see."""
    name = engine or cfg.runtime.engine
    run = get_engine(name)
    return run(cfg, out=out, run_id=run_id, progress=progress, **options)


def write_run(cfg: Any, engine: str, build: Callable[[EventLog], InProcessEngine], *, out: str | Path | None = None,
              run_id: str | None = None) -> tuple[Path, dict]:
    """The run directory of an in-process engine (see module doc): build(events) makes the engine,
    which then runs; summary.json gets `engine`, `run`, the wall time and the engine's extra_summary
    (called with the engine's own run wall time)."""
    run = f"{cfg.name}-{check_run_id(run_id or new_run_id())}"
    parent = Path(out if out is not None else cfg.runtime.out)
    existed = (parent / run).exists()
    rd = RunDir(parent, run)
    rd.write_config(cfg.to_yaml())
    t_start = time.perf_counter()
    events = EventLog(rd.events_path)
    try:
        eng = build(events)
    except BaseException:  # the config cannot run here (e.g. more devices than samples): leave no debris
        events.close()
        if not existed:
            shutil.rmtree(rd.path, ignore_errors=True)
        raise
    try:
        t_run = time.perf_counter()
        eng.run()
        run_wall = time.perf_counter() - t_run
    finally:
        events.close()
    wall = time.perf_counter() - t_start
    summary = events.summary(target_accuracy=cfg.stop.target_accuracy, wall_s=wall, engine=engine, run=run,
                             **eng.extra_summary(run_wall))
    rd.write_summary(summary)
    label = f"{cfg.algorithm.name}"
    accuracy_plot({label: events.evals}, rd.path / "accuracy.png", title=run)
    buffer_plot({label: buffer_series(read_events(rd.events_path))}, rd.path / "buffer.png", title=run)
    return rd.path, summary
