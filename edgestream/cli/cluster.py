"""`edgestream broker start --nodes N` / `status` / `stop` for a multi-node instance dir: the command line of
edgestream.kafka.cluster.LocalCluster (edgestream/cli/broker.py wires it in; a one-node instance stays
LocalBroker's)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from edgestream.kafka.cluster import LocalCluster, is_cluster_dir, managed
from edgestream.kafka.jars import BrokerError

__all__ = ["is_cluster_dir", "managed", "start", "status", "stop", "wants_cluster"]


def wants_cluster(data_dir: Path, nodes: int | None) -> bool:
    """Whether `broker start` runs a cluster: --nodes 2 or more, or (no --nodes) a dir that holds one. A
    contradiction (--nodes 1 on a cluster's dir, --nodes N on a single broker's dir) exits 2 with one line."""
    if nodes is None:
        return is_cluster_dir(data_dir)
    if nodes == 1 and is_cluster_dir(data_dir):
        n = json.loads((data_dir / "cluster.json").read_text()).get("nodes")
        _fail(f"--nodes 1: {data_dir} holds a {n}-node cluster; use --nodes {n} or another --data-dir", 2)
    if nodes > 1 and (data_dir / "kraft" / "meta.properties").exists():
        _fail(f"--nodes {nodes}: {data_dir} holds a single broker's data; use another --data-dir for a cluster", 2)
    return nodes > 1


def _fail(line: str, code: int) -> None:
    typer.echo(f"error: {line}", err=True)
    raise typer.Exit(code)


def _node_line(n: dict) -> str:
    return (f"node {n['node']}: {n['bootstrap']} (controller port {n['controller_port']}, pid {n['pid']}, "
            f"{n['data_dir']})")


def start(data_dir: Path, nodes: int | None, *, port: int, host: str, advertised_host: str | None,
          kafka_version: str, security: str | None) -> None:
    """Start the cluster of `data_dir`: per node its address on stderr, the bootstrap (comma-separated) on stdout."""
    if security not in (None, "none"):
        _fail(f"--security {security}: not available with --nodes yet (a secured broker is one node)", 2)
    try:
        cluster = LocalCluster.open(data_dir, kafka_version=kafka_version, log=lambda m: typer.echo(m, err=True)) \
            if nodes is None else LocalCluster(data_dir, nodes, kafka_version=kafka_version,
                                               log=lambda m: typer.echo(m, err=True), advertised_host=advertised_host,
                                               ports=[port + i for i in range(nodes)], host=host)
    except BrokerError as exc:
        _fail(str(exc), 2)
    if cluster.running():
        st = cluster.status()
        typer.echo(f"already running: {st['bootstrap']} ({len(cluster.running())} of {len(cluster.nodes)} nodes, "
                   f"{cluster.data_dir})")
        return
    t0 = time.monotonic()
    try:
        cluster.start()
    except BrokerError as exc:
        _fail(str(exc), 1)
    typer.echo(f"started a {len(cluster.nodes)}-node Kafka {kafka_version} cluster in {time.monotonic() - t0:.1f} s "
               f"(data dir {cluster.data_dir})", err=True)
    for n in cluster.nodes:
        typer.echo(_node_line(n.describe()), err=True)
    print(cluster.bootstrap)


def status(data_dir: Path, as_json: bool) -> None:
    """Every node of the cluster: running, answering; exit 0 when all answer and the metadata lists them all."""
    st = LocalCluster.open(data_dir).status()
    if as_json:
        print(json.dumps(st))
    else:
        up = [n for n in st["nodes"] if n["running"]]
        typer.echo(f"{'running' if up else 'not running'}: {len(up)} of {len(st['nodes'])} nodes, bootstrap "
                   f"{st['bootstrap']} (Kafka {st['kafka_version']}, brokers in the cluster metadata: "
                   f"{', '.join(map(str, st['brokers'])) or 'none'}; {st['data_dir']})")
        for n in st["nodes"]:
            state = ("answering" if n["answering"] else "NOT answering") if n["running"] else "not running"
            typer.echo(f"node {n['node']}: {state}, {n['bootstrap']} (pid {n['pid']}, {n['data_dir']})")
    raise typer.Exit(0 if st["answering"] else 1)


def stop(data_dir: Path, timeout: float) -> None:
    """Stop every node (graceful, then by pid); the data stays for the next start."""
    cluster = LocalCluster.open(data_dir)
    up = cluster.running()
    cluster.stop(timeout=timeout)
    if up:
        typer.echo(f"stopped {len(up)} of {len(cluster.nodes)} nodes ({cluster.data_dir})")
    else:
        typer.echo(f"not running ({cluster.data_dir})")
