"""The Python API (`import edgestream`): load a config, run it on an engine, compare algorithms.

    cfg = edgestream.load_config("exp.yaml", overrides=["devices.count=8"])   # or a dict
    result = edgestream.run(cfg, engine="sim", progress=False)               # a RunResult
    result.summary["final_accuracy"], result.records.evals, result.run_dir
    table = edgestream.compare(cfg, algorithms=["ddl", "scadles"])           # a CompareResult

The same route as the CLI (`edgestream run` / `compare`): `config.load_config` / `validate_dict`,
`runner.run.run_config` and `comparisons.run_compare`; nothing here runs a config another way.
Every problem raises, nothing exits: `ConfigError` (one line per problem in `.problems`), `EngineError`
(a run the engine cannot start; `PlanError` is one), `RunFailed` (a real run that could not start or
did not finish: broker unreachable, a child died, interrupted), `PluginError` for a plugin that does
not resolve. Progress is the engines' own display (a bar on a terminal, a line per update otherwise
for real runs); `progress=False` silences it. See docs/python-api.md.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from edgestream.config import ConfigError, ExperimentConfig, bootstrap_ok, validate_dict

#: what `load_config`, `run` and `compare` take as a config: a YAML file, a dict of the same fields, or a
#: loaded ExperimentConfig
ConfigLike = str | os.PathLike | Mapping[str, Any] | ExperimentConfig


class RunFailed(RuntimeError):
    """A real run that could not start or did not finish (the local engine: no broker answered, a
    child process died, a signal, a run directory that exists...). `str()` is the reason in one line;
    `detail`: the lines that follow it (a dead child's log tail); `run_dir`: the run directory when one
    was written (inspect it, or continue it with `run(..., resume=run_dir)`); `code`: the exit status
    the CLI reports for it."""

    def __init__(self, reason: str, *, detail: Sequence[str] = (), run_dir: Path | None = None,
                 code: int = 1) -> None:
        super().__init__(reason)
        self.reason, self.detail, self.run_dir, self.code = reason, list(detail), run_dir, code


# ---------------------------------------------------------------- configs
def load_config(config: ConfigLike, overrides: Iterable[str] | None = None) -> ExperimentConfig:
    """A validated ExperimentConfig from a YAML file, a dict of the same fields, or a config (copied
    when `overrides` change it). overrides: ``"KEY.PATH=VALUE"`` strings as with ``--set``.

    A dict is checked as a file is, except that `name` may be left out: relative paths (data.root,
    data.path, devices.rates.path, ...) resolve against the current directory, which also joins the
    import path of plugins named ``"module:attribute"`` (here and in the engines' child processes), and
    what can be built without a broker is built (dataset files, model on the data's shape, rates).
    ConfigError lists every problem, one line each. A setting the algorithm will not use is a warning.
    """
    from edgestream.config import load_config as load_file

    overrides = list(overrides or [])
    if isinstance(config, ExperimentConfig):
        if not overrides:
            return config
        cfg = _load_dict(config.model_dump(mode="json"), overrides, "config")
    elif isinstance(config, Mapping):
        cfg = _load_dict(copy.deepcopy(dict(config)), overrides, "config (dict)")
    elif isinstance(config, (str, os.PathLike)):
        cfg = load_file(config, overrides)
    else:
        raise TypeError(f"config: expected a YAML file path, a dict or an ExperimentConfig, "
                        f"got {type(config).__name__}")
    from edgestream.runner.optim_notes import optimizer_notes

    for line in optimizer_notes(cfg):
        warnings.warn(line, UserWarning, stacklevel=2)
    return cfg


def _load_dict(raw: dict, overrides: list[str], source: str) -> ExperimentConfig:
    """`config.load_config` for a dict (see `load_config`): overrides, paths and plugins from the current
    directory, validation, the buildable check."""
    from edgestream.config import load_dict

    return load_dict(raw, overrides, None, source)


# ---------------------------------------------------------------- results
class Records(list):
    """The lines of a run's events.jsonl, in order, as dicts: ``kind`` "step" (one per device per step:
    time, device, step, batch, wait_s, compute_s, comm_s, buffer_samples, dropped, bytes_sent, loss,
    ...) and "eval" (time, step, and the task's metrics: accuracy or rmse/mae, and loss)."""

    @property
    def steps(self) -> list[dict[str, Any]]:
        return [r for r in self if r.get("kind", "step") == "step"]

    @property
    def evals(self) -> list[dict[str, Any]]:
        return [r for r in self if r.get("kind") == "eval"]


@dataclass(repr=False)
class RunResult:
    """One finished run: its run directory, summary.json as a dict, the config it ran, and (read on
    first use) the per-step and eval records of events.jsonl."""

    run_dir: Path
    summary: dict[str, Any]
    config: ExperimentConfig | None = None

    def __repr__(self) -> str:
        s = self.summary
        return (f"RunResult(run_dir={str(self.run_dir)!r}, engine={s.get('engine')!r}, "
                f"stop_reason={s.get('stop_reason')!r}, final_metrics={s.get('final_metrics')!r})")

    @cached_property
    def records(self) -> Records:
        from edgestream.metrics import read_events

        path = self.run_dir / "events.jsonl"
        return Records(read_events(path) if path.is_file() else [])

    @classmethod
    def from_dir(cls, run_dir: str | os.PathLike) -> RunResult:
        """The result of a run written earlier (its summary.json and config.yaml; secrets there are ***)."""
        import json

        import yaml

        path = Path(run_dir)
        try:
            summary = json.loads((path / "summary.json").read_text())
        except (OSError, ValueError) as exc:
            raise FileNotFoundError(f"{path}: not a finished run directory (summary.json: {exc})") from None
        cfg = None
        if (path / "config.yaml").is_file():
            cfg = validate_dict(yaml.safe_load((path / "config.yaml").read_text()), str(path / "config.yaml"))
        return cls(path, summary, cfg)


@dataclass
class CompareResult:
    """A comparison: `rows` one dict per run (label, algorithm, engine, the headline figures of
    `comparisons.ROW_KEYS` -- time_s is the engine's time, virtual in the simulator --, speedup over
    the first row's time to target, run_dir), `runs` {label: RunResult}, `table` the markdown table of
    compare.md, `folder` where compare.md and compare.png are."""

    folder: Path
    rows: list[dict[str, Any]]
    runs: dict[str, RunResult]
    table: str

    def __str__(self) -> str:
        return self.table


# ---------------------------------------------------------------- running
def _quiet(_line: str) -> None:
    """The local engine's echo when progress is off."""


def _local_options(bootstrap: str | None, progress: bool) -> dict[str, Any]:
    if bootstrap is not None and not bootstrap_ok(bootstrap):
        raise ConfigError([f"bootstrap: {bootstrap!r} is not allowed; must be HOST:PORT[,HOST:PORT...]"], "run")
    options: dict[str, Any] = {"bootstrap": bootstrap}
    if not progress:
        options["echo"] = _quiet
    return options


def _run_failed(exc: BaseException) -> RunFailed | None:
    """The RunFailed for an engine's own run failure (the local engine's LaunchError), else None."""
    import sys

    orchestrator = sys.modules.get("edgestream.launch.orchestrator")
    if orchestrator is None or not isinstance(exc, orchestrator.LaunchError):
        return None
    return RunFailed(str(exc), detail=exc.detail, run_dir=exc.run_dir, code=exc.code)


def run(config: ConfigLike | None, engine: str | None = None, *, out: str | os.PathLike | None = None,
        overrides: Iterable[str] | None = None, progress: bool = True, run_id: str | None = None,
        bootstrap: str | None = None, resume: str | os.PathLike | None = None) -> RunResult:
    """Run `config` once on `engine` ("sim", "local" or "lockstep": edgestream.engine_names; default the config's
    runtime.engine) and return its RunResult. out: parent of the run directory (default runtime.out); run_id:
    default a new one.

    Local engine only: bootstrap (HOST:PORT of a Kafka broker; default runtime.bootstrap, else the managed
    local broker), resume (a run directory to continue from its checkpoints; `config` may then be None:
    the run's own config.yaml, which needs no secrets). Raises ConfigError, EngineError, RunFailed.
    """
    if resume is not None:
        if out is not None or run_id is not None:
            raise ValueError("resume takes the run id and folder from the run directory; leave out out and run_id")
        if engine not in (None, "local"):
            raise ValueError(f"resume: only local runs resume, not engine {engine!r}")
        engine = "local"
        if config is None:
            config = Path(resume) / "config.yaml"
            if not config.is_file():
                raise ConfigError([f"resume: {resume} is not a run directory (no config.yaml)"], "run")
    elif config is None:
        raise TypeError("run: give a config (or resume=RUN_DIR)")
    cfg = load_config(config, overrides)
    engine = engine or cfg.runtime.engine
    if engine == "local":
        options = {**_local_options(bootstrap, progress), "resume": resume}
    elif bootstrap is not None:
        raise ValueError(f"bootstrap: engine {engine!r} uses no broker (bootstrap is for the local engine)")
    else:
        options = {}
    from edgestream.runner.run import run_config

    try:
        path, summary = run_config(cfg, engine, out=out, run_id=run_id, progress=progress, **options)
    except Exception as exc:
        failed = _run_failed(exc)
        if failed is None:
            raise
        raise failed from exc
    return RunResult(Path(path).absolute(), summary, cfg)


def compare(config: ConfigLike, algorithms: str | Sequence[str], engines: str | Sequence[str] = ("sim",), *,
            overrides: Iterable[str] | None = None, out: str | os.PathLike | None = None, progress: bool = True,
            run_id: str | None = None, bootstrap: str | None = None) -> CompareResult:
    """Run `config` once per algorithm on each engine (``edgestream compare``) and return the table.

    algorithms: variant specs, e.g. ``["ddl", "scadles"]`` or ``["scadles[algorithm.buffer=persist]"]``
    (KEY.PATH=VALUE overrides per variant; a comma string works too); the batch rule of
    `edgestream.comparisons` applies. engines: ["sim"], ["local"] or both (labels then read ``<variant>@<engine>``).
    Writes `<out>/<name>-compare-<run id>/` (a run directory per run, compare.md, compare.png).
    Raises ConfigError (a variant's config included), ValueError (a malformed variant list), EngineError,
    RunFailed.
    """
    from edgestream.comparisons import parse_variants, run_compare, summary_row, variant_config

    cfg = load_config(config, overrides)
    specs = algorithms if isinstance(algorithms, str) else ",".join(algorithms)
    names = [e.strip() for e in (engines.split(",") if isinstance(engines, str) else engines) if e.strip()]
    variants = parse_variants(specs)
    options = _local_options(bootstrap, progress) if "local" in names else {}
    if bootstrap is not None and "local" not in names:
        raise ValueError("bootstrap: only the local engine uses a broker")
    try:
        folder, summaries, table = run_compare(cfg, variants, out=out, run_id=run_id, progress=progress,
                                               engine=",".join(names), **options)
    except Exception as exc:
        failed = _run_failed(exc)
        if failed is None:
            raise
        raise failed from exc
    configs = {v.label: variant_config(cfg, v) for v in variants}
    rows, runs = [], {}
    base_t = None
    for i, (label, s) in enumerate(summaries.items()):
        variant, _, eng = label.rpartition("@") if len(names) > 1 else (label, "", names[0])
        t = s.get("time_to_target_s")
        base_t = t if i == 0 else base_t
        runs[label] = RunResult(Path(s["run_dir"]).absolute(), s, configs[variant])
        rows.append({"label": label, "algorithm": configs[variant].algorithm.name, "engine": eng,
                     **summary_row(s), "speedup": (base_t / t) if base_t and t else None,
                     "run_dir": str(runs[label].run_dir)})
    return CompareResult(Path(folder).absolute(), rows, runs, table)


def list_plugins(kind: str | None = None) -> dict[str, list[dict[str, str]]]:
    """What each pluggable kind offers ({kind: [{name, source, target, summary}]}, as `edgestream plugins
    --json` prints): built-ins and installed entry points. Any "package.module:attribute" works too."""
    from edgestream.plugins import REGISTRIES
    from edgestream.sync import registry as _algorithms  # noqa: F401 - registers the built-in algorithms

    if kind is not None and kind not in REGISTRIES:
        raise ValueError(f"kind: {kind!r} is not allowed; must be one of {', '.join(REGISTRIES)}")
    return {k: [{"name": a.name, "source": a.source, "target": a.target, "summary": a.summary}
                for a in REGISTRIES[k].available()] for k in ([kind] if kind else list(REGISTRIES))}
