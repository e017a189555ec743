"""`edgestream broker start` / `status` / `stop` / `fetch`: a managed local Apache Kafka broker (one node here;
a cluster of --nodes N in edgestream.cli.cluster)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from edgestream.cli import cluster
from edgestream.cli.common import default_broker_dir
from edgestream.kafka.broker import LocalBroker
from edgestream.kafka.jars import DEFAULT_KAFKA_VERSION, BrokerError, resolve_jars
from edgestream.kafka.security import client_lines, describe

broker_app = typer.Typer(help="Run a managed local Apache Kafka broker (KRaft; one node, or --nodes N).",
                         no_args_is_help=True)


def _broker(data_dir: Path | None, port: int | None = None, version: str = DEFAULT_KAFKA_VERSION,
            host: str = "127.0.0.1", advertised_host: str | None = None, security: str | None = None):
    return LocalBroker(data_dir or default_broker_dir(), port=port, kafka_version=version,
                       log=lambda m: typer.echo(m, err=True), host=host, advertised_host=advertised_host,
                       security=security)


@broker_app.command("start")
def broker_start(port: int = typer.Option(9092, min=1, max=65535, help="PLAINTEXT port (on --host); with --nodes N, "
                                          "node i listens on PORT+i-1"),
                 nodes: int = typer.Option(None, "--nodes", min=1, max=9, help="a KRaft cluster of N nodes (one data "
                                           "dir each under DATA_DIR, replication min(3,N)); default 1, or what "
                                           "DATA_DIR holds"),
                 host: str = typer.Option("127.0.0.1", "--host",
                                          help="address the client listener binds (0.0.0.0: every interface)"),
                 advertised_host: str = typer.Option(None, "--advertised-host",
                                                     help="address clients are told to connect to (what other "
                                                          "hosts reach this one by); default --host"),
                 data_dir: Path = typer.Option(None, help="instance dir (storage, logs, state); "
                                               "default ~/.cache/edgestream/broker"),
                 kafka_version: str = typer.Option(DEFAULT_KAFKA_VERSION, help="Apache Kafka version (Maven Central)"),
                 security: str = typer.Option(None, "--security", help="none | sasl-ssl (SCRAM-SHA-512 over TLS; CA, "
                                              "keystores and passwords made in DATA_DIR/security); default: what "
                                              "DATA_DIR was started with, else none")
                 ) -> None:
    """Start a broker in the background and print its bootstrap address (with --security sasl-ssl, the
    client settings a run needs on stderr)."""
    if cluster.wants_cluster(data_dir or default_broker_dir(), nodes):
        return cluster.start(data_dir or default_broker_dir(), nodes, port=port, host=host,
                                 advertised_host=advertised_host, kafka_version=kafka_version, security=security)
    try:
        broker = _broker(data_dir, port, kafka_version, host=host, advertised_host=advertised_host, security=security)
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
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
    for line in client_lines(broker.data_dir, broker.bootstrap) if broker.security == "sasl-ssl" else []:
        typer.echo(line, err=True)
    print(broker.bootstrap)


@broker_app.command("status")
def broker_status(data_dir: Path = typer.Option(None, help="instance dir; default ~/.cache/edgestream/broker"),
                  as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Say whether the broker of DATA_DIR runs and answers, and its security mode (exit 0 if it answers,
    1 if not)."""
    if cluster.is_cluster_dir(data_dir or default_broker_dir()):
        return cluster.status(data_dir or default_broker_dir(), as_json)
    st = _broker(data_dir).status()
    if as_json:
        print(json.dumps(st))
    elif st["running"]:
        typer.echo(f"running: {st['bootstrap']} (pid {st['pid']}, Kafka {st['kafka_version']}, "
                      f"{'answering' if st['answering'] else 'NOT answering'}, {st['data_dir']}); "
                      f"security: {describe(st.get('security'))}")
    else:
        typer.echo(f"not running ({st['data_dir']})")
    raise typer.Exit(0 if st["running"] and st["answering"] else 1)


@broker_app.command("stop")
def broker_stop(data_dir: Path = typer.Option(None, help="instance dir; default ~/.cache/edgestream/broker"),
                timeout: float = typer.Option(30.0, help="seconds to wait for a graceful stop before SIGKILL")) -> None:
    """Stop the broker of DATA_DIR, every node of a cluster (graceful, then by pid). The data stays for the next
    start."""
    if cluster.is_cluster_dir(data_dir or default_broker_dir()):
        return cluster.stop(data_dir or default_broker_dir(), timeout)
    broker = _broker(data_dir)
    if broker.stop(timeout=timeout):
        typer.echo(f"stopped ({broker.data_dir})")
    else:
        typer.echo(f"not running ({broker.data_dir})")


@broker_app.command("fetch")
def broker_fetch(kafka_version: str = typer.Option(DEFAULT_KAFKA_VERSION, help="Apache Kafka version")) -> None:
    """Resolve the broker jars from Maven Central into the cache (done once; start does it too)."""
    try:
        path = resolve_jars(kafka_version, log=lambda m: typer.echo(m, err=True))
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    print(path)


