"""The consumer side of the data plane against hostile messages and broker trouble (real broker).

Every sample is validated against the run's dataset, not against its batch; every per-message failure
goes to the DLQ with a reason and the original key; an unreachable or bouncing broker is retried with a
deadline and then named; asynchronous acks reach the broker within ~100 ms even when the trainer idles.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from factories import free_port, stream_config
from support.streams import _digit, _read_all, _with_header

from edgestream.consumers.device_stream import trainer_group
from edgestream.consumers.from_plan import kafka_dataset
from edgestream.data.validate import DeviceRule, SampleSpec, decode_checked
from edgestream.data.wire import MAGIC, decode_sample
from edgestream.kafka import consumer_config, device_topic, dlq_topic, producer_config
from edgestream.kafka.topic_provision import ensure_run_topics
from edgestream.runner.plan import RunPlan

_cfg = stream_config  # the stream tests' config (tests/factories.py)


def _send(bootstrap: str, topic: str, values: list, keys: list | None = None) -> None:
    p = Producer(producer_config(bootstrap))
    for i, v in enumerate(values):
        p.produce(topic, value=v, key=(keys[i] if keys else b"0"))
    assert p.flush(30) == 0


# ---------------------------------------------------------------- validation without a broker
def test_every_sample_is_checked_against_the_dataset_not_the_batch():
    spec, rule = SampleSpec(np.uint8, (1, 8, 8), 10), DeviceRule(0, 2)
    odd = _digit(shape=(1, 1, 1))
    values = [odd] + [_digit(seq=k + 1) for k in range(15)]
    out, bad = decode_checked(values, spec, rule)
    assert bad == [(0, "shape_mismatch")]
    assert out[3].tolist() == list(range(1, 16))
    assert out[0].shape == (15, 1, 8, 8)


def test_label_device_target_and_dtype_rules():
    spec, rule = SampleSpec(np.uint8, (1, 8, 8), 10), DeviceRule(0, 2)
    good = _digit()
    nan_bits = struct.unpack("<i", struct.pack("<f", float("nan")))[0]
    values = [good, _with_header(good, label=-1), _with_header(good, label=1000), _with_header(good, label=nan_bits),
              _with_header(good, device=7), _with_header(good, target=9), _digit(dtype=np.float32), good]
    out, bad = decode_checked(values, spec, rule)
    assert bad == [(1, "bad_label"), (2, "bad_label"), (3, "bad_label"), (4, "device_mismatch"),
                   (5, "unknown_target"), (6, "dtype_mismatch")]
    assert len(out[1]) == 2
    # an injection topic accepts any device of the run (re-injected samples come back), no other
    inj = DeviceRule(0, 2, injected=True)
    _, bad = decode_checked([_digit(device=1), _digit(device=0), _digit(device=2)], spec, inj)
    assert bad == [(2, "device_mismatch")]


def test_a_failing_transform_is_isolated_per_message():
    spec, rule = SampleSpec(np.uint8, (1, 8, 8), 10), DeviceRule(0, 2)
    values = [_digit(label=k % 10, seq=k) for k in range(6)]

    def transform(x):  # fails on any batch holding the sample with label 4
        if (x[:, 0, 0, 0] == 7).all() and len(x) > 1:
            raise ValueError("boom")
        return x.astype(np.float32)

    out, bad = decode_checked(values, spec, rule, transform=transform)
    assert bad == [] and out[0].shape == (6, 1, 8, 8)  # one by one, every message passed

    out, bad = decode_checked(values, spec, rule, transform=lambda x: 1 / 0)
    assert out is None and [r for _, r in bad] == ["decode_error"] * 6


# ---------------------------------------------------------------- through Kafka
def test_odd_head_message_is_dead_lettered_and_the_batch_is_delivered(bootstrap, run_prefix):
    cfg = _cfg(run_prefix)
    ensure_run_topics(bootstrap, run_prefix, [0, 1])
    values = [_digit(shape=(1, 1, 1))] + [_digit(seq=k) for k in range(1, 17)]
    _send(bootstrap, device_topic(run_prefix, 0), values, keys=[b"odd"] + [b"0"] * 16)
    ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5)
    batch = ds.next_batch()  # the rejected sample is replaced by the next one: the fixed batch stays 16
    assert batch.n == 16 and batch.dlq == 1 and tuple(batch.x.shape) == (16, 1, 8, 8)
    assert batch.seqs.tolist() == list(range(1, 17)) and batch.next_offset == 17
    ds.ack(batch)
    ds.close()
    [m] = _read_all(bootstrap, dlq_topic(run_prefix), 1, f"{run_prefix}.dlqcheck")
    assert dict(m.headers())["reason"] == b"shape_mismatch" and m.key() == b"odd"  # the original key is kept
    assert dict(m.headers())["seq"] == b"0" and dict(m.headers())["device"] == b"0"  # a readable header says so
    assert m.value() == values[0]


def test_channel_mismatch_is_no_poison_pill(bootstrap, run_prefix):
    """A 1-channel sample in a 3-channel run used to crash the loader at the same offset on every restart."""
    cfg = _cfg(run_prefix, dataset={"dataset": "synthetic", "shape": [3, 8, 8], "n_train": 64, "n_test": 32})
    ensure_run_topics(bootstrap, run_prefix, [0, 1])
    values = [_digit(seq=k, shape=(3, 8, 8)) for k in range(18)]
    values[5] = _digit(seq=5, shape=(1, 8, 8))
    values[9] = _digit(seq=9, shape=(3, 4, 16))
    _send(bootstrap, device_topic(run_prefix, 0), values)
    for _ in range(2):  # a restart without ack sees the same batch, and again does not crash
        ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5)
        batch = ds.next_batch()
        ds.close()
        assert batch.n == 16 and batch.dlq == 2  # the two rejected ones replaced by samples 16 and 17
        assert batch.seqs.tolist() == [k for k in range(18) if k not in (5, 9)]


def test_async_ack_reaches_the_broker_while_the_trainer_idles(bootstrap, run_prefix):
    cfg = _cfg(run_prefix)
    ensure_run_topics(bootstrap, run_prefix, [0, 1])
    _send(bootstrap, device_topic(run_prefix, 0), [_digit(seq=k) for k in range(64)])
    ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5, commit="async")
    for _ in range(3):  # acks in quick succession: the later ones are coalesced behind the first
        batch = ds.next_batch()
        ds.ack(batch)
    want = batch.next_offset
    # the trainer now idles (no take, no ack): the newest ack must still be committed, within ~100 ms
    c = Consumer(consumer_config(bootstrap, trainer_group(run_prefix, 0)))
    deadline, got = time.monotonic() + 10, -1
    while got != want and time.monotonic() < deadline:
        time.sleep(0.2)
        got = c.committed([TopicPartition(device_topic(run_prefix, 0), 0)], timeout=10)[0].offset
    c.close()
    ds.close()
    assert got == want == 48


def test_unreachable_broker_fails_fast_with_one_line_naming_the_address(tmp_path):
    """No librdkafka lines on the terminal, and an error that names the bootstrap address."""
    port = free_port()  # a port nothing listens on
    script = textwrap.dedent(f"""
        import numpy as np
        from edgestream.consumers import KafkaStreamDataset
        from edgestream.data.validate import SampleSpec
        from edgestream.kafka.admin import KafkaUnavailable
        try:
            KafkaStreamDataset("127.0.0.1:{port}", "nobody", 0, num_devices=1, spec=SampleSpec(np.uint8, (1, 8, 8), 10),
                               batch={{"policy": "fixed", "size": 8}}, broker_timeout_s=4)
        except KafkaUnavailable as exc:
            print("ERROR", exc)
    """)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=os.environ.copy())
    elapsed = time.monotonic() - t0
    assert proc.stdout.startswith("ERROR") and f"127.0.0.1:{port}" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "", proc.stderr[:2000]  # librdkafka's connection lines go to logging
    assert elapsed < 60  # bounded (4 s budget + interpreter start), not librdkafka's minutes of retries


def test_broker_bounce_mid_stream_loses_and_duplicates_nothing(run_prefix, tmp_path):
    """Stop the broker while a consumer reads (window lookups, watermarks, commits), start it again:
    the consumer retries through it and every sample arrives exactly once."""
    from edgestream.kafka import LocalBroker

    broker = LocalBroker(tmp_path / "broker")
    broker.start()
    try:
        bs = broker.bootstrap
        cfg = _cfg(run_prefix, batch={"policy": "rate", "min": 8, "max": 64})
        ensure_run_topics(bs, run_prefix, [0, 1])
        n = 600
        _send(bs, device_topic(run_prefix, 0), [_digit(seq=k) for k in range(n)])
        ds = kafka_dataset(RunPlan.resolve(cfg), bs, run_prefix, 0, timeout=2, broker_timeout_s=60)
        seqs: list[int] = []
        for _ in range(3):
            batch = ds.next_batch()
            seqs += batch.seqs.tolist()
            ds.ack(batch)
        broker.stop()
        restarter = threading.Timer(3.0, broker.start)
        restarter.start()
        deadline = time.monotonic() + 120
        while len(seqs) < n and time.monotonic() < deadline:
            item = ds.next_batch()
            if item is None:
                continue
            seqs += item.seqs.tolist()
            ds.ack(item)
        restarter.join()
        ds.close()
        assert sorted(seqs) == list(range(n)) and len(seqs) == n
        again = kafka_dataset(RunPlan.resolve(cfg), bs, run_prefix, 0, timeout=1)
        assert again.next_batch() is None  # every ack was durable across the bounce
        again.close()
    finally:
        broker.stop()


# ---------------------------------------------------------------- fuzz
def _mutants(rng: np.random.Generator, n: int, device: int) -> list[tuple[bytes | None, str | None]]:
    """(value, expected reason) of `n` hostile messages; reason None: any reason is fine (random bytes)."""
    good = _digit(device=device)
    kinds = ["truncated", "magic", "version", "dtype", "ndim0", "ndim5", "huge_dims", "short", "long", "label_neg",
             "label_big", "device", "tombstone", "target", "other_shape", "other_dtype", "random", "empty", "zero_dim"]
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        if kind == "truncated":
            out.append((good[: int(rng.integers(1, 48))], "truncated_header"))
        elif kind == "magic":
            out.append((b"XDGS" + good[4:], "bad_magic"))
        elif kind == "version":
            out.append((_with_header(good, version=int(rng.choice([0, 1, *range(3, 256)]))), "bad_version"))
        elif kind == "dtype":
            out.append((_with_header(good, dtype=int(rng.integers(8, 256))), "unknown_dtype"))
        elif kind == "ndim0":
            out.append((_with_header(good, ndim=0), "bad_shape"))
        elif kind == "ndim5":
            out.append((_with_header(good, ndim=5), "bad_shape"))
        elif kind == "huge_dims":
            out.append((_with_header(good, d0=0xFFFFFFFF, d1=0xFFFFFFFF, d2=0xFFFFFFFF), "bad_length"))
        elif kind == "zero_dim":
            out.append((_with_header(good, d1=0), "bad_shape"))
        elif kind == "short":
            out.append((good[: -int(rng.integers(1, 64))], "bad_length"))
        elif kind == "long":
            out.append((good + bytes(int(rng.integers(1, 9))), "bad_length"))
        elif kind == "label_neg":
            out.append((_with_header(good, label=-int(rng.integers(1, 2**31))), "bad_label"))
        elif kind == "label_big":
            out.append((_with_header(good, label=int(rng.integers(10, 2**31))), "bad_label"))
        elif kind == "device":
            out.append((_with_header(good, device=int(rng.integers(1, 2**32))), "device_mismatch"))
        elif kind == "tombstone":
            out.append((None, "truncated_header"))
        elif kind == "empty":
            out.append((b"", "truncated_header"))
        elif kind == "target":  # a target code that is neither a class index (0) nor a float dtype (1, 2, 5)
            out.append((_with_header(good, target=int(rng.choice([3, 4, 6, *range(7, 256)]))), "unknown_target"))
        elif kind == "other_shape":
            out.append((_digit(device=device, shape=tuple(int(d) for d in rng.integers(1, 5, size=3))), "shape_mismatch"))
        elif kind == "other_dtype":
            out.append((_digit(device=device, dtype=np.float32), "dtype_mismatch"))
        else:
            out.append((MAGIC + rng.integers(0, 256, size=int(rng.integers(0, 300)), dtype=np.uint8).tobytes(), None))
    return out


@pytest.mark.parametrize("policy", [{"policy": "fixed", "size": 32}, {"policy": "available", "max": 48}])
def test_fuzz_hostile_messages_interleaved_with_valid_ones(bootstrap, run_prefix, policy):
    rng = np.random.default_rng(20261123)
    cfg = _cfg(run_prefix, batch=policy)
    ensure_run_topics(bootstrap, run_prefix, [0, 1])
    mutants = _mutants(rng, 380, device=0)
    n_valid = 620
    stream: list[tuple[bytes | None, str | None]] = [(_digit(label=k % 10, seq=k), "ok") for k in range(n_valid)]
    tail = 40  # the stream ends with 40 valid samples: a fixed batch may leave < 32 of them unread
    for m in mutants:  # interleave at random positions, keeping the valid ones in sequence order
        stream.insert(int(rng.integers(0, len(stream) - tail + 1)), m)
    keys = [f"k{i}".encode() for i in range(len(stream))]
    _send(bootstrap, device_topic(run_prefix, 0), [v for v, _ in stream], keys)

    ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=3)
    seqs: list[int] = []
    dlq = 0
    deadline = time.monotonic() + 120  # no hang: bounded
    while len(seqs) < n_valid and time.monotonic() < deadline:
        item = ds.next_batch()
        if item is None:
            break
        x, y = item.x, item.labels
        assert len(x) == len(y) == item.n and ((y >= 0) & (y < 10)).all()
        assert bool((item.devices == 0).all())
        seqs += item.seqs.tolist()
        dlq += item.dlq
        ds.ack(item)
    ds.close()
    assert len(seqs) == len(set(seqs)) and sorted(seqs) == list(range(len(seqs)))  # in order, exactly once
    assert len(seqs) >= n_valid - (31 if policy["policy"] == "fixed" else 0)
    assert dlq == len(mutants)  # every bad message (all lie before the tail) went to the DLQ
    msgs = _read_all(bootstrap, dlq_topic(run_prefix), dlq, f"{run_prefix}.dlqcheck")
    assert len(msgs) == dlq  # counts add up: what the batches reported is what the DLQ holds
    by_offset = {int(dict(m.headers())["source_offset"]): m for m in msgs}
    for i, (_, reason) in enumerate(stream):
        if reason == "ok":
            assert i not in by_offset
            continue
        m = by_offset[i]
        assert m.key() == keys[i]
        got = dict(m.headers())["reason"].decode()
        assert reason is None or got == reason, (i, reason, got)
    assert all(decode_sample(v).seq == k for k, (v, _) in enumerate(s for s in stream if s[1] == "ok"))
