"""`edgestream topics list` / `topics delete`: the runs a broker holds (topics and consumer groups, by run)
and removing them. The logic is edgestream.kafka.lifecycle's; this is the command line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from confluent_kafka import KafkaException

from edgestream.cli.common import default_broker_dir, load
from edgestream.kafka.admin import wait_for_broker
from edgestream.kafka.cluster import managed as managed_instance
from edgestream.kafka.lifecycle import (
    LifecycleError,
    RunInfo,
    delete_runs,
    find_runs,
    format_age,
    list_runs,
    older_than,
    parse_duration,
)
from edgestream.kafka.security import KafkaRefused

topics_app = typer.Typer(help="List and delete runs' topics and consumer groups on a broker.", no_args_is_help=True)

BOOTSTRAP_HELP = "HOST:PORT[,HOST:PORT...] of the broker; default the config's runtime.bootstrap, else the managed " \
                 "local broker when it runs"
CONFIG_HELP = "experiment YAML: its runtime.bootstrap and runtime.kafka_client (TLS/SASL settings)"


def _fail(line: str, code: int = 2) -> None:
    typer.echo(line, err=True)
    raise typer.Exit(code)


def _connect(bootstrap: str | None, config: Path | None) -> tuple[str, dict]:
    """(bootstrap, client security settings) from the options, the config or the managed broker; exit 2
    with one line when no broker answers there."""
    security: dict = {}
    if config is not None:
        cfg = load(config, None, notes=False)
        security = dict(cfg.runtime.kafka_client or {})
        bootstrap = bootstrap or cfg.runtime.bootstrap
    if not bootstrap:
        managed = managed_instance(default_broker_dir())  # the managed broker, or cluster
        if managed.running_pid() is None:
            _fail("--bootstrap: required (or --config with runtime.bootstrap; the managed local broker does not run)")
        bootstrap = managed.read_state()["bootstrap"]
    try:
        wait_for_broker(bootstrap, security, attempts=2)
    except KafkaRefused as exc:  # it answered, and refused these credentials or certificates: its own line
        _fail(str(exc))
    except Exception as exc:  # noqa: BLE001 -- any failure to reach it is one line
        _fail(f"--bootstrap {bootstrap}: no Kafka broker answers ({exc})")
    return bootstrap, security


def _older(text: str | None) -> float | None:
    try:
        return parse_duration(text) if text is not None else None
    except LifecycleError as exc:
        _fail(f"error: {exc}")
    return None


def _runs(bootstrap: str, security: dict, names: list[str] | None) -> list[RunInfo]:
    """The runs on the broker (those `names` mean, if given); exit 2 naming a run that is not there, 1 with one
    line when Kafka does not answer."""
    try:
        runs = list_runs(bootstrap, security)
    except (KafkaException, LifecycleError, TimeoutError) as exc:
        _fail(f"error: listing the runs on {bootstrap} failed: {exc}", 1)
    try:
        return find_runs(runs, names) if names else runs
    except LifecycleError as exc:
        _fail(f"error: {exc}")
    return []


@topics_app.command("list")
def topics_list(run: list[str] = typer.Option(None, "--run", help="only this run (name "
                                              "<name>-<algorithm>-<run id>, or run id); "
                                              "repeatable; its topic and group names are shown"),
                older: str = typer.Option(None, "--older-than", help="only runs older than this: 30m, 2h, 7d"),
                bootstrap: str = typer.Option(None, "--bootstrap", help=BOOTSTRAP_HELP),
                config: Path = typer.Option(None, "--config", help=CONFIG_HELP),
                as_json: bool = typer.Option(False, "--json", help="one JSON object per run")) -> None:
    """The runs on a broker: per run its topics, partitions, messages, consumer groups, age (from the run id's
    time, else its earliest message) and whether it is live (its orchestrator holds it). Read-only."""
    seconds = _older(older)
    bootstrap, security = _connect(bootstrap, config)
    now = time.time()
    runs = _runs(bootstrap, security, run)
    if seconds is not None:
        runs = older_than(runs, seconds, now)
    if as_json:
        for info in runs:
            typer.echo(json.dumps(info.as_dict(now)))
        return
    if not runs:
        typer.echo(f"no runs on {bootstrap}" + (f" older than {older}" if older else ""))
        return
    width = max(len("RUN"), *(len(r.run) for r in runs))
    typer.echo(f"{'RUN':<{width}}  {'AGE':>7}  {'TOPICS':>6}  {'PARTITIONS':>10}  {'MESSAGES':>12}  {'GROUPS':>6}  "
               "STATE")
    for info in runs:
        state = f"live ({info.holder})" if info.holder else "idle"
        typer.echo(f"{info.run:<{width}}  {format_age(info.age_s(now)):>7}  {len(info.topics):>6}  "
                   f"{info.partitions:>10}  {info.messages:>12,}  {len(info.groups):>6}  {state}")
        if run:
            typer.echo(f"  topics: {', '.join(info.topics)}")
            typer.echo(f"  consumer groups: {', '.join(info.groups) or 'none'}")
    typer.echo(f"{len(runs)} run(s) on {bootstrap}: {sum(len(r.topics) for r in runs)} topics, "
               f"{sum(r.partitions for r in runs)} partitions, {sum(r.messages for r in runs):,} messages, "
               f"{sum(len(r.groups) for r in runs)} consumer groups")


@topics_app.command("delete")
def topics_delete(run: list[str] = typer.Option(None, "--run", help="a run to delete (name "
                                                "<name>-<algorithm>-<run id>, or run "
                                                "id); repeatable"),
                  older: str = typer.Option(None, "--older-than", help="every run older than this: 30m, 2h, 7d"),
                  all_runs: bool = typer.Option(False, "--all-runs", help="every run on the broker"),
                  yes: bool = typer.Option(False, "--yes", help="delete (without it: a dry run that only shows what "
                                           "would go)"),
                  bootstrap: str = typer.Option(None, "--bootstrap", help=BOOTSTRAP_HELP),
                  config: Path = typer.Option(None, "--config", help=CONFIG_HELP)) -> None:
    """Delete runs' topics and consumer groups: a dry run unless --yes. A live run (its orchestrator holds it) is
    never deleted; a topic that is no run's (no <name>-<algorithm>-<run id> prefix, Kafka's internal __*) is never
    touched.
    Exit 1 when a run named with --run is live or something could not be deleted."""
    chosen = sum([bool(run), older is not None, all_runs])
    if chosen != 1:
        _fail("error: choose the runs with exactly one of --run RUN (repeatable), --older-than DURATION, --all-runs")
    seconds = _older(older)
    bootstrap, security = _connect(bootstrap, config)
    runs = _runs(bootstrap, security, run)
    if seconds is not None:
        runs = older_than(runs, seconds)
    if not runs:
        typer.echo(f"no runs on {bootstrap}" + (f" older than {older}" if older else "") + ": nothing to delete")
        return
    counts = delete_runs(bootstrap, runs, security, apply=yes, echo=typer.echo)
    what = f"{counts['runs']} run(s): {counts['topics']} topics, {counts['groups']} consumer groups"
    live = f"; {counts['live']} live run(s) kept" if counts["live"] else ""
    if not yes:
        typer.echo(f"dry run: nothing deleted; add --yes to delete {what}{live}")
    else:
        typer.echo(f"deleted {what} from {bootstrap}{live}")
    if counts["failed"] or (run and counts["live"]):
        raise typer.Exit(1)

