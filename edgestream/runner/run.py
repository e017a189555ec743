"""One run of a config on a named engine: `run_config(cfg, engine)` looks the engine up in the registry
(edgestream.runner.engines) and runs it; every engine resolves the config into its run plan, asks
`engines.check_runs` whether it performs what the algorithm needs, and writes the same run directory
(edgestream.runner.rundir)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgestream.runner.engines import get_engine


def run_config(cfg: Any, engine: str | None = None, *, out: str | Path | None = None, run_id: str | None = None,
               progress: bool = True, **options: Any) -> tuple[Path, dict]:
    """Run `cfg` (an ExperimentConfig) on `engine` (default cfg.runtime.engine) and write its run
    directory; returns (path, summary). options go to the engine (base_dir for the simulator: the folder
    relative paths in the config are relative to). EngineUnavailable when the engine is not available,
    EngineError for problems only the engine can see (an algorithm it cannot perform included)."""
    run = get_engine(engine or cfg.runtime.engine)
    return run(cfg, out=out, run_id=run_id, progress=progress, **options)
