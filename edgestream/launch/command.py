"""`edgestream run --engine local` and `edgestream run --resume RUN_DIR`: the local engine's options and how its
failures end the command (cli/runs.py runs every engine through the registry and hands these over)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import typer

from edgestream import settings
from edgestream.launch.procs import SECRET_ENV, SECRET_FD_ENV
from edgestream.runner.report import print_end

__all__ = ["SECRET_ENV", "SECRET_FD_ENV", "child_secrets", "engine_problems", "launch_failed", "load_for_run",
           "load_or_exit", "local_options"]


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
    from edgestream.runner.optim_notes import optimizer_notes

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
    """Put the secret runtime.kafka_client values handed to this process back in place of their masks (a
    child of the orchestrator reads the run's config.yaml, where they show as ***): from the file
    descriptor named by EDGESTREAM_KAFKA_SECRETS_FD (read to its end, then closed), or, with a warning,
    from EDGESTREAM_KAFKA_SECRETS itself. Both variables are dropped, so nothing this process starts
    sees them; a bad handover exits 2 with one line."""
    from edgestream.config import SECRET_MASK

    fd_text, raw = settings.kafka_secrets_fd(environ, drop=True), settings.kafka_secrets(environ, drop=True)
    values: dict = {}
    if raw:
        typer.echo(f"warning: {SECRET_ENV}: secrets in the environment stay readable in /proc/<pid>/environ for "
                   f"this process's whole life; hand them over on a file descriptor ({SECRET_FD_ENV}, see "
                   "docs/runtime.md) or keep them in the config file", err=True)
        values.update(_secret_values(raw, SECRET_ENV))
    if fd_text:
        values.update(_secret_values(_read_fd(fd_text), f"{SECRET_FD_ENV}={fd_text}"))
    client = cfg.runtime.kafka_client
    for key, value in values.items():
        if client.get(key) == SECRET_MASK:
            client[key] = str(value)


def _read_fd(fd_text: str) -> str:
    """Everything on file descriptor `fd_text` (a pipe or a file), which is then closed."""
    fd = int(fd_text) if fd_text.strip().isdigit() else -1
    if fd < 0:
        _fail(f"{SECRET_FD_ENV}={fd_text!r}: not a file descriptor number")
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError as exc:
        _fail(f"{SECRET_FD_ENV}={fd}: cannot read the runtime.kafka_client secrets from file descriptor {fd} "
              f"({exc.strerror}); open it for reading, e.g. `{fd}<secrets.json`")
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def _secret_values(raw: str, where: str) -> dict:
    try:
        values = json.loads(raw)
    except ValueError:
        values = None
    if not isinstance(values, dict):
        _fail(f"{where}: not a JSON object of runtime.kafka_client secrets (key: value)")
    return values


def local_options(*, out: Path | None, run_id: str | None, bootstrap: str | None, resume: Path | None
                  ) -> dict[str, Any]:
    """The local engine's options of `edgestream run` (what the registry's run function for "local" takes
    besides the common ones), checked: exit 2 with one line for a bad --bootstrap, or --resume with --out or
    --run-id."""
    from edgestream.config import bootstrap_ok

    if bootstrap is not None and not bootstrap_ok(bootstrap):
        _fail(f"--bootstrap: {bootstrap!r} is not allowed; must be HOST:PORT[,HOST:PORT...]")
    if resume is not None and (out is not None or run_id is not None):
        _fail("--resume takes the run id and folder from RUN_DIR; leave out --run-id and --out")
    return {"bootstrap": bootstrap, "resume": resume}


def engine_problems(exc: Exception) -> None:
    """A local run the engine refused (EngineError): exit 2 with one `error: ` line per problem."""
    for line in getattr(exc, "problems", None) or str(exc).splitlines():
        typer.echo(f"error: {line}", err=True)
    raise typer.Exit(2) from None


def launch_failed(exc: Exception, as_json: bool = False) -> None:
    """A local run that could not start or did not finish (LaunchError): an interrupted run's summary as at a
    stop (`print_end`), then one line on stderr naming the problem (a dead child's log tail follows); exit with
    the error's code: 1 (child died, broker unreachable), 130/143 (SIGINT/SIGTERM)."""
    code, run_dir = getattr(exc, "code", 1), getattr(exc, "run_dir", None)
    summary_file = Path(run_dir) / "summary.json" if run_dir is not None else None
    if code in (130, 143) and summary_file is not None and summary_file.is_file():
        with contextlib.suppress(ValueError, OSError):  # an interrupted run: what it reached, as at a stop
            print_end(json.loads(summary_file.read_text()), run_dir, as_json)
    typer.echo(f"error: {exc}", err=True)
    for line in getattr(exc, "detail", None) or []:
        typer.echo(line, err=True)
    raise typer.Exit(code) from None
