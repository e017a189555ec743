"""`edgestream run --engine local` and `edgestream run --resume RUN_DIR`: the command's behaviour (cli.py
only hands the options over)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

#: the environment variable that hands runtime.kafka_client's secret values to the orchestrator's
#: children (a JSON object), so that they never reach the disk
SECRET_ENV = "EDGESTREAM_KAFKA_SECRETS"
#: summary.json keys printed as the one-line JSON summary on stdout
PRINTED = ("time_to_target_s", "final_accuracy", "final_metrics", "steps", "buffer_max_samples", "dropped_total",
           "floats_sent_total", "cnc_ratio", "stop_reason", "run_time_s", "wall_s")


def _fail(line: str, code: int = 2) -> None:
    typer.echo(line, err=True)
    raise typer.Exit(code)


def load_for_run(config: Path | None, overrides: list[str] | None, resume: Path | None):
    """The config of a local run: CONFIG (+ --set), or with --resume and no CONFIG the run's own
    config.yaml (secrets there are masked: LocalRun refuses a masked secret with one line)."""
    if config is None:
        if resume is None:
            _fail("CONFIG is required (or --resume RUN_DIR to continue a run from its config.yaml)")
        config = Path(resume) / "config.yaml"
        if not config.is_file():
            _fail(f"--resume {resume}: not a run directory (no config.yaml)")
    return load_or_exit(config, overrides)


def load_or_exit(config: Path, overrides: list[str] | None = None, *, notes: bool = True):
    """load_config, or exit 2 with one line per problem (what `config validate` prints); with `notes`,
    a warning line per optimizer setting the algorithm will not use (the orchestrator's children, which
    load the config it wrote, pass False: the user saw them once)."""
    from edgestream.config import ConfigError, load_config
    from edgestream.runner.plan import optimizer_notes

    try:
        cfg = load_config(config, overrides or [])
    except ConfigError as exc:
        for line in exc.problems:
            typer.echo(line, err=True)
        raise typer.Exit(2) from None
    for line in optimizer_notes(cfg) if notes else []:
        typer.echo(f"warning: {line}", err=True)
    child_secrets(cfg)
    return cfg


def child_secrets(cfg, environ=None) -> None:
    """A child of the orchestrator reads the run's config.yaml, where secret runtime.kafka_client values
    are masked: put the values the orchestrator handed over in EDGESTREAM_KAFKA_SECRETS (JSON, never on
    disk) back in place of the masks, and drop the variable so that nothing this process starts sees it."""
    import os

    from edgestream.config import SECRET_MASK

    env = os.environ if environ is None else environ
    raw = env.pop(SECRET_ENV, None)
    if not raw:
        return
    try:
        values = json.loads(raw)
    except ValueError:
        _fail(f"{SECRET_ENV}: not a JSON object of runtime.kafka_client secrets")
    client = cfg.runtime.kafka_client
    for key, value in values.items():
        if client.get(key) == SECRET_MASK:
            client[key] = str(value)


def run_local_command(cfg, *, out: Path | None, run_id: str | None, bootstrap: str | None,
                      resume: Path | None, quiet: bool) -> None:
    """Run `cfg` with the local engine (or continue `resume`); print the run directory on stderr and a
    one-line JSON summary on stdout; exit 1 (child died, broker unreachable), 2 (bad input), 130/143
    (SIGINT/SIGTERM) with one line on stderr naming the problem (a dead child's log tail follows)."""
    from edgestream.config import bootstrap_ok
    from edgestream.launch.orchestrator import LaunchError, run_local
    from edgestream.runner.engines import EngineError

    if bootstrap is not None and not bootstrap_ok(bootstrap):
        _fail(f"--bootstrap: {bootstrap!r} is not allowed; must be HOST:PORT[,HOST:PORT...]")
    if resume is not None and (out is not None or run_id is not None):
        _fail("--resume takes the run id and folder from RUN_DIR; leave out --run-id and --out")
    try:
        path, summary = run_local(cfg, out=out, run_id=run_id, progress=not quiet, bootstrap=bootstrap,
                                  resume=resume)
    except EngineError as exc:
        for line in exc.problems:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2) from None
    except LaunchError as exc:
        typer.echo(f"error: {exc}", err=True)
        for line in exc.detail:
            typer.echo(line, err=True)
        raise typer.Exit(exc.code) from None
    typer.echo(f"run directory: {path}", err=True)
    print(json.dumps({k: summary.get(k) for k in PRINTED}), flush=True)
