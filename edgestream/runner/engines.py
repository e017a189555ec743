"""The engine registry: engine name -> how a config runs there (`Engine`: its run function, the host
that schedules its workers, and the request kinds its performer can perform).

runner/ never imports an engine: an engine registers itself when its package is imported
(`edgestream.sim` registers "sim"; `edgestream.launch` registers "local"; `edgestream.runner.lockstep_run`
registers "lockstep"), and `get_engine` imports the module named for an engine in `ENGINE_MODULES`
(edgestream.engine_names: every engine's name, in one place) the first time it is asked for. An engine that is
neither registered nor registers itself on import is "not available" (`EngineUnavailable`, a one-line
error the CLI reports with exit status 2).

An engine's run function (what `register_engine` takes and `get_engine` returns):

    run(cfg, *, out=None, run_id=None, progress=True, **options) -> (run directory, summary dict)

cfg: a validated ExperimentConfig; out: parent of the run directory (None: cfg.runtime.out); run_id:
None for a new one; progress: live display on a terminal; options: engine-specific keywords passed
through from the caller (the simulator takes base_dir; the local orchestrator bootstrap, resume, ...).
It writes the run directory of DESIGN.md (config.yaml, events.jsonl, summary.json in the one schema of
`runner.summary`, plots) and returns its path and the summary. In-process engines build theirs with
`runner.rundir.write_run`, a real run with `runner.rundir.write_local_rundir`; both go through
`runner.rundir.finish`, which builds every summary.
Problems with the config that only the engine can see raise `EngineError` (one line each).

Capabilities: an engine registers the request kinds its performer performs (`performs`; None = every
kind). Whether an engine can run an algorithm is asked in ONE place, `check_runs(engine, algorithm)`,
from those and the kinds the algorithm's workers send (`AlgorithmSpec.requests`): the CLI, the
orchestrator and each trainer process ask it before anything starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgestream.engine_names import ENGINE_MODULES  # engine name -> the module that registers it

#: run(cfg, *, out, run_id, progress, **options) -> (run directory, summary)
EngineRun = Callable[..., tuple[Path, dict[str, Any]]]


@dataclass(frozen=True)
class Engine:
    """A registered engine: name; run (see the module doc); host: what schedules its workers ("simpy":
    virtual time in this process, "processes": one blocking trainer process per device, "lockstep":
    round robin in this process); performs: the request kinds its performer performs (None: all)."""

    name: str
    run: EngineRun
    host: str = "in-process"
    performs: frozenset[type] | None = None

    def missing(self, algorithm: Any) -> list[str]:
        """Names of the request kinds `algorithm` (an AlgorithmSpec) sends that this engine cannot perform."""
        if self.performs is None:
            return []
        return sorted(t.__name__ for t in algorithm.requests - self.performs)


_ENGINES: dict[str, Engine] = {}


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


def register_engine(name: str, run: EngineRun, *, host: str = "in-process",
                    performs: frozenset[type] | None = None) -> None:
    """Make `run` the engine `name` (see the module doc for its signature); registering again replaces."""
    if not name or not isinstance(name, str):
        raise ValueError(f"engine name must be a non-empty string, got {name!r}")
    if not callable(run):
        raise TypeError(f"engine {name!r}: {run!r} is not callable")
    _ENGINES[name] = Engine(name, run, host, frozenset(performs) if performs is not None else None)


def unregister_engine(name: str) -> None:
    """Forget engine `name` (tests)."""
    _ENGINES.pop(name, None)


def get_engine(name: str) -> EngineRun:
    """The run function of engine `name` (see `engine`)."""
    return engine(name).run


def engine(name: str) -> Engine:
    """The registered engine `name`, importing its module (ENGINE_MODULES) on first use;
    `EngineUnavailable` when there is none."""
    found = _ENGINES.get(name)
    if found is not None:
        return found
    module = ENGINE_MODULES.get(name)
    if module is not None:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # the engine's package is not installed; any other failure is a bug
            if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
                raise
    found = _ENGINES.get(name)
    if found is None:
        raise EngineUnavailable(name)
    return found


def check_runs(name: str, algorithm: Any) -> None:
    """EngineError (one line) when engine `name` cannot perform a request kind `algorithm` (an
    AlgorithmSpec) sends, or `algorithm` does not declare it (`AlgorithmSpec.engines`: a user's algorithm
    says where it runs); the line names the engines that can."""
    declared = getattr(algorithm, "engines", None)
    if declared is not None and name not in declared:
        raise EngineError([f"algorithm.name: {algorithm.name!r} runs on the engines {', '.join(declared) or 'none'} "
                           f"(its AlgorithmSpec.engines), not on {name!r}"])
    missing = engine(name).missing(algorithm)
    if not missing:
        return
    able = [n for n in engine_names() if _able(n, algorithm)]
    family = "a parameter-server algorithm" if algorithm.family == "ps" else f"a {algorithm.family} algorithm"
    hint = f" (use --engine {able[0]})" if able else ""
    raise EngineError([f"algorithm.name: engine {name!r} cannot run {algorithm.name!r} ({family}): it does not "
                       f"perform {', '.join(missing)}; engines that can: {', '.join(able) or 'none'}{hint}"])


def _able(name: str, algorithm: Any) -> bool:
    try:
        return not engine(name).missing(algorithm)
    except EngineError:
        return False


def engine_names() -> list[str]:
    """Engines that are registered or have a module that may register them."""
    return sorted(set(_ENGINES) | set(ENGINE_MODULES))
