"""The engine registry: engine name -> the function that runs a config on that engine.

runner/ never imports an engine: an engine registers itself when its package is imported
(`edgestream.sim` registers "sim"; `edgestream.launch` registers "local"), and `get_engine` imports
the package named for an engine in `ENGINE_MODULES` the first time it is asked for. An engine that is
neither registered nor registers itself on import is "not available" (`EngineUnavailable`, a one-line
error the CLI reports with exit status 2).

An engine's run function (what `register_engine` takes and `get_engine` returns):

    run(cfg, *, out=None, run_id=None, progress=True, **options) -> (run directory, summary dict)

cfg: a validated ExperimentConfig; out: parent of the run directory (None: cfg.runtime.out); run_id:
None for a new one; progress: live display on a terminal; options: engine-specific keywords passed
through from the caller (the simulator takes base_dir; the local orchestrator bootstrap, resume, ...).
It writes the run directory of DESIGN.md (config.yaml, events.jsonl, summary.json with `engine`, plots)
and returns its path and the summary. In-process engines build theirs with `runner.run.write_run`.
Problems with the config that only the engine can see raise `EngineError` (one line each).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: run(cfg, *, out, run_id, progress, **options) -> (run directory, summary)
EngineRun = Callable[..., tuple[Path, dict[str, Any]]]

#: engine name -> the module that registers it when imported
ENGINE_MODULES: dict[str, str] = {"sim": "edgestream.sim", "local": "edgestream.launch"}

_ENGINES: dict[str, EngineRun] = {}


class EngineError(ValueError):
    """A run an engine cannot start (bad algorithm params, rates, dataset sizes, an unknown engine...);
    `problems` holds one line per problem, as `ConfigError` does."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class EngineUnavailable(EngineError):
    """The engine is not registered (its package is missing or does not register it)."""

    def __init__(self, name: str) -> None:
        super().__init__([f"engine {name!r} is not available"])
        self.name = name


def register_engine(name: str, run: EngineRun) -> None:
    """Make `run` the engine `name` (see the module doc for its signature); registering again replaces."""
    if not name or not isinstance(name, str):
        raise ValueError(f"engine name must be a non-empty string, got {name!r}")
    if not callable(run):
        raise TypeError(f"engine {name!r}: {run!r} is not callable")
    _ENGINES[name] = run


def unregister_engine(name: str) -> None:
    """Forget engine `name` (tests)."""
    _ENGINES.pop(name, None)


def get_engine(name: str) -> EngineRun:
    """The run function of engine `name`, importing its module (ENGINE_MODULES) on first use;
    `EngineUnavailable` when there is none."""
    run = _ENGINES.get(name)
    if run is not None:
        return run
    module = ENGINE_MODULES.get(name)
    if module is not None:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # the engine's package is not installed; any other failure is a bug
            if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
                raise
    run = _ENGINES.get(name)
    if run is None:
        raise EngineUnavailable(name)
    return run


def engine_names() -> list[str]:
    """Engines that are registered or have a module that may register them."""
    return sorted(set(_ENGINES) | set(ENGINE_MODULES))
