"""Resuming a local run (`edgestream run --resume RUN_DIR`): which run directory, and whether its checkpoints let
it go on -- each refusal one line (LaunchError, exit 2)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgestream.config import RESUME_MAY_CHANGE
from edgestream.launch.errors import LaunchError
from edgestream.runid import check_run_id


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            d = _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
            if d is not None:
                return d
        return None
    return None if a == b else path


def resume_target(resume: Path, plan: Any) -> tuple[Path, str]:
    """(out, run id) of the run directory `resume`; LaunchError (exit 2) when it is not a local run of
    this config."""
    import yaml

    resume = Path(resume)
    if not (resume / "config.yaml").is_file():
        raise LaunchError(f"--resume {resume}: not a run directory (no config.yaml)", 2)
    prefix = plan.run_prefix
    if not resume.name.startswith(prefix):
        raise LaunchError(f"--resume {resume}: the folder is not a run of {plan.name!r} with algorithm "
                          f"{plan.algorithm_name!r} (expected {prefix}<run id>)", 2)
    run_id = resume.name[len(prefix):]
    try:
        check_run_id(run_id)
    except ValueError as exc:
        raise LaunchError(f"--resume {resume}: {exc}", 2) from None
    summary = resume / "summary.json"
    if summary.is_file():
        with contextlib.suppress(ValueError, OSError):
            engine = json.loads(summary.read_text()).get("engine")
            if engine not in (None, "local"):
                raise LaunchError(f"--resume {resume}: a run of engine {engine!r}; only local runs resume", 2)
    from edgestream.config import ConfigError, validate_dict

    try:  # both sides resolved the same way (defaults filled in, secrets masked)
        old = yaml.safe_load(validate_dict(yaml.safe_load((resume / "config.yaml").read_text())).to_yaml())
    except (ConfigError, yaml.YAMLError, OSError) as exc:
        problem = " ".join(str(exc).split())
        raise LaunchError(f"--resume {resume}: its config.yaml does not load ({problem})", 2) from None
    new = yaml.safe_load(plan.cfg.to_yaml()) or {}
    for section in RESUME_MAY_CHANGE:
        old.pop(section, None)
        new.pop(section, None)
    diff = _first_difference(old, new)
    if diff is not None:
        raise LaunchError(f"--resume {resume}: the config differs from the run's config.yaml at {diff}; a resumed "
                          f"run may change only {', '.join(RESUME_MAY_CHANGE)}", 2)
    return resume.parent, run_id


def check_resume_checkpoints(path: Path, plan: Any, run_name: str, echo: Callable[[str], None]) -> None:
    """A resumed run needs a checkpoint of every rank to continue from: else LaunchError (exit 2), one line.
    Ranks ahead of the others go back to their previous checkpoint, said on `echo`."""
    if not plan.checkpoints:
        raise LaunchError(f"--resume {path}: checkpoint.every_steps is null, so the run saved no checkpoint "
                          "to continue from", 2)
    missing = [str(r) for r in range(plan.world) if not (path / "checkpoints" / f"rank{r}.pt").is_file()]
    if missing:
        raise LaunchError(f"--resume {path}: no checkpoint of rank(s) {', '.join(missing)} in "
                          f"{path / 'checkpoints'} (the run stopped before its first checkpoint)", 2)
    # every file whole (checksum), of this run, rank and config (identity), and, where the workers
    # move in lockstep (not the PS family), all at one step: else one line naming the file
    # (a rank killed after the others wrote a step's checkpoint: those go back to their previous one)
    from edgestream.trainer.checkpoint import CheckpointError, agree_checkpoints, check_checkpoints, config_pin

    try:
        if plan.algorithm.family == "ps":
            check_checkpoints(path, plan.world, run=run_name, pin=config_pin(plan.cfg), agree=False)
            return
        steps, back = agree_checkpoints(path, plan.world, run=run_name, pin=config_pin(plan.cfg))
    except CheckpointError as exc:
        raise LaunchError(f"--resume: {exc}", 2) from None
    if back:
        echo(f"--resume: rank(s) {', '.join(map(str, back))} continue from their previous checkpoint at step "
             f"{steps[0]}, the newest step every rank's checkpoint holds (a rank stopped before writing the next "
             "one); their steps after it are trained again")
