"""A batch is what the policy says (issue 32 item 2): hostile messages written into a device topic with a
plain confluent_kafka Producer never change a batch's size (nor a device's weight in the exchange).

Samples rejected to the DLQ are replaced by the next genuine ones: a fixed or rate batch and an
algorithm's explicit size wait for them as for any slow stream; `available` tops up from what is
buffered. Every hostile message reaches the DLQ with its reason, and every genuine sequence number is
trained exactly once. Real broker (the session fixture), a real `edgestream run --engine local`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import numpy as np
import pytest
from confluent_kafka import Producer
from factories import stream_config as _cfg  # the stream tests' config
from factories import write_cfg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.runs import finish, start, step_lines, wait_steps
from support.streams import _digit, _with_header, dlq_reasons, drain

from edgestream.consumers.from_plan import kafka_dataset
from edgestream.kafka import device_topic, producer_config
from edgestream.kafka.topic_names import injection_topic
from edgestream.kafka.topic_provision import ensure_run_topics
from edgestream.runner.plan import RunPlan

KINDS = ("garbage", "version", "device", "shape")
REASONS = {"garbage": "bad_magic", "version": "bad_version", "device": "device_mismatch", "shape": "shape_mismatch"}


def hostile(kind: str, k: int) -> bytes:
    """A hostile message for device 0's topic of a digits run (1x8x8 uint8, 10 classes)."""
    if kind == "garbage":
        return b"JUNK" + np.random.default_rng(k).integers(0, 256, 60 + k % 40, dtype=np.uint8).tobytes()
    if kind == "version":
        return _with_header(_digit(seq=10_000 + k), version=1)
    if kind == "device":  # a well-formed sample of another device
        return _digit(device=1, seq=10_000 + k)
    return _digit(seq=10_000 + k, shape=(1, 4, 4))


def burst(n: int, start: int = 0) -> list[bytes]:
    return [hostile(KINDS[(start + k) % len(KINDS)], start + k) for k in range(n)]


def write(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Write `values` in order with a plain producer (what anyone who can write to the topic can do)."""
    p = Producer(producer_config(bootstrap))
    for v in values:
        p.produce(topic, value=v, key=b"hostile")
    assert p.flush(30) == 0


# ---------------------------------------------------------------- the dataset against the session broker
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(size=st.integers(1, 70), at=st.integers(0, 120),
       policy=st.sampled_from([{"policy": "fixed", "size": 16}, {"policy": "rate", "min": 16, "max": 16}]))
def test_a_hostile_burst_never_changes_a_batch(bootstrap, size, at, policy):
    """A burst of `size` hostile messages after genuine sample `at`: every batch holds the policy's b_i
    genuine samples, in order, each once; the burst is in the DLQ with its reasons."""
    run = f"hb-{uuid.uuid4().hex[:8]}"
    ensure_run_topics(bootstrap, run, [0, 1])
    n = 160
    genuine = [_digit(label=k % 10, seq=k) for k in range(n)]
    write(bootstrap, device_topic(run, 0), genuine[:at] + burst(size) + genuine[at:])
    ds = kafka_dataset(RunPlan.resolve(_cfg(run, batch=policy)), bootstrap, run, 0, timeout=1.5)
    try:  # as many batches as the genuine samples fill; the last one ends where the topic does (below)
        batches = drain(ds, count=n // 16)
    finally:
        ds.close()
    assert [b.n for b in batches] == [16] * (n // 16) and all(b.target == 16 for b in batches)
    seqs = [s for b in batches for s in b.seqs.tolist()]
    assert seqs == list(range(n))  # every genuine sample once, in order
    assert sum(b.dlq for b in batches) == size == ds.totals["dlq"]
    assert batches[-1].next_offset == n + size  # the topic's end: every message taken, the rejected ones acknowledged
    want = Counter(REASONS[KINDS[k % len(KINDS)]] for k in range(size))
    assert dlq_reasons(bootstrap, run, size) == want


def test_an_explicit_size_and_peers_injected_samples(bootstrap, run_prefix):
    """An algorithm's explicit TakeBatch size is kept whatever is rejected, and the samples peers
    inject come on top of the device's own ones: a rejected injected sample is not replaced, a rejected
    own one is, and neither count is mistaken for the other."""
    ensure_run_topics(bootstrap, run_prefix, [0, 1])
    own = [_digit(seq=k) for k in range(40)]
    write(bootstrap, device_topic(run_prefix, 0), own[:3] + burst(9) + own[3:])
    # device 1 injected 3 of its samples into device 0, and someone one hostile message
    write(bootstrap, injection_topic(run_prefix, 0), [_digit(device=1, seq=500 + k) for k in range(3)]
          + [hostile("garbage", 99)])
    cfg = _cfg(run_prefix, algorithm={"name": "scadles", "batch": {"policy": "fixed", "size": 16},
                                      "injection": {"alpha": 0.5, "beta": 0.1}})
    ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=3)
    try:
        # the injection reader joins its topic on its own clock: let its 4 messages arrive first (bounded),
        # so that the first batch taken after they arrive is the first one, however loaded the machine is
        deadline = time.monotonic() + 60
        while ds.channel.reader.queued < 4 and time.monotonic() < deadline:
            ds.channel.reader.fill(1.0)
        assert ds.channel.reader.queued == 4
        first = ds.next_batch(size=10)
        second = ds.next_batch(size=10)
    finally:
        ds.close()
    # the injected ones join the batch taken after they arrive: the first
    assert (first.own, second.own) == (10, 10) and first.injected + second.injected == 3
    assert first.seqs[:10].tolist() == list(range(10)) and second.seqs[:10].tolist() == list(range(10, 20))
    assert [s for b in (first, second) for s in b.seqs[10:].tolist()] == [500, 501, 502]
    assert all(b.devices.tolist() == [0] * 10 + [1] * b.injected and b.n == 10 + b.injected for b in (first, second))
    assert first.dlq + second.dlq == 10 and first.dlq >= 9  # the 9 own ones with the first, the injected one with its batch
    assert ds.totals["samples"] == 23 and ds.totals["injected_in"] == 3 and ds.totals["dlq"] == 10


def test_available_takes_what_is_buffered_and_never_an_empty_batch(bootstrap, run_prefix):
    """`available` counts the rejected samples of a take as taken and tops up from what is buffered
    without waiting; a take whose messages were all rejected waits for one genuine sample."""
    ensure_run_topics(bootstrap, run_prefix, [0, 1])
    write(bootstrap, device_topic(run_prefix, 0), burst(30) + [_digit(seq=k) for k in range(12)] + burst(5, 30))
    ds = kafka_dataset(RunPlan.resolve(_cfg(run_prefix, batch={"policy": "available", "max": 20})),
                       bootstrap, run_prefix, 0, timeout=3)
    try:
        batches = drain(ds, limit_s=60)
    finally:
        ds.close()
    assert all(1 <= b.n <= 20 for b in batches)
    assert [s for b in batches for s in b.seqs.tolist()] == list(range(12))
    assert sum(b.dlq for b in batches) == 35 and batches[-1].next_offset == 47


# ---------------------------------------------------------------- a real run
@pytest.mark.timeout(600)
def test_a_hostile_burst_mid_run_keeps_every_batch_at_16(bootstrap, run_prefix, tmp_path):
    """60 hostile messages written into <run>.dev.0 at step 20 of a real ddl run (fixed 16): every step
    of both devices trains 16 genuine samples, each sequence number once, and the DLQ holds the 60."""
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, devices=2, max_steps=45)
    out = tmp_path / "runs"
    proc = start(cfg, bootstrap, out=out)
    run = f"{run_prefix}-ddl-r1"
    run_dir = out / run
    wait_steps(run_dir, proc, 2, 20)
    write(bootstrap, device_topic(run, 0), burst(60))
    code, _, err = finish(proc)
    assert code == 0, err
    steps = step_lines(run_dir / "events.jsonl")
    for d in (0, 1):
        mine = sorted((s for s in steps if s["device"] == d), key=lambda s: s["step"])
        assert [s["step"] for s in mine] == list(range(45))
        assert all(s["batch"] == 16 and s["seq_count"] == 16 and s["seq_last"] - s["seq_first"] == 15
                   for s in mine), [(s["step"], s["batch"]) for s in mine if s["batch"] != 16]
        assert [s["seq_first"] for s in mine] == [16 * k for k in range(45)]  # each genuine sample once
    assert sum(s.get("dlq", 0) for s in steps if s["device"] == 0) == 60
    assert sum(s.get("dlq", 0) for s in steps if s["device"] == 1) == 0
    assert json.loads((run_dir / "ranks" / "0.summary.json").read_text())["dlq"] == 60
    assert dlq_reasons(bootstrap, run, 60) == Counter({r: 15 for r in REASONS.values()})
