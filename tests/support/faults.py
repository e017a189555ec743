"""What the fault tests check a run with: a disk filled up, a device's step lines trained exactly once, the
parameter server's applied pushes, the topics' end offsets, and the three-node cluster's election and in-sync
replicas after a node was lost (the leader-loss and network-namespace tests).

* `fill_disk(folder)`; `_trained_once(step_lines, steps)`; `SSP`, the parameter-server algorithm of the outage
  runs; `_applied_pushes(run_dir, world)`; `_end_offsets(bootstrap, topics)`;
* on a `LocalCluster`: `_replicated(cluster, run)`, `_new_leader(cluster, topic, killed)`,
  `_rejoins(cluster, topics, node)`; `_producer_lost_and_doubled_nothing(bootstrap, run_dir)`;
  `collective_run_trained_once(run_dir, at_fault)` for a run of `STEPS` steps.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from edgestream.kafka import consumer_config
from edgestream.kafka.topic_names import device_topic
from support.runs import HANG_S, records, step_lines

STEPS = 240  # the leader-loss runs: 16 samples a step at 200 samples/s, well beyond the election
SSP = {"name": "ssp", "params": {"s": 3}, "batch": {"policy": "fixed", "size": 16}, "buffer": "persist"}


def fill_disk(folder: Path) -> Path:
    """Write zeros into `folder`/filler until its file system refuses more; returns the filler's path."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def _trained_once(lines: list[dict], steps: int) -> int:
    """Assert a device's step lines are steps 0..steps-1 whose own samples are the sequence numbers
    0, 1, 2, ... each exactly once, in order; returns how many that is."""
    assert [e["step"] for e in lines] == list(range(steps))
    seqs = [(e["seq_first"], e["seq_last"], e["seq_count"]) for e in lines]
    assert seqs[0][0] == 0
    assert all(last - first + 1 == count for first, last, count in seqs)          # no gap inside a batch
    assert all(b[0] == a[1] + 1 for a, b in zip(seqs, seqs[1:], strict=False))   # none twice, none skipped
    return seqs[-1][1] + 1


def _end_offsets(bootstrap: str, topics: list[str]) -> list[int]:
    c = Consumer(consumer_config(bootstrap, "outage-test.watermarks"))
    try:
        return [c.get_watermark_offsets(TopicPartition(t, 0), timeout=30)[1] for t in topics]
    finally:
        c.close()


def _applied_pushes(run_dir: Path, world: int) -> dict[int, list[int]]:
    """Per worker, the push ids the PS applied for good: its ps_push lines, less those a restart rolled
    back (applied after the checkpoint it restarted from, then replayed)."""
    applied: dict[int, list[int]] = {r: [] for r in range(world)}
    for rec in records(run_dir / "ranks" / "ps.jsonl"):
        if rec["kind"] == "ps_start" and rec["start"] > 1:
            for r in range(world):
                applied[r] = [i for i in applied[r] if i <= rec["last_push"][r]]
        elif rec["kind"] == "ps_push":
            applied[rec["worker"]].append(rec["id"])
    return applied


def _topics(bootstrap: str, run: str) -> list[str]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return sorted(t for t in md.topics if t.startswith(f"{run}."))


def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (fut,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return {k: v.value for k, v in fut.result(timeout=30).items()}


def _replicated(cluster, run: str) -> list[str]:
    """Every topic of the run: 3 replicas, min.insync.replicas 2, unclean leader election off."""
    topics = _topics(cluster.bootstrap, run)
    for t in topics:
        part = cluster.partition(t)
        assert len(part.replicas) == 3, (t, part.replicas)
        conf = _configs(cluster.bootstrap, t)
        assert conf["min.insync.replicas"] == "2" and conf["unclean.leader.election.enable"] == "false", (t, conf)
    return topics


def _new_leader(cluster, topic: str, killed) -> int:
    """Wait until the cluster elected another leader of `topic` than the killed (or cut-off) node; its broker id."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        leader = cluster.partition(topic).leader
        if leader >= 0 and leader != killed.node_id:
            return leader
        time.sleep(0.5)
    pytest.fail(f"no new leader of {topic} within {HANG_S} s of losing node {killed.node_id}")


def _rejoins(cluster, topics: list[str], node) -> None:
    """The restarted node is back in the in-sync replicas of every topic (it caught up with the leaders)."""
    deadline = time.monotonic() + HANG_S
    behind = topics
    while time.monotonic() < deadline:
        behind = [t for t in topics if node.node_id not in cluster.partition(t).isrs]
        if not behind:
            return
        time.sleep(0.5)
    pytest.fail(f"node {node.node_id} is not in the in-sync replicas of {behind} {HANG_S} s after its restart")


def _producer_lost_and_doubled_nothing(bootstrap: str, run_dir: Path) -> dict:
    producer = json.loads((run_dir / "summary.json").read_text())["producer"]
    assert producer["failed"] == producer["unacknowledged"] == 0, producer
    assert producer["delivered"] == producer["produced"] > 0, producer
    # the topics hold exactly what was acknowledged: no message written twice by a retry to the new leader
    assert sum(_end_offsets(bootstrap, [device_topic(run_dir.name, d) for d in range(2)])) == producer["delivered"]
    return producer


def collective_run_trained_once(run_dir, at_fault: dict) -> dict:
    """A 2-rank collective run of STEPS steps of 16 went on 20+ steps after the fault (`at_fault`: rank ->
    step) and trained every sequence number exactly once, in order; {rank: samples trained}."""
    trained = {}
    for r in range(2):
        lines = step_lines(run_dir / "ranks" / f"{r}.jsonl")
        assert len(lines) == STEPS > at_fault[r] + 20
        trained[r] = _trained_once(lines, STEPS)
    assert trained == {0: STEPS * 16, 1: STEPS * 16}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["device_steps_total"] == 2 * STEPS and summary["samples_trained"] == 2 * STEPS * 16
    return trained
