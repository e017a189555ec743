"""One broker of a three-node KRaft cluster cut off mid-training (issue 31, item 3): each node runs in a network
namespace this test creates (veth pairs on a bridge; tests/netns_hosts.py), the run's processes in this one.
The link of the node leading <run>.dev.0 is set down while a collective run (ddl, digits, mlp, 2 devices)
trains on topics of replication factor 3: the cluster elects a new leader among the other in-sync replicas,
training goes on and finishes, every device's sequence numbers are trained exactly once (nothing lost, nothing
twice), the producer lost and doubled nothing; with the link up again the node catches up (back in the in-sync
replicas of every topic of the run, read with the admin API). Unclean leader election stays off.

The same after a SIGKILL, with the node restarted and catching up, is tests/system/test_kafka_leader_loss.py's.
Needs root (namespaces). Every namespace, veth and the bridge are removed, and every node stopped, on any exit;
every wait is bounded.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from factories import write_cfg
from netns_hosts import network
from support.faults import (
    _new_leader,
    _producer_lost_and_doubled_nothing,
    _rejoins,
    _replicated,
    collective_run_trained_once,
)
from support.runs import error_lines, start, step_lines, wait_steps

from edgestream.kafka.cluster import LocalCluster
from edgestream.kafka.topic_names import device_topic

STEPS = 240  # 16 samples a step at 200 samples/s per device
HANG_S = 600
NODES = ["kafka-1", "kafka-2", "kafka-3"]


@pytest.fixture
def netns_cluster(tmp_path):
    """Three nodes, node i in namespace kafka-i at its own address, reachable from here through the bridge."""
    with network(NODES, gateway=True) as hosts:
        cluster = LocalCluster(tmp_path / "cluster", 3, hosts=[hosts.ip[n] for n in NODES],
                               netns=[hosts.ns[n] for n in NODES], ports=[9092, 9092, 9092])
        try:
            cluster.start(timeout=300)
            yield cluster, hosts
        finally:
            for n in NODES:
                hosts.link(n, True)  # a graceful stop needs the node's controller quorum
            cluster.stop(timeout=20)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=60)
        pytest.fail(f"the run hung with a broker cut off; stderr:\n{err[-3000:]}")
    return proc.returncode, err


@pytest.mark.timeout(1500)
def test_a_run_rides_out_its_device_streams_leader_cut_off(netns_cluster, run_prefix, tmp_path):
    cluster, hosts = netns_cluster
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=STEPS, every_steps=50,
                    stop={"target_accuracy": None, "max_time_s": 1200, "max_steps": STEPS})
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    topic = device_topic(run_dir.name, 0)
    proc = start(cfg, cluster.bootstrap, out=out)
    try:
        wait_steps(run_dir, proc, 2, 20)
        topics = _replicated(cluster, run_dir.name)  # replication factor 3, min.insync 2, unclean election off
        cut = cluster.leader_of(topic)
        assert cut is not None, topic
        host = NODES[cut.node_id - 1]
        at_cut = {r: len(step_lines(run_dir / "ranks" / f"{r}.jsonl")) for r in range(2)}
        hosts.link(host, up=False)
        new = _new_leader(cluster, topic, cut)
        assert cut.running_pid() is not None  # cut off, not dead
        code, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    assert code == 0, err[-3000:]
    assert not error_lines(err), err
    # training went on after the election and trained every sequence number exactly once, in order
    trained = collective_run_trained_once(run_dir, at_cut)
    producer = _producer_lost_and_doubled_nothing(cluster.bootstrap, run_dir)
    # the cut-off node fell out of the in-sync replicas of device 0's partition ...
    deadline = time.monotonic() + HANG_S
    while cut.node_id in cluster.partition(topic).isrs and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cut.node_id not in cluster.partition(topic).isrs
    # ... and with its link up again it catches up: back in the in-sync replicas of every topic of the run
    hosts.link(host, up=True)
    _rejoins(cluster, topics, cut)
    assert cluster.wait_brokers(3) == [1, 2, 3]
    times = [e["time"] for e in step_lines(run_dir / "ranks" / "0.jsonl")]
    print(f"cut off node {cut.node_id} (leader of {topic}) at steps {at_cut}; new leader {new}; trained "
          f"{trained}; producer delivered {producer['delivered']}; device 0's longest pause between steps "
          f"{max(b - a for a, b in zip(times, times[1:], strict=False)):.1f} s; {len(topics)} topics back to 3 "
          f"in-sync replicas")
