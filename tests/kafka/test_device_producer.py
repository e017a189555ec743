"""`edgestream.DeviceProducer` (issue 33 item 5): a device's samples, sent from device-side Python, reach a
run's consumer (`KafkaStreamDataset`) as batches with their values, sequence numbers and key; bad arguments
are one-line errors naming the argument; `rate` paces; delivery failures are raised, never lost; no torch."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from support.streams import _read_all

import edgestream
from edgestream.consumers import KafkaStreamDataset
from edgestream.data import Affine, SampleSerde, SampleSpec, wire
from edgestream.kafka import device_topic
from edgestream.kafka.admin import KafkaUnavailable, admin_client
from edgestream.kafka.layout import StreamLayout
from edgestream.kafka.topic_provision import ensure_run_topics
from edgestream.producers.device import DeliveryError, DeviceProducer


def _read(bootstrap, run, device, spec, n, devices, layout=None):
    """The first `n` samples of `device`'s stream, as the run's consumer hands them out: x as float32 values
    (an Affine of scale 1: a consumer always normalises; the exact bytes are tests/unit/test_wire_spec.py's)."""
    ds = KafkaStreamDataset(bootstrap, run, device, num_devices=devices, serde=SampleSerde(spec, ONE),
                            batch={"policy": "fixed", "size": n}, timeout=30, layout=layout)
    try:
        b = ds.next_batch()
        assert b is not None and b.dlq == 0
        ds.ack(b)
        return b
    finally:
        ds.close()


ONE = Affine((1.0,), (0.0,))

CASES = [  # (input dtype, shape, target: None = class index, else (float dtype or None = Python floats, shape))
    ("uint8", (1, 4, 4), None),
    ("float32", (6,), ("float32", ())),
    ("float16", (2, 3), ("float32", (2,))),
    ("int16", (2, 1, 2, 3), ("float64", ())),
    ("int64", (3,), None),
    ("float64", (2, 2), (None, (3,))),  # y as a Python list: float32 on the wire
]


@pytest.mark.parametrize(("dtype", "shape", "target"), CASES, ids=[f"{c[0]}{len(c[1])}d" for c in CASES])
def test_samples_reach_the_runs_consumer(bootstrap, run_prefix, dtype, shape, target):
    rng = np.random.default_rng(len(shape))
    n, device, devices = 5, 1, 2
    dt = np.dtype(dtype)
    xs = (rng.normal(size=(n, *shape)) * 50).astype(dt) if dt.kind == "f" else \
        rng.integers(0, 200, size=(n, *shape)).astype(dt)
    if target is None:
        ys = [int(k) for k in rng.integers(0, 10, size=n)]
        spec = SampleSpec(dt, shape, 10)
    else:
        tdt, tshape = target
        raw = rng.normal(size=(n, *tshape))
        ys = [r.tolist() for r in raw] if tdt is None else list(raw.astype(tdt))
        spec = SampleSpec(dt, shape, 0, tshape, tdt or "float32")
    ensure_run_topics(bootstrap, run_prefix, range(devices))
    with DeviceProducer(bootstrap, run_prefix, device, start_seq=3) as dev:
        seqs = [dev.send(xs[k], ys[k], produce_time=1000.0 + k) for k in range(n)]
        assert dev.flush(30) == 0
    assert seqs == [3, 4, 5, 6, 7] and dev.delivered == n and dev.failed == 0
    b = _read(bootstrap, run_prefix, device, spec, n, devices)
    np.testing.assert_array_equal(b.x.numpy(), xs.astype(np.float32))
    want = np.asarray(ys, dtype=np.float32 if target is not None else np.int64)
    np.testing.assert_array_equal(b.labels.numpy(), want)
    assert b.seqs.tolist() == seqs and b.devices.tolist() == [device] * n
    assert b.produce_times.tolist() == [1000.0 + k for k in range(n)]
    assert {m.key() for m in b.messages} == {b"1"}
    assert {(m.topic(), m.partition()) for m in b.messages} == {(f"{run_prefix}.dev.1", 0)}


def test_the_partitioned_layout_and_resume(bootstrap, run_prefix):
    layout = StreamLayout(run_prefix, 5, 2)
    ensure_run_topics(bootstrap, run_prefix, range(5), layout=layout)
    spec = SampleSpec(np.uint8, (3,), 4)
    with DeviceProducer(bootstrap, run_prefix, 3, partitions=2, spec=spec) as dev:
        for k in range(3):
            dev.send(np.full(3, k, np.uint8), k)
    assert (dev.topic, dev.partition, dev.key) == (f"{run_prefix}.streams", 1, b"3")
    # a restarted device continues after the last sequence number in its stream
    with DeviceProducer(bootstrap, run_prefix, 3, layout=layout, start_seq="resume", spec=spec) as dev:
        assert dev.next_seq == 3
        dev.send(np.full(3, 3, np.uint8), 3)
    b = _read(bootstrap, run_prefix, 3, spec, 4, 5, layout=layout)
    assert b.seqs.tolist() == [0, 1, 2, 3] and b.labels.tolist() == [0, 1, 2, 3]
    assert {m.key() for m in b.messages} == {b"3"}


def test_bad_arguments_are_one_line_errors(bootstrap, run_prefix):
    ensure_run_topics(bootstrap, run_prefix, [0])
    bad_init = [
        (dict(device=-1), "device: -1"), (dict(device=True), "device: True"), (dict(rate=0), "rate: 0"),
        (dict(rate=float("nan")), "rate: nan"), (dict(start_seq=-2), "start_seq: -2"),
        (dict(device=1), f"topic {run_prefix}.dev.1: "),  # not created: the run creates its topics
        (dict(partitions=3), f"topic {run_prefix}.streams: "),
        (dict(producer_overrides={"acks": 1}), "producer_overrides: acks"),
        (dict(partitions=0), "partitions: 0"), (dict(start_seq="last"), "start_seq: 'last'"),
        (dict(run=""), "run: ''"), (dict(outage_s=0), "outage_s: 0"), (dict(outage_s=-1.5), "outage_s: -1.5"),
        (dict(outage_s=float("inf")), "outage_s: inf"), (dict(outage_s="60"), "outage_s: '60'"),
    ]
    for kwargs, start in bad_init:
        with pytest.raises(ValueError) as err:
            DeviceProducer(bootstrap, **{"run": run_prefix, "device": 0, "timeout_s": 10, **kwargs})
        assert str(err.value).startswith(start) and "\n" not in str(err.value), (kwargs, str(err.value))
    with DeviceProducer(bootstrap, run_prefix, 0, spec=None) as dev:
        bad_send = [
            (np.zeros(3, np.uint16), 1, "x: dtype uint16 is not allowed; must be one of uint8, float32"),
            (np.zeros(3, bool), 1, "x: dtype bool"),
            (np.float32(1.0), 1, "x: shape () is not allowed; must have 1-4 dimensions"),
            (np.zeros((1,) * 5, np.uint8), 1, "x: shape (1, 1, 1, 1, 1)"),
            (np.zeros((2, 0), np.uint8), 1, "x: shape (2, 0)"),
            ([[1, 2], [3]], 1, "x: not an array"),
            (["a"], 1, "x: dtype <U1"),
            (np.zeros(3, np.uint8), -1, "y: class index -1 is not allowed; must be in [0, 2**31)"),
            (np.zeros(3, np.uint8), 2**31, "y: class index 2147483648"),
            (np.zeros(3, np.uint8), True, "y: a bool"),
            (np.zeros(3, np.uint8), np.array([1, 2]), "y: an array of dtype int64 is not allowed"),
            (np.zeros(3, np.uint8), np.zeros((2, 2), np.float32), "y: a float target of shape (2, 2)"),
            (np.zeros(3, np.uint8), [], "y: a float target of shape (0,)"),
            (np.zeros(3, np.uint8), float("nan"), "y: a float target must be finite"),
            (np.zeros(3, np.uint8), "cat", "y: str cat is not allowed"),
        ]
        for x, y, start in bad_send:
            with pytest.raises(ValueError) as err:
                dev.send(x, y)
            assert str(err.value).startswith(start) and "\n" not in str(err.value), (start, str(err.value))
        with pytest.raises(ValueError, match="^produce_time: 'now' is not allowed"):
            dev.send(np.zeros(3, np.uint8), 1, produce_time="now")
        assert dev.sent == 0 and dev.next_seq == 0  # nothing was sent
        dev.send(np.zeros(3, np.uint8), 1)
        # the stream's first sample fixes its dtype, shape and kind of target (a run has one)
        for x, y in [(np.zeros(4, np.uint8), 1), (np.zeros(3, np.int8), 1), (np.zeros(3, np.uint8), 0.5)]:
            with pytest.raises(ValueError, match="^x, y: .* differs from this stream's first sample"):
                dev.send(x, y)
    with pytest.raises(RuntimeError, match="closed"):
        dev.send(np.zeros(3, np.uint8), 1)
    with pytest.raises(KafkaUnavailable, match=r"^bootstrap 127.0.0.1:1: no broker answered within 2 s"):
        DeviceProducer("127.0.0.1:1", run_prefix, 0, timeout_s=2)
    # with the run's spec, what its consumers would dead-letter is refused, with the DLQ reason
    with DeviceProducer(bootstrap, run_prefix, 0, spec=SampleSpec(np.uint8, (3,), 4)) as dev:
        for x, y, reason in [(np.zeros(3, np.uint8), 4, "bad_label"), (np.zeros(2, np.uint8), 1, "shape_mismatch"),
                             (np.zeros(3, np.int8), 1, "dtype_mismatch"), (np.zeros(3, np.uint8), 0.5, "target_mismatch")]:
            with pytest.raises(ValueError, match=f"^x, y: .* is not a sample of this run \\({reason};"):
                dev.send(x, y)
        assert dev.sent == 0


def test_rate_paces_the_samples(bootstrap, run_prefix):
    ensure_run_topics(bootstrap, run_prefix, [0])
    n, rate = 8, 20.0
    with DeviceProducer(bootstrap, run_prefix, 0, rate=rate) as dev:
        t0 = time.monotonic()
        for k in range(n):
            dev.send(np.array([k], np.int32), k)
        took = time.monotonic() - t0
    assert took >= (n - 1) / rate  # sample k no earlier than start + k / rate
    b = _read(bootstrap, run_prefix, 0, SampleSpec(np.int32, (1,), n), n, 1)
    # the schedule is absolute: sample k no earlier than sample 0 + k / rate, less a clock tick (one late sample
    # under load is followed by a shorter gap, as the schedule catches up: gaps alone do not say early)
    since = np.asarray(b.produce_times) - b.produce_times[0]
    assert (since >= np.arange(n) / rate - 0.005).all(), since


def test_delivery_failures_are_raised_not_lost(bootstrap, run_prefix):
    ensure_run_topics(bootstrap, run_prefix, [0])
    dev = DeviceProducer(bootstrap, run_prefix, 0)
    big = np.zeros(8000, np.uint8)
    dev.send(big, 1)
    assert dev.flush(30) == 0 and dev.delivered == 1
    # the broker now refuses these samples: a topic limit below them (librdkafka's own limit is higher)
    res = ConfigResource("topic", f"{run_prefix}.dev.0", incremental_configs=[
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
    admin = admin_client(bootstrap)
    admin.incremental_alter_configs([res])[res].result(30)
    time.sleep(1.0)
    dev.send(big, 1)
    with pytest.raises(DeliveryError) as err:
        dev.flush(30)
    assert err.value.failed == 1 and str(err.value).startswith("1 of 2 samples failed to deliver (first: ")
    assert f"{run_prefix}.dev.0 [0] seq 1:" in str(err.value) and "\n" not in str(err.value)
    assert dev.delivered == 1
    assert dev.flush(5) == 0  # each failure is raised once
    dev.close()
    assert dev.next_seq == 2
    # unflushed, a failure is raised by the next send; the context manager keeps the body's exception
    with pytest.raises(KeyError) as err:
        with DeviceProducer(bootstrap, run_prefix, 0, start_seq="resume") as dev:
            assert dev.next_seq == 1  # after the last sample in the stream (seq 1 was never written)
            dev.send(big, 1)
            deadline = time.monotonic() + 30
            while dev.failed == 0 and time.monotonic() < deadline:
                dev.producer.poll(0.1)
            with pytest.raises(DeliveryError, match="^1 of 1 samples failed"):
                dev.send(big, 1)
            assert dev.sent == 1  # that sample was not sent
            dev.send(big, 1)
            raise KeyError("the body's error")
    assert any(n.startswith("DeviceProducer.close: 1 of 2 samples failed") for n in err.value.__notes__)


def _topic_samples(bootstrap: str, topic: str, want: int) -> list:
    """Every sample in `topic` (one partition), in offset order: at least `want`, and whatever else is there."""
    return [wire.decode_sample(m.value()) for m in _read_all(bootstrap, topic, want, f"{topic}.check", limit_s=60)]


def test_a_kafka_outage_is_ridden_out_and_every_sample_arrives_once_in_order(broker, caplog):
    """The broker goes away while the device sends (its link drops): `send` goes on queueing at its rate, says
    the wait, and once the broker is back every sample is delivered once, in order, with its values."""
    bs, run = broker.bootstrap, "away-ddl-r1"
    ensure_run_topics(bs, run, [0])
    with caplog.at_level(logging.WARNING, logger="edgestream.kafka.outage"):
        dev = DeviceProducer(bs, run, 0, rate=40, outage_s=120)
        for k in range(20):
            dev.send(np.full((3,), k, np.int32), k % 7)
        assert dev.flush(30) == 0
        broker.stop()
        t0 = time.monotonic()
        for k in range(20, 180):  # 4 s at 40/s, Kafka away: queued, nothing waits for room
            dev.send(np.full((3,), k, np.int32), k % 7)
        assert time.monotonic() - t0 < 30 and dev.delivered == 20 and dev.outage.waiting
        # the device waits on (flushes) until it has said the wait (the outage announced once ANNOUNCE_S old, by a
        # call that finds Kafka still away): the event this test needs, whatever the machine's speed
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
                r.getMessage().startswith(f"waiting for Kafka at {bs} since ") for r in caplog.records):
            dev.flush(1.0)
        broker.start()
        assert dev.flush(120) == 0
        dev.close()
    assert dev.sent == dev.delivered == 180 and dev.failed == dev.unacknowledged == 0 and not dev.outage.waiting
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"waiting for Kafka at {bs} since ") and "giving up after 120 s, outage_s)" in m
               and "sending device 0's samples" in m for m in said), said
    assert any(m.startswith(f"Kafka at {bs} answers again after ") for m in said), said
    got = _topic_samples(bs, device_topic(run, 0), 180)
    assert [s.seq for s in got] == list(range(180))
    assert all((s.x == s.seq).all() and s.label == s.seq % 7 for s in got)


def test_past_outage_s_send_raises_one_line_and_what_was_queued_is_delivered_later(broker):
    """Kafka away past `outage_s` with the local queue full: `send` raises KafkaUnavailable naming the address
    and the budget, that sample is not sent (its sequence number is the next one's); the samples queued before
    stay queued and reach the topic once the broker is back."""
    bs, run = broker.bootstrap, "gone-ddl-r1"
    ensure_run_topics(bs, run, [0])
    dev = DeviceProducer(bs, run, 0, outage_s=2, producer_overrides={"queue.buffering.max.messages": 16})
    dev.send(np.zeros(4, np.uint8), 0)
    assert dev.flush(30) == 0
    broker.stop()
    deadline = time.monotonic() + 120  # a bound for a regression (a send that never gives up)
    with pytest.raises(KafkaUnavailable) as err:
        while time.monotonic() < deadline:
            dev.send(np.full(4, dev.next_seq, np.uint8), 0)
    assert str(err.value) == f"no answer from Kafka at {bs} for 2 s (outage_s) while sending device 0's samples"
    assert dev.sent == dev.next_seq == 17 and dev.delivered == 1  # 16 queued, the 18th not sent
    broker.start()
    assert dev.flush(120) == 0  # (their message timeout is outage_s + a minute's margin)
    assert dev.send(np.full(4, 17, np.uint8), 0) == 17  # the one that was not sent, again
    dev.close()
    assert dev.delivered == dev.sent == 18 and dev.failed == 0
    got = _topic_samples(bs, device_topic(run, 0), 18)
    assert [s.seq for s in got] == [int(s.x[0]) for s in got] == list(range(18))


def test_the_top_level_name_and_no_torch(tmp_path):
    assert edgestream.DeviceProducer is DeviceProducer and edgestream.DeliveryError is DeliveryError
    assert edgestream.KafkaUnavailable is KafkaUnavailable  # what `send` raises past outage_s
    assert torch  # (this test module uses torch; a device does not)
    from support.sources import BLOCKED_IMPORTS  # importing torch, matplotlib or scipy raises

    code = BLOCKED_IMPORTS + textwrap.dedent("""
        import numpy as np
        import edgestream
        from edgestream.data import wire
        D = edgestream.DeviceProducer
        from edgestream.producers import device
        assert "torch" not in sys.modules
        print("ok", D.__name__)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok DeviceProducer"), done.stderr[-2000:]
