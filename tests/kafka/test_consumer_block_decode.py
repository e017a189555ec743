"""Blocks of batches (issue 36 item 3): a dataset whose stream already holds several batches takes them in
one take, decodes them in one C pass into one buffer (on a device: one copy, one normalisation kernel) and
hands them out one at a time as views of that block. Against a real broker: the batches equal the
one-batch path's bit for bit (x, targets, rows' fields, offsets, sizes), across dtypes, shapes, batch
sizes, normalisations and how many batches are there; a batch decoded ahead is never committed before it
is handed out (a crash re-delivers it); another size, a rejected message or a restored state leave the
stream exactly where the handed-out batches end.

Without a GPU the device path runs with torch_device="cpu" and "meta" (the same block and view code; the
device branch is the serde's, tested bit for bit in tests/kafka/test_consumer_device_decode.py); the CUDA test
runs where a GPU is present.
"""

from __future__ import annotations

import time
import uuid
from unittest import mock

import numpy as np
import pytest
import torch
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edgestream.consumers.dataset as dataset_mod
from edgestream.consumers import KafkaStreamDataset
from edgestream.consumers.device_stream import trainer_group
from edgestream.data import Affine, SampleSerde, SampleSpec, encode_sample
from edgestream.kafka import consumer_config, device_topic, producer_config
from edgestream.kafka.topic_provision import ensure_run_topics

DTYPES = [np.uint8, np.uint8, np.int16, np.float32, np.float16]
SHAPES = [(3, 4, 5), (1, 6, 6), (7,), (2, 3, 2, 2)]
TARGETS = [None, None, ((), np.float32), ((3,), np.float16)]


def _send(bootstrap: str, topic: str, values: list[bytes | None]) -> None:
    p = Producer(producer_config(bootstrap))
    for v in values:
        p.produce(topic, value=v, key=b"0")
    assert p.flush(30) == 0


def _rows(rng: np.random.Generator, dtype, shape, n: int) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=(n, *shape), endpoint=True, dtype=dt)
    return (rng.normal(size=(n, *shape)) * 50).astype(dt)


def _serde(dtype, shape, target, normalize: str, rng) -> SampleSerde:
    spec = (SampleSpec(dtype, shape, 10) if target is None
            else SampleSpec(dtype, shape, 0, target_shape=target[0], target_dtype=target[1]))
    if normalize == "none":
        return SampleSerde(spec, None)
    if normalize == "unit":
        return SampleSerde(spec, Affine())
    c = shape[0]
    return SampleSerde(spec, Affine(tuple(float(v) for v in rng.uniform(-2, 2, c) / 255),
                                    tuple(float(v) for v in rng.normal(size=c))))


def _values(serde: SampleSerde, rng, n: int, seq0: int = 0) -> list[bytes]:
    spec = serde.spec
    xs = _rows(rng, spec.dtype, spec.shape, n)
    out = []
    for k in range(n):
        t = (k % 10) if spec.target_shape is None else rng.normal(size=spec.target_shape).astype(spec.target_dtype)
        out.append(encode_sample(xs[k], t, 0, seq0 + k, 1000.0 + k))
    return out


def _dataset(bootstrap: str, run: str, serde: SampleSerde, b: int, torch_device=None, **kw) -> KafkaStreamDataset:
    return KafkaStreamDataset(bootstrap, run, 0, num_devices=1, serde=serde, batch={"policy": "fixed", "size": b},
                              timeout=5, torch_device=torch_device, **kw)


def _queue_all(ds: KafkaStreamDataset, n: int) -> None:
    """Fetch `n` messages into the reader's queue: the stream then holds every batch (the block path)."""
    reader, deadline = ds.stream.reader, time.monotonic() + 30
    while reader.queued < n and time.monotonic() < deadline:
        reader.fill(0.2, max_messages=n - reader.queued)
    assert reader.queued >= n


def _bits(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().numpy().tobytes()


def _key(batch) -> tuple:
    """Everything a batch carries but where x lives and how long it waited."""
    return (_bits(batch.x), str(batch.x.dtype), tuple(batch.x.shape), _bits(batch.labels), str(batch.labels.dtype),
            batch.devices.tobytes(), batch.seqs.tobytes(), batch.produce_times.tobytes(), batch.n, batch.target,
            batch.dlq, batch.dropped, batch.injected, batch.next_offset, batch.buffer_samples, [m.offset() for m in batch.messages],
            batch.step)


def _batches(bootstrap: str, run: str, serde: SampleSerde, b: int, count: int, queued: int, block: bool,
             torch_device=None) -> tuple[list, list[bool]]:
    """`count` batches of a fresh dataset (its own group) with `queued` messages fetched first; block=False:
    the one-batch path (blocks of at most one batch). Returns the batches and, per batch, whether it came
    from a block."""
    ds = _dataset(bootstrap, run, serde, b, torch_device)
    ds.stream.close()
    from edgestream.consumers.kafka_stream import KafkaDeviceStream

    ds.stream = KafkaDeviceStream(bootstrap, run, 0, batch_policy=ds.stream.rule.batch_policy,
                                  buffer_policy=ds.stream.rule.buffer_policy, group=f"{run}.{uuid.uuid4().hex[:6]}")
    out, from_block = [], []
    try:
        _queue_all(ds, queued)
        with mock.patch.object(dataset_mod, "BLOCK_BATCHES", dataset_mod.BLOCK_BATCHES if block else 1):
            for _ in range(count):
                before = ds._block
                batch = ds.next_batch()
                assert batch is not None
                from_block.append(before is not None or ds._block is not None)
                out.append(batch)
    finally:
        ds.close()
    return out, from_block


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(DTYPES), shape=st.sampled_from(SHAPES), target=st.sampled_from(TARGETS),
       normalize=st.sampled_from(["none", "unit", "per-channel"]), b=st.sampled_from([1, 3, 8, 16]),
       batches=st.integers(1, 9), extra=st.integers(0, 5), device=st.sampled_from([None, "cpu"]),
       seed=st.integers(0, 2**16))
def test_block_batches_equal_the_one_batch_path_bit_for_bit(bootstrap, dtype, shape, target, normalize, b, batches,
                                                            extra, device, seed):
    rng = np.random.default_rng(seed)
    if normalize == "per-channel" and dtype != np.uint8 and len(shape) < 1:
        normalize = "unit"
    serde = _serde(dtype, shape, target, normalize, rng)
    run = f"t-block-{uuid.uuid4().hex[:8]}"
    ensure_run_topics(bootstrap, run, [0])
    n = batches * b + extra
    _send(bootstrap, device_topic(run, 0), _values(serde, rng, n))
    want, _ = _batches(bootstrap, run, serde, b, batches, n, block=False, torch_device=device)
    got, from_block = _batches(bootstrap, run, serde, b, batches, n, block=True, torch_device=device)
    assert [_key(g) for g in got] == [_key(w) for w in want]
    for g in got:
        assert g.x.dtype == (torch.float32 if normalize != "none" else torch.from_numpy(np.empty(0, dtype)).dtype)
    # two or more whole batches queued: they came from blocks (a block holds at least two)
    assert any(from_block) == (n >= 2 * b)


def test_a_block_is_committed_only_as_far_as_its_batches_were_handed_out(bootstrap, run_prefix):
    """Batches decoded ahead are not acknowledged: a crash (a dataset closed while a block still holds
    batches) re-delivers them to the next dataset of the group, the same samples, and nothing is lost."""
    ensure_run_topics(bootstrap, run_prefix, [0])
    rng = np.random.default_rng(1)
    serde = _serde(np.uint8, (3, 4, 5), None, "unit", rng)
    _send(bootstrap, device_topic(run_prefix, 0), _values(serde, rng, 40))
    ds = _dataset(bootstrap, run_prefix, serde, 4)
    _queue_all(ds, 40)
    try:
        first = ds.next_batch()
        assert ds._block is not None and len(ds._block.parts) == 10  # the whole stream in one block
        ds.ack(first)
        second = ds.next_batch()  # handed out, not acknowledged
        assert second.seqs.tolist() == [4, 5, 6, 7] and second.buffer_samples == 32
        assert ds.stream.reader.committed == first.next_offset == 4
        assert ds.state_dict()["offsets"]["dev"] == second.next_offset == 8  # consumed: what was handed out
    finally:
        ds.close()  # a crash would commit less; close makes the last ack durable
    group = trainer_group(run_prefix, 0)
    c = Consumer(consumer_config(bootstrap, group))
    try:
        assert c.committed([TopicPartition(device_topic(run_prefix, 0), 0)], timeout=10)[0].offset == 4
    finally:
        c.close()
    again = _dataset(bootstrap, run_prefix, serde, 4)
    try:
        b = again.next_batch()
        assert b.seqs.tolist() == [4, 5, 6, 7] and torch.equal(b.x, second.x)
    finally:
        again.close()


def test_another_size_gives_the_block_back_and_a_restored_state_drops_it(bootstrap, run_prefix):
    ensure_run_topics(bootstrap, run_prefix, [0])
    rng = np.random.default_rng(2)
    serde = _serde(np.uint8, (2, 3), None, "per-channel", rng)
    _send(bootstrap, device_topic(run_prefix, 0), _values(serde, rng, 60))
    ds = _dataset(bootstrap, run_prefix, serde, 5)
    _queue_all(ds, 60)
    try:
        a = ds.next_batch()
        assert ds._block is not None and a.seqs.tolist() == list(range(5))
        b = ds.next_batch(size=7)  # an explicit other size: the rows decoded ahead go back, in order
        assert ds._block is None and b.seqs.tolist() == list(range(5, 12)) and b.target == 7
        c = ds.next_batch(size=5)  # the policy's size again (explicit): a block again
        assert c.seqs.tolist() == list(range(12, 17))
        state = ds.state_dict()
        d = ds.next_batch()
        assert d.seqs.tolist() == list(range(17, 22))
        ds.load_state_dict(state)  # back to after c: the block decoded ahead is dropped with the queue
        assert ds._block is None
        e = ds.next_batch()
        assert e.seqs.tolist() == list(range(17, 22)) and torch.equal(e.x, d.x)
        assert [x.step for x in (a, b, c, e)] == [0, 1, 2, 3]
        assert ds.totals["samples"] == 5 + 7 + 5 + 5
    finally:
        ds.close()


def test_a_rejected_message_in_a_block_goes_to_the_dlq_through_the_one_batch_path(bootstrap, run_prefix):
    """A block with a hostile message is not handed out: those batches are taken one at a time, the message
    dead-lettered and replaced as always; the batches after it come in blocks again. Same batches as the
    one-batch path."""
    ensure_run_topics(bootstrap, run_prefix, [0])
    rng = np.random.default_rng(3)
    serde = _serde(np.uint8, (3, 4, 5), None, "unit", rng)
    values = _values(serde, rng, 80)
    values[13] = values[13][:-1]  # bad_length
    values[14] = None             # a tombstone
    _send(bootstrap, device_topic(run_prefix, 0), values)
    want, _ = _batches(bootstrap, run_prefix, serde, 6, 13, 80, block=False)
    got, from_block = _batches(bootstrap, run_prefix, serde, 6, 13, 80, block=True)
    assert [_key(g) for g in got] == [_key(w) for w in want]
    assert sum(g.dlq for g in got) == 2 and any(from_block)


def test_a_device_block_hands_out_views_of_one_normalised_block(bootstrap, run_prefix):
    """torch_device="meta": the device branch of the block path (one staging buffer, one move, the
    normalisation once for the block; the batches views of it) on a device with no data."""
    ensure_run_topics(bootstrap, run_prefix, [0])
    rng = np.random.default_rng(4)
    serde = _serde(np.uint8, (3, 4, 5), None, "per-channel", rng)
    _send(bootstrap, device_topic(run_prefix, 0), _values(serde, rng, 48))
    ds = _dataset(bootstrap, run_prefix, serde, 8, torch_device="meta")
    _queue_all(ds, 48)
    calls = []
    real = serde._to_device
    with mock.patch.object(serde, "_to_device", side_effect=lambda *a, **k: calls.append(len(a[0])) or real(*a, **k)):
        try:
            got = [ds.next_batch() for _ in range(6)]
        finally:
            ds.close()
    assert calls == [48]  # one move and one normalisation for the six batches
    for i, g in enumerate(got):
        assert g.x.device.type == "meta" and g.x.dtype == torch.float32 and tuple(g.x.shape) == (8, 3, 4, 5)
        assert g.seqs.tolist() == list(range(8 * i, 8 * i + 8)) and g.next_offset == 8 * i + 8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_block_batches_equal_the_host_decode(bootstrap, run_prefix):
    ensure_run_topics(bootstrap, run_prefix, [0])
    rng = np.random.default_rng(5)
    serde = _serde(np.uint8, (3, 8, 8), None, "per-channel", rng)
    _send(bootstrap, device_topic(run_prefix, 0), _values(serde, rng, 200))
    host, _ = _batches(bootstrap, run_prefix, serde, 16, 12, 200, block=False)
    dev, from_block = _batches(bootstrap, run_prefix, serde, 16, 12, 200, block=True, torch_device="cuda")
    torch.cuda.synchronize()
    assert all(from_block)
    for h, d in zip(host, dev, strict=True):
        assert d.x.device.type == "cuda" and torch.equal(d.x.cpu(), h.x)
        assert d.seqs.tolist() == h.seqs.tolist() and d.next_offset == h.next_offset
