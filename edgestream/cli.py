"""The `edgestream` command (typer). Thin: every command calls into the package."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

from edgestream.kafka.jars import DEFAULT_KAFKA_VERSION, BrokerError, cache_dir

app = typer.Typer(help="edgestream: train models on data streaming in from heterogeneous edge devices "
                       "through Apache Kafka.", no_args_is_help=True, add_completion=False)
config_app = typer.Typer(help="Validate and show experiment configs.", no_args_is_help=True)
broker_app = typer.Typer(help="Run a managed local Apache Kafka broker (KRaft, 127.0.0.1).", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(broker_app, name="broker")

console = Console()


def default_broker_dir() -> Path:
    return cache_dir() / "broker"


# ---------------------------------------------------------------- config
@config_app.command("validate")
def config_validate(file: Path = typer.Argument(..., help="experiment YAML file")) -> None:
    """Exit 0 when FILE is a valid config; otherwise exit 2 with one line per problem."""
    from edgestream.config import ConfigError, load_config

    try:
        load_config(file)
    except ConfigError as exc:
        for line in exc.problems:
            typer.echo(line, err=True)
        raise typer.Exit(2) from None
    typer.echo(f"{file}: valid")


@config_app.command("show")
def config_show(file: Path = typer.Argument(..., help="experiment YAML file"),
                set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Print the fully resolved config (defaults filled in)."""
    from edgestream.config import ConfigError, load_config

    try:
        cfg = load_config(file, set_ or [])
    except ConfigError as exc:
        for line in exc.problems:
            typer.echo(line, err=True)
        raise typer.Exit(2) from None
    sys.stdout.write(cfg.to_yaml())


# ---------------------------------------------------------------- broker
def _broker(data_dir: Path | None, port: int | None = None, version: str = DEFAULT_KAFKA_VERSION):
    from edgestream.kafka.broker import LocalBroker

    return LocalBroker(data_dir or default_broker_dir(), port=port, kafka_version=version,
                       log=lambda m: typer.echo(m, err=True))


@broker_app.command("start")
def broker_start(port: int = typer.Option(9092, help="PLAINTEXT port on 127.0.0.1"),
                 data_dir: Path = typer.Option(None, help="instance dir (storage, logs, state); "
                                               "default ~/.cache/edgestream/broker"),
                 kafka_version: str = typer.Option(DEFAULT_KAFKA_VERSION, help="Apache Kafka version (Maven Central)")
                 ) -> None:
    """Start a broker in the background and print its bootstrap address."""
    import time

    broker = _broker(data_dir, port, kafka_version)
    if broker.running_pid() is not None:
        st = broker.read_state()
        typer.echo(f"already running: {st.get('bootstrap')} (pid {st.get('pid')}, {broker.data_dir})")
        return
    t0 = time.monotonic()
    try:
        broker.start()
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"started Kafka {kafka_version} in {time.monotonic() - t0:.1f} s (pid {broker.pid}, "
               f"data dir {broker.data_dir})", err=True)
    print(broker.bootstrap)


@broker_app.command("status")
def broker_status(data_dir: Path = typer.Option(None, help="instance dir; default ~/.cache/edgestream/broker"),
                  as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Say whether the broker of DATA_DIR runs and answers (exit 0 if so, 1 if not)."""
    st = _broker(data_dir).status()
    if as_json:
        print(json.dumps(st))
    elif st["running"]:
        typer.echo(f"running: {st['bootstrap']} (pid {st['pid']}, Kafka {st['kafka_version']}, "
                      f"{'answering' if st['answering'] else 'NOT answering'}, {st['data_dir']})")
    else:
        typer.echo(f"not running ({st['data_dir']})")
    raise typer.Exit(0 if st["running"] and st["answering"] else 1)


@broker_app.command("stop")
def broker_stop(data_dir: Path = typer.Option(None, help="instance dir; default ~/.cache/edgestream/broker"),
                timeout: float = typer.Option(30.0, help="seconds to wait for a graceful stop before SIGKILL")) -> None:
    """Stop the broker of DATA_DIR (graceful, then by pid). The data stays for the next start."""
    broker = _broker(data_dir)
    if broker.stop(timeout=timeout):
        typer.echo(f"stopped ({broker.data_dir})")
    else:
        typer.echo(f"not running ({broker.data_dir})")


@broker_app.command("fetch")
def broker_fetch(kafka_version: str = typer.Option(DEFAULT_KAFKA_VERSION, help="Apache Kafka version")) -> None:
    """Resolve the broker jars from Maven Central into the cache (done once; start does it too)."""
    from edgestream.kafka.jars import resolve_jars

    try:
        path = resolve_jars(kafka_version, log=lambda m: typer.echo(m, err=True))
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    print(path)


# ---------------------------------------------------------------- demo
@app.command("demo")
def demo(samples: int = typer.Option(4000, help="samples to stream through Kafka"),
         bootstrap: str = typer.Option(None, help="HOST:PORT of a broker; default: a managed local broker")) -> None:
    """The main job: start the managed broker, stream samples through it and report what happened."""
    from edgestream.demo import run_demo

    try:
        run_demo(samples=samples, bootstrap=bootstrap, console=console)
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
