"""The streaming data plane end to end against a real broker: producers -> Kafka -> consumers -> batches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import torch
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from factories import stream_config  # tests/factories.py

from edgestream.consumers import KafkaStreamDataset, StreamBatch, make_dataloader
from edgestream.consumers.from_plan import kafka_dataset
from edgestream.data import encode_sample
from edgestream.kafka import consumer_config, device_topic, dlq_topic, producer_config
from edgestream.kafka.topic_provision import ensure_run_topics
from edgestream.producers.from_plan import stream_producer
from edgestream.runner.plan import RunPlan


def _cfg(name: str, devices: int = 2, rates: dict | None = None, algorithm: dict | None = None, **extra):
    return stream_config(name, {"dataset": "digits"}, {"policy": "fixed", "size": 32}, count=devices, rates=rates,
                         **({"algorithm": algorithm} if algorithm else {}), **extra)


def _produce(cfg, bootstrap, run, seconds: float, devices=None):
    p = stream_producer(RunPlan.resolve(cfg), bootstrap, run, devices or list(range(cfg.devices.count)))
    return p.run_for(seconds)


def _drain(ds: KafkaStreamDataset, want: int, ack: bool = True, limit_s: float = 60):
    seqs, metas = [], []
    t0 = time.monotonic()
    while sum(len(s) for s in seqs) < want and time.monotonic() - t0 < limit_s:
        item = ds.next_batch()
        if item is None:  # fewer than a batch left: the fixed policy keeps waiting for more
            break
        assert item.x.dtype.is_floating_point and len(item.x) == len(item.labels) == item.n == len(item)
        seqs.append(item.seqs)
        metas.append(item)
        if ack:
            ds.ack(item)
    return (np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)), metas


def test_persist_is_gap_free_per_device(bootstrap, run_prefix):
    cfg = _cfg(run_prefix, devices=2, rates={"distribution": "constant", "rate": 300})
    summary = _produce(cfg, bootstrap, run_prefix, 2.0)
    for dev in summary.devices:
        d, n = dev["device"], dev["delivered"]
        assert n >= 500
        ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, d, timeout=2)
        seqs, metas = _drain(ds, n)
        # every sample produced arrives exactly once, in order; batches are the fixed size
        assert seqs.tolist() == list(range(n))[: len(seqs)] and len(seqs) >= n - 32
        assert all(m.n == 32 for m in metas) and all(m.dropped == 0 for m in metas)
        ds.close()


def test_truncate_drops_exactly_what_it_reports(bootstrap, run_prefix):
    cfg = _cfg(run_prefix, devices=1, rates={"distribution": "constant", "rate": 400},
               algorithm={"name": "scadles", "buffer": "truncate", "batch": {"policy": "rate", "min": 8, "max": 1024}})
    producer = stream_producer(RunPlan.resolve(cfg), bootstrap, run_prefix, [0])
    producer.run_for(2.5)  # a backlog of ~1000 samples, most older than the 1 s window
    ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5)
    batch = ds.next_batch()
    assert batch.dropped > 0
    seqs = batch.seqs
    # the batch starts right after the dropped samples: nothing lost silently
    assert seqs[0] == batch.dropped
    assert np.all(np.diff(seqs) == 1)
    ds.ack(batch)
    assert batch.dropped + batch.buffer_samples + batch.n == producer.stats[0].delivered
    ds.close()


def test_rate_accuracy_10s(bootstrap, run_prefix):
    cfg = _cfg(run_prefix, devices=4, rates={"distribution": "uniform", "low": 20, "high": 120})
    producer = stream_producer(RunPlan.resolve(cfg), bootstrap, run_prefix, list(range(4)))
    summary = producer.run_for(10.0)
    for dev in summary.devices:
        target = dev["target_rate"]
        # count what an independent consumer sees with produce times inside the 10 s window
        c = Consumer(consumer_config(bootstrap, f"{run_prefix}.check.{dev['device']}"))
        c.assign([TopicPartition(device_topic(run_prefix, dev["device"]), 0, 0)])
        n, idle = 0, 0
        while n < dev["delivered"] and idle < 10:
            msgs = c.consume(5000, timeout=0.5)
            idle = idle + 1 if not msgs else 0
            n += sum(1 for m in msgs if m.error() is None)
        c.close()
        assert n == dev["delivered"]
        assert abs(n / 10.0 - target) <= 0.05 * target + 1.0, (dev, n)


def test_injection_counts_add_up(bootstrap, run_prefix):
    cfg = _cfg(run_prefix, devices=3, rates={"distribution": "constant", "rate": 300},
               algorithm={"name": "scadles", "batch": {"policy": "fixed", "size": 40},
                          "injection": {"alpha": 0.5, "beta": 0.25}})
    _produce(cfg, bootstrap, run_prefix, 1.0)
    from edgestream.streams import build_injection

    sets = [kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, d, timeout=5) for d in range(3)]
    injection = build_injection({"alpha": 0.5, "beta": 0.25})
    sent = 0
    for step in range(3):
        for d, ds in enumerate(sets):
            batch = ds.next_batch()
            # the algorithm decides (ScaDLES' Inject request); the dataset only performs it
            plan = injection.plan(0, d, step, 3, batch.n)
            n, _ = ds.inject(batch, plan.indices, plan.targets)
            # ceil(0.5 * 3) = 2 targets, floor(0.25 * b_i) samples each (b_i counts injected samples)
            assert n == plan.samples_sent == 2 * (batch.n // 4)
            # injected rows come last and keep their origin device and sequence number
            own = batch.n - batch.injected
            assert (batch.devices[:own] == d).all() and len(batch.messages) == batch.n
            sent += n
            ds.ack(batch)
    for ds in sets:
        ds.channel.flush()
    time.sleep(0.5)
    received = 0
    for ds in sets:
        values, _ = ds.channel.receive(wait_s=0.5)
        received += ds.totals["injected_in"] + len(values)
    assert sent >= 3 * 3 * 20 and received == sent
    assert sum(ds.totals["injected_bytes"] for ds in sets) == sent * len(encode_sample(np.zeros((1, 8, 8), np.uint8), 0, 0, 0, 0.0))
    for ds in sets:
        ds.close()


def test_corrupted_message_goes_to_dlq_and_data_keeps_flowing(bootstrap, run_prefix):
    cfg = _cfg(run_prefix, devices=1)
    ensure_run_topics(bootstrap, run_prefix, [0])
    p = Producer(producer_config(bootstrap))
    topic = device_topic(run_prefix, 0)
    img = np.zeros((1, 8, 8), np.uint8)
    for k in range(41):
        value = encode_sample(img, k % 10, 0, k, time.time())
        if k == 7:
            value = b"JUNK" + value[4:]
        p.produce(topic, value=None if k == 12 else value, key=b"0")  # 12: a null value (tombstone)
    p.flush()
    ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5)
    batch = ds.next_batch()
    assert batch.dlq == 2 and batch.n == 32  # the fixed batch of 32: the two rejected ones replaced
    assert batch.seqs.tolist() == [k for k in range(34) if k not in (7, 12)] and batch.next_offset == 34
    ds.ack(batch)
    ds.close()
    c = Consumer(consumer_config(bootstrap, f"{run_prefix}.dlqcheck"))
    c.assign([TopicPartition(dlq_topic(run_prefix), 0, 0)])
    msgs = []
    for _ in range(20):
        msgs += [m for m in c.consume(10, timeout=0.5) if m.error() is None]
        if len(msgs) >= 2:
            break
    c.close()
    assert len(msgs) == 2
    headers = [dict(m.headers()) for m in msgs]
    assert headers[0]["reason"] == b"bad_magic" and headers[0]["source_offset"] == b"7"
    assert headers[1]["reason"] == b"truncated_header" and headers[1]["source_offset"] == b"12"


def test_crash_before_ack_redelivers_exactly_the_unacknowledged(bootstrap, run_prefix):
    cfg = _cfg(run_prefix, devices=1, rates={"distribution": "constant", "rate": 400})
    _produce(cfg, bootstrap, run_prefix, 1.0)
    ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5)
    m1 = ds.next_batch()
    ds.ack(m1)
    m2 = ds.next_batch()  # taken, never acknowledged: the "crash"
    ds.stream.reader.consumer.close()
    again = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5)
    m3 = again.next_batch()
    assert m3.seqs.tolist() == m2.seqs.tolist()
    assert m3.seqs[0] == m1.seqs[-1] + 1
    again.close()


def test_dataloader_yields_tensors(bootstrap, run_prefix):
    cfg = _cfg(run_prefix, devices=1)
    _produce(cfg, bootstrap, run_prefix, 0.5)
    ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5, max_batches=2)
    batches = list(make_dataloader(ds))
    assert len(batches) == 2
    first = batches[0]
    assert isinstance(first, StreamBatch) and first.n == 32 and first.step == 0 and batches[1].step == 1
    assert first.x.shape == (32, 1, 8, 8) and first.labels.dtype == torch.int64
    assert first.offsets == {"dev": 32, "inj": None} and first.wait_s >= 0 and first.dropped == first.injected == 0
    ds.close()


def test_sigterm_to_produce_loses_nothing(bootstrap, run_prefix, tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(yaml.safe_dump({"name": "sig", "data": {"dataset": "digits"},
                                        "devices": {"count": 2, "rates": {"distribution": "constant", "rate": 500}}}))
    run_id = run_prefix.replace("t-", "")[:60]
    proc = subprocess.Popen([sys.executable, "-m", "edgestream.cli", "produce", str(cfg_file), "--bootstrap", bootstrap,
                             "--run-id", run_id, "--report-every", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    # wait for the first effective-rate report (streaming has begun), then stop it mid-stream
    first_report = ""
    deadline = time.monotonic() + 120
    while "delivered" not in first_report and time.monotonic() < deadline and proc.poll() is None:
        first_report = proc.stderr.readline()
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, errtext = proc.communicate(timeout=90)
    assert proc.returncode == 0, errtext
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["delivered"] > 0 and summary["failed"] == 0
    run = f"sig-scadles-{run_id}"
    for dev in summary["devices"]:
        c = Consumer(consumer_config(bootstrap, f"{run}.sigcheck.{dev['device']}"))
        c.assign([TopicPartition(device_topic(run, dev["device"]), 0, 0)])
        from edgestream.data import decode_sample

        seqs, idle = [], 0
        while idle < 6:
            msgs = c.consume(5000, timeout=0.5)
            idle = idle + 1 if not msgs else 0
            seqs += [decode_sample(m.value()).seq for m in msgs if m.error() is None]
        c.close()
        assert len(seqs) == dev["delivered"]
        assert sorted(seqs) == list(range(dev["delivered"]))


def test_async_acks_are_coalesced_and_never_lose(bootstrap, run_prefix):
    cfg = _cfg(run_prefix, devices=1, rates={"distribution": "constant", "rate": 400})
    _produce(cfg, bootstrap, run_prefix, 1.0)
    ds = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5, commit="async")
    metas = []
    for _ in range(6):
        batch = ds.next_batch()
        ds.ack(batch)
        metas.append(batch)
    # a crash now (no close): the broker holds at most the newest acknowledged offset, so a restart
    # re-delivers from at or before the first unacknowledged sample -- duplicates, never a gap
    ds.stream.reader.consumer.close()
    again = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5, commit="async")
    m = again.next_batch()
    assert m.seqs[0] <= metas[-1].seqs[-1] + 1
    again.ack(m)
    again.close()  # close makes the newest acknowledged offset durable
    last = kafka_dataset(RunPlan.resolve(cfg), bootstrap, run_prefix, 0, timeout=5)
    m2 = last.next_batch()
    assert m2.seqs[0] == m.seqs[-1] + 1
    last.close()


def test_partition_reader_skips_inside_and_beyond_its_queue(bootstrap, run_prefix):
    from edgestream.consumers import PartitionReader

    ensure_run_topics(bootstrap, run_prefix, [0])
    p = Producer(producer_config(bootstrap))
    topic = device_topic(run_prefix, 0)
    img = np.zeros((1, 8, 8), np.uint8)
    for k in range(100):
        p.produce(topic, value=encode_sample(img, 0, 0, k, time.time()), key=b"0")
    p.flush()
    r = PartitionReader(bootstrap, topic, f"{run_prefix}.reader")
    deadline = time.monotonic() + 30
    while r.queued < 60 and time.monotonic() < deadline:
        r.fill(0.2, max_messages=60 - r.queued)
    assert r.queued == 60
    assert r.skip_to(25) == 25 and r.queued == 35          # inside the queue: dropped locally
    assert [m.offset() for m in r.take(5)] == [25, 26, 27, 28, 29]
    assert r.skip_to(80) == 50 and r.queued == 0           # beyond it: a seek
    while r.queued < 20 and time.monotonic() < deadline:
        r.fill(0.2, max_messages=20 - r.queued)
    assert [m.offset() for m in r.take_all()] == list(range(80, 100))
    r.close()
