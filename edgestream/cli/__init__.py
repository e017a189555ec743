"""The `edgestream` command (typer). Thin: every command calls into the package.

One module per command group: config (config validate/show, plugins), broker (broker start/status/stop/fetch;
cluster: the --nodes N instance), topics, models (a run's model versions) and infer, produce, workers (train,
ps), devices (rates, profile), status, runs (run, compare, collect, demo, reproduce); common holds what they share.
The commands are registered here, in the order `edgestream --help` lists them.

Start-up: every command pays for what these modules import at their top (~0.17 s, no torch), so an import
that would add 5 ms or more to that is made inside the command that needs it, with its measured cost."""

from __future__ import annotations

import sys

import typer
from typer.main import get_command

from edgestream.cli import devices, infer, produce, runs, status, workers
from edgestream.cli.broker import broker_app
from edgestream.cli.config import config_app, plugins_list
from edgestream.cli.models import models_app
from edgestream.cli.topics import topics_app

__all__ = ["app", "main"]

app = typer.Typer(help="edgestream: train models on data streaming in from heterogeneous edge devices "
                       "through Apache Kafka.", no_args_is_help=True, add_completion=False)
app.add_typer(config_app, name="config")
app.add_typer(broker_app, name="broker")
app.add_typer(topics_app, name="topics")
app.add_typer(models_app, name="models")
for _name, _command in (("plugins", plugins_list), ("produce", produce.produce), ("train", workers.train_cmd),
                        ("ps", workers.ps_cmd), ("rates", devices.rates_cmd), ("profile", devices.profile_cmd),
                        ("reproduce", runs.reproduce_cmd), ("status", status.status_cmd),
                        ("collect", runs.collect_cmd), ("demo", runs.demo), ("run", runs.run_cmd),
                        ("compare", runs.compare_cmd), ("infer", infer.infer_cmd)):
    app.command(_name)(_command)


def main(args: list[str] | None = None) -> None:
    """The console script: `app`, with usage errors (a missing argument, an unknown option, a value of
    the wrong type) reported as one line on stderr and exit status 2, like every bad input."""
    try:
        code = get_command(app).main(args=args, prog_name="edgestream", standalone_mode=False)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except Exception as exc:
        if not (hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)):
            raise
        # a click usage error (click is vendored inside typer, so its classes are not imported here)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        typer.echo("error: " + " ".join(exc.format_message().split()) + hint, err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)

