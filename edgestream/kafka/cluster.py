"""A managed local Apache Kafka cluster: N KRaft nodes, each a combined broker + controller.

`LocalCluster(data_dir, nodes=3)` runs N brokers from the same Maven jars as `LocalBroker` (its nodes
are LocalBrokers with a shared cluster id and quorum). The data dir holds `cluster.json` (node count,
cluster id, ports, bootstrap) and one instance dir per node (`node-1`, `node-2`, ...), each like a
LocalBroker's (KRaft storage, server.properties, logs, broker.json), so a cluster stopped and started
again on the same dir keeps its data and, when free, its ports.

Replication defaults follow Kafka's guidance for data that must not be lost, capped by the node count:
default.replication.factor and the internal topics' replication min(3, nodes), min.insync.replicas
min(2, that), unclean leader election off.

`hosts` / `netns` place node i on another address, its process started in a Linux network namespace
(`ip netns exec NS`): the fault tests cut one node's link that way. Used by `edgestream broker start
--nodes N`, the test suite's session `cluster` fixture and the cluster fault tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from edgestream.kafka.admin import admin_client
from edgestream.kafka.broker import LocalBroker, StateFile, free_port, new_cluster_id, port_in_use
from edgestream.kafka.jars import DEFAULT_KAFKA_VERSION, BrokerError, resolve_jars

STATE_FILE = "cluster.json"


def is_cluster_dir(data_dir: str | Path) -> bool:
    """Whether `data_dir` is the instance dir of a LocalCluster (it records so in cluster.json)."""
    return (Path(data_dir) / STATE_FILE).is_file()


def managed(data_dir: str | Path, log=None) -> LocalBroker | LocalCluster:
    """The managed instance of `data_dir`: its LocalCluster when the dir holds one, else a LocalBroker. Both
    answer running_pid(), read_state()['bootstrap'], start(), stop() and .pid (what a run that starts the
    managed broker uses)."""
    return LocalCluster.open(data_dir, log=log) if is_cluster_dir(data_dir) else LocalBroker(data_dir, log=log)


class ClusterNode(LocalBroker):
    """One node of a LocalCluster: node.id, the quorum of every node, replication for the cluster's size."""

    def __init__(self, cluster: LocalCluster, node_id: int, *, host: str, advertised_host: str | None,
                 netns: str | None) -> None:
        super().__init__(cluster.data_dir / f"node-{node_id}", kafka_version=cluster.kafka_version,
                         heap=cluster.heap, log=cluster._log, host=host, advertised_host=advertised_host)
        self.cluster = cluster
        self.node_id = node_id
        self.netns = netns

    def _cluster_id(self) -> str:
        return self.cluster.cluster_id

    def _choose_ports(self, state: dict) -> None:
        # the cluster assigned both ports (every node's properties name every controller): check, never move
        if self.netns is None:
            for port in (self.port, self.controller_port):
                if port_in_use(port, self.host):
                    raise BrokerError(f"port {port} of cluster node {self.node_id} is in use (another broker "
                                      f"or program listens on it)")

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        n = len(self.cluster.nodes)
        rf = min(3, n)
        isr = min(2, rf)
        props.update({
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.cluster.quorum_voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(isr),
            "default.replication.factor": str(rf),
            "min.insync.replicas": str(isr),
            "unclean.leader.election.enable": "false",
            "num.network.threads": "2",
            "num.io.threads": "2",
        })
        return props

    def _command(self, java: str, cp: str, props: Path) -> list[str]:
        cmd = super()._command(java, cp, props)
        return ["ip", "netns", "exec", self.netns, *cmd] if self.netns else cmd

    @property
    def _connect_host(self) -> str:
        return self.advertised_host if self.netns else super()._connect_host

    def describe(self) -> dict:
        """{'node', 'port', 'controller_port', 'bootstrap', 'pid', 'data_dir'} of this node."""
        return {"node": self.node_id, "port": self.port, "controller_port": self.controller_port,
                "bootstrap": f"{self.advertised_host}:{self.port}", "pid": self.running_pid(),
                "data_dir": str(self.data_dir)}


class LocalCluster(StateFile):
    """An N-node KRaft cluster on this machine (nodes 1..N, broker id = node id). Use as a context manager,
    or start()/stop(). data_dir None: a temporary dir removed by stop(). ports: the client port of each
    node (default: the recorded ones when free, else free ones); host / advertised_host: the address every
    node's listeners bind and the one clients (and the other nodes' controllers) are told, as LocalBroker's;
    hosts: each node's own address instead (bound and advertised); netns: each node's network namespace."""

    state_file = STATE_FILE

    def __init__(self, data_dir: str | Path | None = None, nodes: int = 3, *,
                 kafka_version: str = DEFAULT_KAFKA_VERSION, heap: str = "384m", log=None,
                 ports: list[int] | None = None, host: str = "127.0.0.1", advertised_host: str | None = None,
                 hosts: list[str] | None = None, netns: list[str] | None = None) -> None:
        if nodes < 1:
            raise BrokerError(f"a cluster needs at least one node (nodes={nodes})")
        for name, given in (("ports", ports), ("hosts", hosts), ("netns", netns)):
            if given is not None and len(given) != nodes:
                raise BrokerError(f"{name} names {len(given)} nodes, the cluster has {nodes}")
        self._temp = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="edgestream-cluster-") if data_dir is None
                             else data_dir).resolve()
        self.kafka_version = kafka_version
        self.heap = heap
        self._log = log or (lambda msg: None)
        self._ports = ports
        state = self.read_state()
        if state.get("nodes") and state["nodes"] != nodes:
            raise BrokerError(f"{self.data_dir} holds a {state['nodes']}-node cluster, not {nodes} nodes: "
                              f"use --nodes {state['nodes']} or another --data-dir")
        self.cluster_id: str = state.get("cluster_id") or ""
        self.nodes: list[ClusterNode] = [
            ClusterNode(self, i + 1, host=hosts[i] if hosts else host,
                        advertised_host=hosts[i] if hosts else advertised_host, netns=netns[i] if netns else None)
            for i in range(nodes)]
        for node, port, cport in zip(self.nodes, state.get("ports") or [], state.get("controller_ports") or [],
                                     strict=False):
            node.port, node.controller_port = port, cport

    @classmethod
    def open(cls, data_dir: str | Path, **kw) -> LocalCluster:
        """The cluster recorded in `data_dir` (its node count from cluster.json), for status and stop."""
        state = json.loads((Path(data_dir) / STATE_FILE).read_text())
        return cls(data_dir, state["nodes"], **kw)

    # ------------------------------------------------------------------ state
    @property
    def bootstrap(self) -> str:
        """Every node's client address, comma-separated."""
        if any(n.port is None for n in self.nodes):
            raise BrokerError("the cluster has no ports yet: start() it first")
        return ",".join(f"{n.advertised_host}:{n.port}" for n in self.nodes)

    @property
    def quorum_voters(self) -> str:
        return ",".join(f"{n.node_id}@{n.advertised_host}:{n.controller_port}" for n in self.nodes)

    def node(self, node: int | ClusterNode) -> ClusterNode:
        """Node `node` (its id 1..N, or the node itself)."""
        if isinstance(node, ClusterNode):
            return node
        if not 1 <= node <= len(self.nodes):
            raise BrokerError(f"no node {node}: the cluster has nodes 1..{len(self.nodes)}")
        return self.nodes[node - 1]

    def node_for_broker_id(self, broker_id: int) -> ClusterNode | None:
        """The node whose broker id is `broker_id` (ids are node numbers), None for none (-1: no leader)."""
        return self.nodes[broker_id - 1] if 1 <= broker_id <= len(self.nodes) else None

    def running(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.running_pid() is not None]

    def running_pid(self) -> int | None:
        """The pid of the first node that runs (None when none does), as LocalBroker.running_pid."""
        return next((pid for n in self.nodes if (pid := n.running_pid()) is not None), None)

    @property
    def pid(self) -> int | None:
        return self.running_pid()

    def status(self) -> dict:
        """{'nodes': [node.describe() + running/answering], 'brokers': ids in the cluster metadata, ...}."""
        state = self.read_state()
        nodes = []
        for n in self.nodes:
            d = n.describe() | {"running": n.running_pid() is not None}
            d["answering"] = bool(d["running"] and n.port and self._broker_ids(f"{n.advertised_host}:{n.port}", 5))
            nodes.append(d)
        brokers = self._broker_ids(state["bootstrap"], 5) if state.get("bootstrap") and self.running() else []
        return {"nodes": nodes, "brokers": sorted(brokers), "bootstrap": state.get("bootstrap"),
                "data_dir": str(self.data_dir), "kafka_version": state.get("kafka_version"),
                "cluster_id": state.get("cluster_id"),
                "running": any(d["running"] for d in nodes),
                "answering": all(d["answering"] for d in nodes) and len(brokers) == len(self.nodes)}

    # ------------------------------------------------------------------ metadata
    @staticmethod
    def _broker_ids(bootstrap: str, timeout: float) -> list[int]:
        try:
            return list(admin_client(bootstrap).list_topics(timeout=timeout).brokers)
        except Exception:
            return []

    def broker_ids(self, timeout: float = 5.0) -> list[int]:
        """The broker ids the cluster metadata lists right now (empty when no node answers)."""
        return sorted(self._broker_ids(self.bootstrap, timeout))

    def partition(self, topic: str, partition: int = 0, timeout: float = 10.0):
        """confluent_kafka's PartitionMetadata of topic/partition (.leader, .replicas, .isrs: broker ids); a
        topic just created may take a moment to reach every broker's metadata: asked again until `timeout`."""
        admin = admin_client(self.bootstrap)
        deadline = time.monotonic() + timeout
        while True:
            t = admin.list_topics(topic, timeout=max(1.0, deadline - time.monotonic())).topics.get(topic)
            if t is not None and t.error is None and partition in t.partitions:
                return t.partitions[partition]
            if time.monotonic() > deadline:
                raise BrokerError(f"no partition {topic}/{partition} in the cluster metadata"
                                  + (f" ({t.error})" if t is not None and t.error is not None else ""))
            time.sleep(0.2)

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 10.0) -> ClusterNode | None:
        """The node leading topic/partition right now (None while no leader is elected)."""
        return self.node_for_broker_id(self.partition(topic, partition, timeout).leader)

    def wait_brokers(self, count: int | None = None, timeout: float = 60.0) -> list[int]:
        """Wait until the metadata lists `count` brokers (default every node) as every running node tells it: each
        broker's metadata cache catches up with the controller on its own, so one node listing them all does not
        mean the next client, answered by another node, sees them; BrokerError after timeout."""
        count = len(self.nodes) if count is None else count
        deadline = time.monotonic() + timeout
        ids: list[int] = []
        while time.monotonic() < deadline:
            wait = min(5.0, max(0.5, deadline - time.monotonic()))
            told = [sorted(self._broker_ids(f"{n.advertised_host}:{n.port}", wait))
                    for n in self.nodes if n.running_pid() is not None]
            ids = min(told, key=len) if told else []
            if told and len(ids) >= count:
                return ids
            time.sleep(0.3)
        raise BrokerError(f"the cluster metadata lists brokers {ids}, not {count}, after {timeout:.0f} s")

    # ------------------------------------------------------------------ start / stop
    def _assign_ports(self) -> None:
        """Client + controller port of every node: given, else recorded and free, else new free ones."""
        taken: set[int] = set()
        recorded_ok = all(n.port and n.controller_port for n in self.nodes) and (
            any(n.netns for n in self.nodes)
            or not any(port_in_use(p, n.host) for n in self.nodes for p in (n.port, n.controller_port)))
        for i, n in enumerate(self.nodes):
            if self._ports:
                n.port = self._ports[i]
            elif not recorded_ok:
                n.port = free_port(taken)
            taken.add(n.port)
        for n in self.nodes:
            if not recorded_ok or n.controller_port in taken:
                n.controller_port = free_port(taken)
            taken.add(n.controller_port)

    def start(self, timeout: float = 180.0) -> LocalCluster:
        """Start every node, wait until each answers and the metadata lists all brokers; BrokerError says why
        it could not (and the nodes are stopped again)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        up = self.running()
        if up:
            raise BrokerError(f"the cluster of {self.data_dir} is already running (nodes "
                              f"{', '.join(str(n.node_id) for n in up)}, bootstrap "
                              f"{self.read_state().get('bootstrap')}); stop it first")
        self._assign_ports()
        if not self.cluster_id:
            self.cluster_id = new_cluster_id()
        self._write_state(nodes=len(self.nodes), cluster_id=self.cluster_id, kafka_version=self.kafka_version,
                          ports=[n.port for n in self.nodes],
                          controller_ports=[n.controller_port for n in self.nodes],
                          bootstrap=self.bootstrap, started_at=time.time())
        deadline = time.monotonic() + timeout
        try:  # each node formats its storage (a JVM of its own, ~1-2 s) and starts: all at once
            resolve_jars(self.kafka_version, log=self._log)  # once, before the nodes look for them together
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                for launched in [pool.submit(n.launch) for n in self.nodes]:
                    launched.result()
            for n in self.nodes:
                n.wait_ready(max(1.0, deadline - time.monotonic()))
            self.wait_brokers(timeout=max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop every node: SIGTERM to all at once, then by pid those still running after `timeout`. True if any
        was running. All at once, as Kafka's own kafka-server-stop.sh does: stopped one by one, the last node's
        controlled shutdown waits out the whole timeout for a controller quorum that has already gone (a 3-node
        cluster took 32 s to stop, 30 of them for its last node; at once, under 6 s)."""
        pids = [pid for n in self.nodes if (pid := n.running_pid()) is not None]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for n in reversed(self.nodes):  # each waits for its own node (SIGKILL once the deadline has passed)
            n.stop(timeout=max(0.0, deadline - time.monotonic()))
        was_running = bool(pids)
        if self.state_path.exists():
            self._write_state(stopped_at=time.time())
        if self._temp:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return was_running

    def kill(self, node: int | ClusterNode, timeout: float = 30.0) -> ClusterNode:
        """SIGKILL node `node` (no shutdown: its partitions lose their leader until the controller elects one)."""
        n = self.node(node)
        pid = n.running_pid()
        if pid is None:
            raise BrokerError(f"node {n.node_id} is not running")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while n._alive(pid):
            if time.monotonic() > deadline:
                raise BrokerError(f"node {n.node_id} (pid {pid}) did not die within {timeout:.0f} s of SIGKILL")
            time.sleep(0.05)
        return n

    def restart(self, node: int | ClusterNode, timeout: float = 120.0) -> ClusterNode:
        """Start node `node` again on its data dir and ports; wait until it answers and the metadata lists
        every broker again."""
        n = self.node(node)
        deadline = time.monotonic() + timeout
        n.launch()
        n.wait_ready(timeout)
        self.wait_brokers(timeout=max(1.0, deadline - time.monotonic()))
        return n

    def heal(self, timeout: float = 120.0) -> list[ClusterNode]:
        """Start every node that is not running (killed or stopped) and wait until the metadata lists every
        broker again; the nodes it started."""
        down = [n for n in self.nodes if n.running_pid() is None]
        deadline = time.monotonic() + timeout
        for n in down:
            n.launch()
        for n in down:
            n.wait_ready(max(1.0, deadline - time.monotonic()))
        self.wait_brokers(timeout=max(1.0, deadline - time.monotonic()))
        return down

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
