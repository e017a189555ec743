"""The partitioned layout (kafka.topics.layout: partitioned, issue 31 item 6): one stream topic `<run>.streams`
(and one `<run>.inj`) of P partitions, device d's samples keyed by d in partition d % P, with the per-device
layout's guarantees: order per device, no loss, no duplicate, resume from checkpointed positions.

Real broker (the session fixture): the dataset level (RunPlan.resolve(cfg).kafka_dataset) with devices sharing
a partition, the producer's restart on the shared topic, 200 device streams, and a real `edgestream run --engine
local` of 3 devices on 2 partitions whose trainer is killed and resumed.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from factories import stream_config as _cfg  # the stream tests' config
from factories import write_cfg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.runs import finish, resume, resume_ckpts, start, step_lines, wait_steps
from support.streams import _digit, dlq_reasons, drain

from edgestream.consumers.from_plan import kafka_dataset
from edgestream.data.serde import SampleSerde
from edgestream.kafka import consumer_config, list_topics, producer_config
from edgestream.kafka.admin import MAX_CREATE_RECORDS, _create_batches
from edgestream.kafka.layout import StreamLayout, default_partitions, streams_topic
from edgestream.kafka.status import format_status, run_status
from edgestream.kafka.stream_ends import stream_ends
from edgestream.kafka.topic_provision import ensure_run_topics
from edgestream.producers.from_plan import stream_producer
from edgestream.runner.plan import RunPlan


def partitioned(name: str, devices: int, partitions: int | None, **extra):
    """A digits config of `devices` devices with the partitioned layout."""
    topics = {"layout": "partitioned"} | ({"partitions": partitions} if partitions is not None else {})
    return _cfg(name, devices={"count": devices, "rates": {"distribution": "constant", "rate": 5}},
                kafka={"topics": topics}, **extra)


def write_interleaved(bootstrap: str, layout: StreamLayout, per_device: int, extra: list | None = None) -> None:
    """Samples 0..per_device-1 of every device, devices interleaved, each to its partition with its key (what
    the producer writes); `extra`: (partition, key, value) written halfway."""
    p = Producer(producer_config(bootstrap))
    for k in range(per_device):
        if k == per_device // 2:
            for part, key, value in extra or []:
                p.produce(streams_topic(layout.run), value=value, key=key, partition=part)
        for d in range(layout.devices):
            topic, part = layout.stream(d)
            p.produce(topic, value=_digit(label=k % 10, device=d, seq=k), key=layout.key(d), partition=part)
    assert p.flush(30) == 0


def read_partitions(bootstrap: str, topic: str, partitions: int, limit_s: float = 60.0) -> dict[int, list[int]]:
    """Every sample in `topic`'s partitions: device -> its sequence numbers in partition order."""
    c = Consumer(consumer_config(bootstrap, f"check-{uuid.uuid4().hex[:6]}"))
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seqs: dict[int, list[int]] = defaultdict(list)
    pos = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + limit_s
    try:
        while any(pos[p] < ends[p] for p in pos):
            assert time.monotonic() < deadline, "the partitions were not read in time"
            for m in c.consume(5000, timeout=0.3):
                if m.error() is None:
                    h = SampleSerde.header(m.value())
                    assert int(m.key()) == h.device and m.partition() == h.device % partitions
                    seqs[h.device].append(h.seq)
                    pos[m.partition()] = m.offset() + 1
    finally:
        c.close()
    return dict(seqs)


# ---------------------------------------------------------------- the layout object (no broker)
def test_a_device_s_topic_partition_and_key():
    per = StreamLayout("r", 3)
    assert (per.stream(2), per.injection(2), per.key(2), per.keep(2)) == (("r.dev.2", 0), ("r.inj.2", 0), b"2", None)
    assert sorted(per.topics()) == ["r.dev.0", "r.dev.1", "r.dev.2", "r.inj.0", "r.inj.1", "r.inj.2"]
    lay = StreamLayout("r", 5, 2)
    assert [lay.stream(d) for d in range(5)] == [("r.streams", d % 2) for d in range(5)]
    assert lay.injection(3) == ("r.inj", 1) and lay.topics() == {"r.streams": 2, "r.inj": 2}
    assert lay.sharing(3) == [1, 3] and lay.sharing(4) == [0, 2, 4]
    # device 2 takes only its own messages; device 0 (the partition's first) also what no device of it wrote
    assert [lay.keep(2)(k) for k in (b"2", b"0", b"4", b"junk", None)] == [True, False, False, False, False]
    assert [lay.keep(0)(k) for k in (b"0", b"2", b"4", b"junk", None)] == [True, False, False, True, True]
    assert [default_partitions(n) for n in (1, 3, 64, 5000)] == [1, 3, 64, 64]
    cfg = partitioned("x", 200, None)
    assert RunPlan.resolve(cfg).layout("x-r").partitions == 64


def test_a_run_s_topics_are_created_in_requests_kraft_accepts():
    """KRaft refuses a CreateTopics request of more than 10,000 metadata records (a per-device run of 1,000
    devices was one: 2,001 topics with their configs); create_topics cuts a run's topics into requests of at
    most MAX_CREATE_RECORDS (docs/BENCHMARKS.md, "Many device streams")."""
    for layout in (StreamLayout("r", 5000), StreamLayout("r", 5000, 64)):
        names = layout.topics() | {"r.dlq": 1}
        batches = _create_batches(list(names), names, 5)
        assert sorted(t for b in batches for t in b) == sorted(names)
        assert all(sum(1 + names[t] + 5 for t in b) <= MAX_CREATE_RECORDS < 10_000 for b in batches)
    assert len(_create_batches(list(StreamLayout("r", 5000).topics()), StreamLayout("r", 5000).topics(), 5)) == 15


# ---------------------------------------------------------------- the dataset on shared partitions
def _drain_all(bootstrap: str, run: str, cfg, devices: int) -> dict[int, list]:
    """Every device's batches, the devices read side by side as a run's trainers do (each waits out the end of
    its stream at the same time)."""
    def one(d: int) -> list:
        ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run, d, timeout=1.5)
        try:
            return drain(ds)
        finally:
            ds.close()

    with ThreadPoolExecutor(devices) as pool:
        return dict(enumerate(pool.map(one, range(devices))))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(devices=st.integers(2, 6), data=st.data())
def test_each_device_takes_its_own_samples_in_order_once(bootstrap, devices, data):
    """Devices sharing partitions: each device's batches hold its own samples, every one once, in order; the
    other devices' messages are skipped (never the DLQ's, never counted)."""
    partitions = data.draw(st.integers(1, devices), label="partitions")
    run = f"lay-{uuid.uuid4().hex[:8]}"
    cfg = partitioned(run, devices, partitions)
    layout = RunPlan.resolve(cfg).layout(run)
    ensure_run_topics(bootstrap, run, range(devices), layout=layout)
    n = 48
    write_interleaved(bootstrap, layout, n)
    for d, batches in _drain_all(bootstrap, run, cfg, devices).items():
        assert [b.n for b in batches] == [16] * (n // 16)
        assert [s for b in batches for s in b.seqs.tolist()] == list(range(n))
        assert all(set(b.devices.tolist()) == {d} and b.dlq == 0 and b.dropped == 0 for b in batches)
    assert list_topics(bootstrap, f"{run}.") == sorted([f"{run}.dlq", f"{run}.inj", f"{run}.streams"])


def test_a_stray_message_goes_to_the_dlq_once_and_a_restored_position_resumes(bootstrap, run_prefix):
    """A message in a shared partition keyed by no device of it is taken by the partition's first device only
    (to the DLQ, once); a dataset restored from another's state_dict continues right after it."""
    cfg = partitioned(run_prefix, 4, 2)
    layout = RunPlan.resolve(cfg).layout(run_prefix)
    ensure_run_topics(bootstrap, run_prefix, range(4), layout=layout)
    write_interleaved(bootstrap, layout, 64, extra=[(0, b"hostile", b"JUNK" * 20)])
    plan = RunPlan.resolve(cfg)
    ds = kafka_dataset(plan, bootstrap, run_prefix, 2, timeout=1.5)
    try:
        first = [ds.next_batch() for _ in range(2)]
        for b in first:
            ds.ack(b)
        state = ds.state_dict()
    finally:
        ds.close()
    assert [s for b in first for s in b.seqs.tolist()] == list(range(32))
    again = kafka_dataset(plan, bootstrap, run_prefix, 2, timeout=1.5)
    try:
        again.load_state_dict(state)
        rest = drain(again)
    finally:
        again.close()
    assert [s for b in rest for s in b.seqs.tolist()] == list(range(32, 64))  # no gap, no duplicate
    batches = _drain_all(bootstrap, run_prefix, cfg, 4)
    assert [sum(b.dlq for b in batches[d]) for d in range(4)] == [1, 0, 0, 0]
    assert dlq_reasons(bootstrap, run_prefix, 1) == {"bad_magic": 1}
    assert [len([s for b in batches[d] for s in b.seqs.tolist()]) for d in (0, 1, 3)] == [64, 64, 64]


def test_injected_samples_reach_their_target_on_a_shared_injection_topic(bootstrap, run_prefix):
    """scadles' injection over `<run>.inj`: a sample device 1 injects into device 3 (sharing partition 1 with
    device 1) reaches device 3 only."""
    cfg = partitioned(run_prefix, 4, 2, algorithm={"name": "scadles", "batch": {"policy": "fixed", "size": 8},
                                                   "injection": {"alpha": 0.5, "beta": 0.1}})
    plan = RunPlan.resolve(cfg)
    layout = plan.layout(run_prefix)
    ensure_run_topics(bootstrap, run_prefix, range(4), layout=layout)
    write_interleaved(bootstrap, layout, 16)
    sets = {d: kafka_dataset(plan, bootstrap, run_prefix, d, timeout=3) for d in (1, 3)}
    try:
        b1 = sets[1].next_batch()
        assert sets[1].inject(b1, [0, 1], [3]) == (2, sum(len(b1.messages[i].value()) for i in (0, 1)))
        sets[1].channel.flush()
        deadline = time.monotonic() + 60
        while sets[3].channel.reader.queued < 2 and time.monotonic() < deadline:
            sets[3].channel.reader.fill(0.5)
        b3 = sets[3].next_batch()
        sets[1].channel.reader.fill(1.0)
        assert sets[1].channel.reader.queued == 0  # device 1 reads partition 1 too, and skips device 3's
    finally:
        for ds in sets.values():
            ds.close()
    assert b3.injected == 2 and b3.devices.tolist() == [3] * 8 + [1, 1]
    assert b3.seqs.tolist() == list(range(8)) + b1.seqs.tolist()[:2]


# ---------------------------------------------------------------- the producer on the shared topic
def test_the_producer_continues_each_device_after_its_last_sample_on_a_shared_partition(bootstrap, run_prefix):
    cfg = partitioned(run_prefix, 5, 2)
    plan = RunPlan.resolve(cfg)
    first = stream_producer(plan, bootstrap, run_prefix, list(range(5))).run_for(1.5, report_every_s=0)
    assert first.complete and all(d["delivered"] > 0 for d in first.devices)
    ends = stream_ends(bootstrap, run_prefix, range(5), layout=plan.layout(run_prefix))
    assert ends == {d["device"]: d["delivered"] for d in first.devices}
    second = stream_producer(plan, bootstrap, run_prefix, list(range(5))).run_for(1.0, report_every_s=0)
    assert [d["start_seq"] for d in second.devices] == [ends[d] for d in range(5)]
    seqs = read_partitions(bootstrap, streams_topic(run_prefix), 2)
    for d in second.devices:
        assert seqs[d["device"]] == list(range(ends[d["device"]] + d["delivered"]))  # gap-free, each once


def test_two_hundred_device_streams_on_the_default_partitions(bootstrap, run_prefix):
    """The layout where topic-per-device is slow (docs/BENCHMARKS.md, "Many device streams"): 200 devices on
    one `<run>.streams` of 64 partitions (the default) -- 2 topics instead of 400. Every device's stream is
    gap-free in its partition, a sample of devices' readers take exactly their own, and a producer restarted
    continues every device."""
    devices = 200
    cfg = partitioned(run_prefix, devices, None)
    plan = RunPlan.resolve(cfg)
    layout = plan.layout(run_prefix)
    summary = stream_producer(plan, bootstrap, run_prefix, list(range(devices))).run_for(3.0, report_every_s=0)
    assert summary.complete and all(d["delivered"] >= 5 for d in summary.devices), summary.devices[:3]
    assert sorted(list_topics(bootstrap, f"{run_prefix}.")) == [f"{run_prefix}.{t}" for t in
                                                                ("dlq", "inj", "meta", "streams")]
    seqs = read_partitions(bootstrap, streams_topic(run_prefix), layout.partitions)
    assert sorted(seqs) == list(range(devices))
    assert all(seqs[d["device"]] == list(range(d["delivered"])) for d in summary.devices)
    ends = stream_ends(bootstrap, run_prefix, range(devices), layout=layout)
    assert ends == {d["device"]: d["delivered"] for d in summary.devices}
    for d in (0, 64, 131, 199):  # 0, 64, 128, 192 share partition 0
        ds = kafka_dataset(plan, bootstrap, run_prefix, d, timeout=3, max_batches=1)
        try:
            b = ds.next_batch(size=5)
        finally:
            ds.close()
        assert b.seqs.tolist() == [0, 1, 2, 3, 4] and set(b.devices.tolist()) == {d} and b.dlq == 0


# ---------------------------------------------------------------- a real run, a trainer killed, --resume
@pytest.mark.timeout(900)
def test_a_partitioned_run_trains_every_sample_once_across_a_killed_trainer(bootstrap, run_prefix, tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, devices=3, max_steps=100000, every_steps=3,
                    kafka={"topics": {"layout": "partitioned", "partitions": 2}})
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    proc = start(cfg, bootstrap, out=out)
    wait_steps(run_dir, proc, 3, 7)
    pids = json.loads((run_dir / "pids.json").read_text())["trainers"]
    os.kill(pids["1"], signal.SIGKILL)
    code, _, err = finish(proc)
    assert code != 0
    assert sorted(list_topics(bootstrap, f"{run_dir.name}.")) == [f"{run_dir.name}.{t}" for t in
                                                                  ("dlq", "inj", "meta", "streams")]
    first = {r: step_lines(run_dir / "ranks" / f"{r}.jsonl") for r in range(3)}
    ck = {r: c["step"] for r, c in resume_ckpts(run_dir, 3).items()}  # the killed rank may be one behind
    assert len(set(ck.values())) == 1 and ck[0] >= 3, ck
    stop = ck[0] + 6
    code, _, err = resume(cfg, bootstrap, run_dir, f"stop.max_steps={stop}")
    assert code == 0, err
    for r in range(3):
        lines = step_lines(run_dir / "ranks" / f"{r}.jsonl")
        kept = [e for e in first[r] if e["step"] < ck[r]]
        after = lines[len(first[r]):]
        assert [e["step"] for e in after] == list(range(ck[r], stop))
        trained = kept + after  # what the model holds: up to the checkpoint, then the resumed steps
        spans = [(e["seq_first"], e["seq_last"]) for e in trained]
        breaks = [(a, b) for a, b in zip(spans, spans[1:], strict=False) if b[0] != a[1] + 1]
        assert spans[0][0] == 0 and not breaks, (r, ck[r], breaks, spans)


def test_status_shows_each_device_s_own_samples_of_a_shared_partition(bootstrap, run_prefix):
    """`edgestream status` of a partitioned run: produced, acknowledged and lag are the device's own samples
    (not its partition's offsets)."""
    cfg = partitioned(run_prefix, 4, 2)
    plan = RunPlan.resolve(cfg)
    summary = stream_producer(plan, bootstrap, run_prefix, list(range(4))).run_for(1.5, report_every_s=0)
    produced = {d["device"]: d["delivered"] for d in summary.devices}
    ds = kafka_dataset(plan, bootstrap, run_prefix, 1, timeout=3)
    try:
        ds.ack(ds.next_batch(size=5))
    finally:
        ds.close()
    st = run_status(bootstrap, run_prefix, interval_s=0)
    rows = {r["device"]: r for r in st["devices"]}
    assert {d: r["produced"] for d, r in rows.items()} == produced
    assert rows[1]["acknowledged"] == 5 and rows[1]["lag"] == produced[1] - 5 and rows[1]["lag_s"] is not None
    assert all(rows[d]["acknowledged"] is None and rows[d]["lag"] == produced[d] for d in (0, 2, 3))
    text = format_status(st)
    assert "layout partitioned (2 partitions)" in text.splitlines()[0] and "DLQ 0" in text
