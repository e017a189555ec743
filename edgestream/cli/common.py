"""What every command module shares: the console, the managed broker's folder, loading a config, and the
one-line exits for bad input (exit status 2)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from edgestream.kafka.jars import cache_dir
from edgestream.runid import check_run_id as _valid_run_id

console = Console()


def default_broker_dir() -> Path:
    return cache_dir() / "broker"


def load(config: Path, overrides: list[str] | None = None, *, notes: bool = True):
    """load_config, or exit 2 with one line per problem (what `config validate` prints)."""
    from edgestream.launch.command import load_or_exit  # lazy: +800 ms start-up

    return load_or_exit(config, overrides, notes=notes)


def config_problems(exc: Exception) -> None:
    """Exit 2 with the problems of a ConfigError (or any error's message), one per line, on stderr."""
    for line in getattr(exc, "problems", None) or str(exc).splitlines():
        typer.echo(line, err=True)
    raise typer.Exit(2) from None


def bad_input(line: str) -> None:
    """Exit 2 with one line on stderr."""
    typer.echo(line, err=True)
    raise typer.Exit(2)


def check_out(out: Path | None, option: str = "--out") -> None:
    """Exit 2 when an output folder option names something that is not a folder."""
    if out is not None and out.exists() and not out.is_dir():
        bad_input(f"{option}: {str(out)!r} is not allowed; it exists and is not a folder")


def check_run_id(run_id: str | None) -> None:
    """Exit 2 when a --run-id option is not a valid run id."""
    if run_id is not None:
        try:
            _valid_run_id(run_id)
        except ValueError as exc:
            bad_input(f"--run-id: {exc}")
