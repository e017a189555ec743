"""`edgestream config validate` / `config show`, and `edgestream plugins`: what a config may say and name."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from edgestream.cli.common import config_problems, load
from edgestream.kafka.topic_settings import config_rules

config_app = typer.Typer(help="Validate and show experiment configs.", no_args_is_help=True)


@config_app.command("validate")
def config_validate(files: list[Path] = typer.Argument(..., help="experiment YAML file(s)"),
                    set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable), "
                                                   "applied to every FILE")) -> None:
    """Exit 0 when every FILE is a valid config; otherwise exit 2 after checking them all, with one line
    per problem (each naming its file). Checks what `run` checks before it starts: the schema, the
    plugins the config names, the dataset, the model built on the data's shape, the rate model."""
    from edgestream.config import ConfigError, load_config  # lazy: +250 ms start-up
    from edgestream.config.check import check_runnable  # lazy: +220 ms start-up
    from edgestream.runner.optim_notes import optimizer_notes  # lazy: +270 ms start-up

    bad = 0
    for file in files:
        try:
            cfg = load_config(file, set_ or [])
            problems = check_runnable(cfg)
            if problems:
                raise ConfigError(problems, str(file))
        except ConfigError as exc:
            bad += 1
            for line in exc.problems:  # with several files, every line names its file
                several = len(files) > 1 and not line.startswith(str(file))
                typer.echo(f"{file}: {line}" if several else line, err=True)
            continue
        for line in optimizer_notes(cfg):
            typer.echo(f"{file}: warning: {line}" if len(files) > 1 else f"warning: {line}", err=True)
        typer.echo(f"{file}: valid")
    if bad:
        if len(files) > 1:
            typer.echo(f"{bad} of {len(files)} config(s) invalid", err=True)
        raise typer.Exit(2)


@config_app.command("show")
def config_show(file: Path = typer.Argument(..., help="experiment YAML file"),
                set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Print the fully resolved config (defaults filled in, paths absolute, secrets shown as ***).
    runtime.out is shown as the folder a run started here would use (it resolves against the current
    directory); comment lines at the end say how kafka.topics resolves against a cluster (null's rule)."""
    cfg = load(file, set_)
    cfg.runtime.out = str(Path(cfg.runtime.out).absolute())
    sys.stdout.write(cfg.to_yaml())
    sys.stdout.write("".join(line + "\n" for line in config_rules(cfg.kafka.topics)))  # how kafka.topics resolves
    from edgestream.runner.plan import PlanError, RunPlan  # lazy: +270 ms start-up
    from edgestream.streams.drift import drift_lines

    try:  # when each drift scenario's change begins and ends on each device (nothing is loaded without one)
        drift = RunPlan.resolve(cfg, base_dir=file.parent).drift_scenario
    except PlanError as exc:
        config_problems(exc)
    sys.stdout.write("".join(f"# {line}\n" for line in drift_lines(drift)))


# ---------------------------------------------------------------- plugins
def plugins_list(kind: str = typer.Argument(None, help="models, datasets, algorithms, compressors, tasks, "
                                            "decoders or detectors (default: all)"),
                 as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """List what each pluggable kind offers and where it comes from: built-ins and installed entry points
    (group edgestream.<kind>). Any 'package.module:attribute' import path works too."""
    from edgestream.api import list_plugins  # lazy: +150 ms start-up
    from edgestream.plugins import REGISTRIES  # lazy: +18 ms start-up

    try:
        listing = list_plugins(kind)
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    kinds = list(listing)
    if as_json:
        print(json.dumps(listing, indent=1))
        return
    for k in kinds:
        print(f"{k} (entry-point group {REGISTRIES[k].group!r}; or an import path 'package.module:attribute'):")
        width = max((len(a["name"]) for a in listing[k]), default=0)
        src = max((len(a["source"]) for a in listing[k]), default=0)
        for a in listing[k]:
            print(f"  {a['name']:<{width}}  {a['source']:<{src}}  {a['target']}"
                  + (f"  -- {a['summary']}" if a["summary"] else ""))


