"""The broker that leads a run's partition SIGKILLed mid-training on a three-node KRaft cluster (issue 31,
item 3): the cluster elects a new leader among the in-sync replicas (replication factor 3, min.insync.replicas
2, unclean leader election off), the run goes on and finishes; every sample is trained exactly once (the
per-device sequence numbers of the step lines), every parameter-server push is applied exactly once, the
producer lost and doubled nothing (its delivered count is what the topics hold); the node, started again,
rejoins every partition's in-sync replicas (read back with the admin API).

Real brokers: the session's three-node `cluster` (tests/conftest.py; a node a test killed is started again by
the fixture). Real `edgestream run --engine local` orchestrators with real producer / PS / trainer children
(digits, mlp, 2 devices). Timeouts are hang guards only; the assertions are on sequence numbers, counts,
records, lines and settings read back from the cluster.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from factories import write_cfg
from support.faults import (
    SSP,
    STEPS,
    _applied_pushes,
    _new_leader,
    _producer_lost_and_doubled_nothing,
    _rejoins,
    _replicated,
    _trained_once,
    collective_run_trained_once,
)
from support.runs import error_lines, finish, start, step_lines, wait_steps

from edgestream.consumers.device_stream import PartitionReader
from edgestream.kafka.clients import producer_config
from edgestream.kafka.outage import Outage
from edgestream.kafka.topic_names import device_topic, ps_topic

HANG_S = 240


def _leader_lines(run_dir: Path) -> list[str]:
    """What the run's processes said about a partition that waited for its new leader (kafka.leader_watch)."""
    said = []
    for log in sorted((run_dir / "ranks").glob("*.log")):
        said += [ln for ln in log.read_text(errors="replace").splitlines() if "edgestream.kafka.leader" in ln]
    return said


def _longest_pause(run_dir: Path) -> dict[int, float]:
    """Per device, the longest time between two step lines (s): how long the leader's death held training up."""
    pauses = {}
    for r in range(2):
        t = [e["time"] for e in step_lines(run_dir / "ranks" / f"{r}.jsonl")]
        pauses[r] = round(max(b - a for a, b in zip(t, t[1:], strict=False)), 1)
    return pauses


def _check_leader_lines(said: list[str], killed) -> None:
    """A wait for a new leader that was said is said to end: the new leader named, and it is not the killed node."""
    started = [ln for ln in said if "waiting for the cluster to elect a new leader" in ln]
    ended = [ln for ln in said if "leads it now" in ln or "it answers again" in ln]
    assert len(ended) == len(started), said
    for ln in started:
        assert f"Kafka broker {killed.node_id} at " in ln and "giving up after 300 s (runtime.kafka_outage_s)" in ln
    for ln in ended:
        m = re.search(r"Kafka broker (\d+) at \S+ leads it now \(waited [\d.]+ s for a new leader since broker (\d+) "
                      r"stopped answering here\); continuing", ln)
        assert m is None or (int(m.group(1)) != killed.node_id and int(m.group(2)) == killed.node_id), ln


def _run_killing_the_leader(cluster, cfg: Path, out: Path, run_dir: Path, topic_of) -> tuple:
    """Start the run, kill the node leading `topic_of(run)` after some steps, wait for the run's end."""
    proc = start(cfg, cluster.bootstrap, out=out)
    try:
        wait_steps(run_dir, proc, 2, 20)
        topic = topic_of(run_dir.name)
        killed = cluster.leader_of(topic)
        assert killed is not None, topic
        at_kill = {r: len(step_lines(run_dir / "ranks" / f"{r}.jsonl")) for r in range(2)}
        cluster.kill(killed)
        new = _new_leader(cluster, topic, killed)
        topics = _replicated(cluster, run_dir.name)
        code, _, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    assert code == 0, err[-3000:]
    assert not error_lines(err), err
    return killed, new, at_kill, topics


def test_a_reader_waiting_on_a_partition_whose_leader_dies_says_so_and_goes_on(cluster, run_prefix, caplog):
    """The trainer's reader (PartitionReader) waiting for samples while the broker leading its partition is
    SIGKILLed: one line naming the partition, the dead broker and the budget, a wait of the process's outage
    ("waiting for a new leader of ..."), then the new leader named; the messages produced meanwhile come once
    each, in order."""
    bs, topic = cluster.bootstrap, f"{run_prefix}.dev.0"
    admin = AdminClient({"bootstrap.servers": bs})
    (fut,) = admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})]).values()
    fut.result(timeout=60)
    assert len(cluster.partition(topic).replicas) == 3
    producer = Producer(producer_config(bs))
    for i in range(10):
        producer.produce(topic, str(i).encode())
    assert producer.flush(30) == 0
    waits: list[tuple[str, str]] = []
    outage = Outage(bs, 300.0, listener=lambda state, info: waits.append((state, info.what)))
    reader = PartitionReader(bs, topic, f"{run_prefix}.g", outage=outage)
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + HANG_S
        while len(got) < 10 and time.monotonic() < deadline:
            reader.fill(0.2)
            got += [m.value() for m in reader.take_all()]
        killed = cluster.leader_of(topic)
        with caplog.at_level(logging.WARNING, logger="edgestream.kafka"):
            cluster.kill(killed)
            for i in range(10, 20):  # acks=all: acknowledged once the new leader has them
                producer.produce(topic, str(i).encode())
            while len(got) < 20 and time.monotonic() < deadline:
                reader.check_broker()   # what the stream's wait loop does between fetches
                reader.fill(0.05)
                got += [m.value() for m in reader.take_all()]
        assert producer.flush(HANG_S) == 0
    finally:
        reader.close()
    assert got == [str(i).encode() for i in range(20)]
    said = [r.getMessage() for r in caplog.records if r.name == "edgestream.kafka.leader"]
    assert len(said) == 2, said
    assert said[0].startswith(f"{topic}: its leader, Kafka broker {killed.node_id} at ")
    assert said[0].endswith("waiting for the cluster to elect a new leader among the in-sync replicas (1, 2, 3), "
                            "giving up after 300 s (runtime.kafka_outage_s)")
    new = cluster.partition(topic).leader
    assert new != killed.node_id and said[1].startswith(f"{topic}: Kafka broker {new} at ")
    assert said[1].endswith("stopped answering here); continuing") and "leads it now (waited " in said[1]
    assert waits == [("start", f"waiting for a new leader of {topic}"), ("end", f"waiting for a new leader of {topic}")]
    assert not outage.waiting
    print(*said, sep="\n")


def test_a_collective_run_rides_out_the_death_of_its_device_streams_leader(cluster, run_prefix, tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=STEPS, every_steps=50,
                    stop={"target_accuracy": None, "max_time_s": 900, "max_steps": STEPS})
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    killed, new, at_kill, topics = _run_killing_the_leader(cluster, cfg, out, run_dir, lambda run: device_topic(run, 0))
    # training went on after the election, and trained every sequence number exactly once, in order
    trained = collective_run_trained_once(run_dir, at_kill)
    producer = _producer_lost_and_doubled_nothing(cluster.bootstrap, run_dir)
    said = _leader_lines(run_dir)
    _check_leader_lines(said, killed)
    # the killed node, started again, catches up and rejoins the in-sync replicas of every topic of the run
    cluster.restart(killed)
    _rejoins(cluster, topics, killed)
    print(f"killed node {killed.node_id} (leader of {device_topic(run_dir.name, 0)}) at steps {at_kill}; new leader "
          f"{new}; trained {trained}; producer delivered {producer['delivered']}; longest pause {_longest_pause(run_dir)} s; leader lines:", *said, sep="\n")


@pytest.mark.timeout(900)
def test_a_ps_run_rides_out_the_death_of_its_ps_topics_leader(cluster, run_prefix, tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=STEPS, every_steps=50, algorithm=SSP,
                    stop={"target_accuracy": None, "max_time_s": 900, "max_steps": STEPS})
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ssp-r1"
    killed, new, at_kill, topics = _run_killing_the_leader(cluster, cfg, out, run_dir,
                                                           lambda run: ps_topic(run, "push"))
    assert ps_topic(run_dir.name, "push") in topics and ps_topic(run_dir.name, "pull.1") in topics
    summary = json.loads((run_dir / "summary.json").read_text())
    ranks = [json.loads((run_dir / "ranks" / f"{r}.summary.json").read_text()) for r in range(2)]
    # every worker's sequence numbers trained once, in order, whole batches of 16; training went on after it
    for r in range(2):
        lines = step_lines(run_dir / "ranks" / f"{r}.jsonl")
        assert len(lines) == ranks[r]["steps"] > at_kill[r] + 20
        assert _trained_once(lines, len(lines)) == 16 * len(lines)
    # every push applied exactly once: ids 1..steps of each worker, none twice, none missing
    applied = _applied_pushes(run_dir, 2)
    for r in range(2):
        assert sorted(applied[r]) == list(range(1, ranks[r]["steps"] + 1)), r
    ps = summary["ps"]
    assert ps["status"] == "finished" and ps["rejected"] == 0 and ps["restarts"] == 0
    assert ps["pushes"] == [ranks[r]["steps"] for r in range(2)] and ps["pushes_applied"] == sum(ps["pushes"])
    producer = _producer_lost_and_doubled_nothing(cluster.bootstrap, run_dir)
    said = _leader_lines(run_dir)
    _check_leader_lines(said, killed)
    cluster.restart(killed)
    _rejoins(cluster, topics, killed)
    print(f"killed node {killed.node_id} (leader of {ps_topic(run_dir.name, 'push')}) at steps {at_kill}; new leader "
          f"{new}; pushes {ps['pushes']} (duplicates dropped {ps['duplicates_dropped']}); producer delivered "
          f"{producer['delivered']}; longest pause {_longest_pause(run_dir)} s; leader lines:", *said, sep="\n")
