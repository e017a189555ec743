"""Reused batch buffers (edgestream.data.buffers): the consumer decodes into a few reused host buffers, and a
batch handed out stays valid for as long as anything holds it (the trainer, a prefetch queue, autograd),
however many batches are decoded meanwhile; a buffer nothing holds any more is reused."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from confluent_kafka import Producer

from edgestream.consumers import KafkaStreamDataset
from edgestream.data import Affine, DeviceRule, SampleSerde, SampleSpec
from edgestream.data.buffers import SLOTS, BatchBuffers
from edgestream.kafka import device_topic, producer_config
from edgestream.kafka.topic_provision import ensure_run_topics

SPEC = SampleSpec(np.uint8, (3, 4, 4), 10)
SPEC_GPU = (3, 32, 32)


def _values(serde: SampleSerde, start: int, n: int) -> list[bytes]:
    return [serde.encode(np.full(SPEC.shape, k % 256, np.uint8), k % 10, 0, k, 0.0) for k in range(start, start + n)]


def _expected(start: int, n: int) -> torch.Tensor:
    raw = (np.arange(start, start + n) % 256).astype(np.uint8).reshape(n, 1, 1, 1) * np.ones(SPEC.shape, np.uint8)
    return torch.from_numpy(Affine()(raw))


def test_a_held_batch_is_never_overwritten_and_a_released_buffer_is_reused():
    serde, rule = SampleSerde(SPEC, Affine()), DeviceRule(0, 1)
    held = []
    for i in range(SLOTS + 3):  # more batches held at once than the pool keeps
        x = torch.from_numpy(serde.decode(_values(serde, 8 * i, 8), rule)[0].x)
        held.append(x[2:] if i % 2 else x * 1)  # a view of the batch, or a tensor computed from it
    for i, x in enumerate(held):
        want = _expected(8 * i, 8)
        assert torch.equal(x, want[2:] if i % 2 else want), f"batch {i} was overwritten"
    # released batches give their buffers back: the next decode writes into one of them
    pool = serde._pools[(np.dtype(np.float32), False)]
    pointers = {s.arr.ctypes.data for s in pool.slots}
    held.clear()
    gc.collect()
    again = serde.decode(_values(serde, 500, 8), rule)[0].x
    assert again.ctypes.data in pointers and np.array_equal(again, _expected(500, 8).numpy())


def test_a_larger_batch_grows_a_free_buffer_and_a_full_pool_allocates():
    pool = BatchBuffers((2,), np.uint8, slots=2)
    a = pool.take(3)
    b = pool.take(5)
    a[:], b[:] = 1, 2
    c = pool.take(4)  # both pooled buffers are held: a fresh one
    c[:] = 3
    assert (a == 1).all() and (b == 2).all() and pool.fresh == 1 and len(pool.slots) == 2
    del a
    d = pool.take(7)  # a's buffer is free, and grows to 7 rows
    assert d.shape == (7, 2) and (b == 2).all() and (c == 3).all()


def test_batches_a_prefetching_trainer_holds_stay_valid(bootstrap, run_prefix):
    """The dataset as a trainer with a prefetch queue uses it: several batches taken ahead and held (and
    acknowledged) while later ones are decoded; every held batch keeps its own samples."""
    ensure_run_topics(bootstrap, run_prefix, [0])
    serde = SampleSerde(SPEC, Affine())
    p = Producer(producer_config(bootstrap))
    for v in _values(serde, 0, 48):
        p.produce(device_topic(run_prefix, 0), value=v, key=b"0")
    assert p.flush(30) == 0
    ds = KafkaStreamDataset(bootstrap, run_prefix, 0, num_devices=1, serde=serde, timeout=20,
                            batch={"policy": "fixed", "size": 6}, commit="async")
    try:
        queue = []
        for _ in range(8):
            queue.append(ds.next_batch())
            if len(queue) > 3:  # a queue of 3 ahead: the oldest is trained on and released
                done = queue.pop(0)
                assert torch.equal(done.x, _expected(int(done.seqs[0]), 6))
                ds.ack(done)
        for b in queue:
            assert torch.equal(b.x, _expected(int(b.seqs[0]), 6)) and b.seqs.tolist() == list(
                range(int(b.seqs[0]), int(b.seqs[0]) + 6))
    finally:
        ds.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_staging_buffers_are_pinned_reused_and_the_batches_equal_the_host_decode():
    serde = SampleSerde(SampleSpec(np.uint8, (3, 32, 32), 10), Affine((1 / 255, 2 / 255, 3 / 255), (0.5, 0.0, -1.0)))
    rule, rng = DeviceRule(0, 1), np.random.default_rng(3)
    got = []
    for i in range(3 * SLOTS):
        values = [serde.encode(rng.integers(0, 256, SPEC_GPU, dtype=np.uint8), k % 10, 0, 64 * i + k, 0.0)
                  for k in range(64)]
        dev = serde.decode(values, rule, device="cuda")[0].x
        got.append((dev, torch.from_numpy(serde.decode(values, rule)[0].x.copy())))
    torch.cuda.synchronize()
    pool = serde._pools[(np.dtype(np.uint8), True)]
    assert pool.pin and 1 <= len(pool.slots) <= SLOTS and torch.from_numpy(pool.slots[0].arr).is_pinned()
    for i, (dev, host) in enumerate(got):
        assert dev.device.type == "cuda" and dev.dtype == torch.float32
        assert torch.equal(dev.cpu(), host), f"batch {i} differs from the host decode"
