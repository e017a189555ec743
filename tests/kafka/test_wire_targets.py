"""Wire version 2 carries each sample's target: a class index, or a float scalar / vector of its own dtype.

Round trips through the run's serde over what users feed (inputs uint8/float16/float32 of rank 1-3,
2-37 classes, scalar and vector float targets; the C pass and numpy, the host and the device path),
every refusal reason (a version-1 message included), the spec of a regression dataset, and a
regression stream through a real Kafka topic whose batches carry exactly the targets produced.
"""

from __future__ import annotations

import struct
import time
from contextlib import ExitStack
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
import torch
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.consumers import KafkaStreamDataset
from edgestream.data import Affine, DeviceRule, SampleSerde, SampleSpec, WireError, encode_sample, wire
from edgestream.data.validate import SPEC_REASONS
from edgestream.data.wire import HEADER, HEADER_SIZE, MAGIC, REASONS, decode_sample
from edgestream.kafka import consumer_config, device_topic, dlq_topic, producer_config
from edgestream.kafka.stream_ends import stream_ends
from edgestream.producers.stream_producer import StreamProducer
from edgestream.streams import build_rate_model

DTYPES = [np.uint8, np.float16, np.float32]
SHAPES = [(7,), (1,), (3, 9), (1, 16), (3, 5, 7), (1, 6, 6), (2, 1, 1)]
FLOATS = [np.float32, np.float16, np.float64]


def _inputs(rng: np.random.Generator, dtype, shape, n: int) -> np.ndarray:
    if np.dtype(dtype) == np.uint8:
        return rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    return (rng.normal(size=(n, *shape)) * 3 + 1).astype(dtype)


def _affine(shape: tuple[int, ...], dtype, rng: np.random.Generator) -> tuple[Affine, np.ndarray, np.ndarray]:
    """One channel per first axis: (x - mean) / std in float32 (uint8: of x / 255), as an Affine."""
    c = shape[0]
    mean, std = rng.normal(size=c).astype(np.float32), rng.uniform(0.5, 2.0, c).astype(np.float32)
    div = 255.0 if np.dtype(dtype) == np.uint8 else 1.0
    return Affine(tuple(float(1 / (div * s)) for s in std), tuple(float(-m / s) for m, s in zip(mean, std, strict=True))), mean, std


def _spec(dtype, shape, target) -> SampleSpec:
    """target: ("class", classes) or (float dtype, target shape)."""
    if target[0] == "class":
        return SampleSpec(dtype, shape, target[1])
    return SampleSpec(dtype, shape, 0, target_shape=target[1], target_dtype=target[0])


def _targets(rng: np.random.Generator, target, n: int) -> np.ndarray:
    if target[0] == "class":
        return rng.integers(0, target[1], n)
    return (rng.normal(size=(n, *target[1])) * 10).astype(target[0])


TARGETS = st.one_of(st.tuples(st.just("class"), st.integers(2, 37)),
                    st.tuples(st.sampled_from(FLOATS), st.sampled_from([(), (1,), (2,), (5,)])))


@settings(max_examples=120, deadline=None)
@given(dtype=st.sampled_from(DTYPES), shape=st.sampled_from(SHAPES), target=TARGETS, n=st.integers(1, 30),
       path=st.sampled_from(["c", "numpy"]), messages=st.booleans(), seed=st.integers(0, 2**16))
def test_round_trip_of_inputs_and_targets_host_and_device(dtype, shape, target, n, path, messages, seed):
    rng = np.random.default_rng(seed)
    affine, mean, std = _affine(shape, dtype, rng)
    serde = SampleSerde(_spec(dtype, shape, target), affine)
    xs, ys = _inputs(rng, dtype, shape, n), _targets(rng, target, n)
    values = [serde.encode(xs[i], int(ys[i]) if target[0] == "class" else ys[i], 2, i, 1.7e9 + i) for i in range(n)]
    assert all(len(v) == serde.message_bytes for v in values)
    items = [type("M", (), {"value": (lambda self, v=v: v)})() for v in values] if messages else values
    with ExitStack() as stack:
        if path == "numpy":
            stack.enter_context(mock.patch.object(wire, "_wirefast", None))
        host, bad = serde.decode(items, DeviceRule(2, 3))
        dev, bad_dev = serde.decode(items, DeviceRule(2, 3), device="cpu")
    assert bad == bad_dev == []
    want_x = affine(xs)
    div = np.float32(255) if np.dtype(dtype) == np.uint8 else np.float32(1)
    per_channel = (-1, *[1] * (len(shape) - 1))
    by_hand = (xs.astype(np.float32) / div - mean.reshape(per_channel)) / std.reshape(per_channel)
    np.testing.assert_allclose(want_x, by_hand, rtol=1e-4, atol=1e-4)  # the Affine is (x - mean) / std
    for got in (host, dev):
        x = got.x.numpy() if isinstance(got.x, torch.Tensor) else got.x
        assert x.dtype == np.float32 and x.shape == (n, *shape)
        np.testing.assert_array_equal(x, want_x)  # host and device path: the same float32 values
        if target[0] == "class":
            assert got.labels.dtype == np.int64 and got.labels.tolist() == ys.tolist()
        else:
            assert got.labels.dtype == np.float32 and got.labels.shape == (n, *target[1])
            np.testing.assert_array_equal(got.labels, ys.astype(np.float32))
        assert got.seqs.tolist() == list(range(n)) and got.devices.tolist() == [2] * n
    assert isinstance(dev.x, torch.Tensor)
    head = SampleSerde.header(values[-1])
    assert head.seq == n - 1 and head.label == (int(ys[-1]) if target[0] == "class" else -1)


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from([np.uint8, np.int16, np.float16, np.float32, np.float64]),
       shape=st.sampled_from(SHAPES), target=TARGETS, n=st.integers(1, 12), path=st.sampled_from(["c", "numpy"]))
def test_raw_batches_become_tensors_whatever_the_row_length(dtype, shape, target, n, path):
    """normalize=None (the raw samples): on either path the batch's x and targets are arrays torch takes as they
    are (rows of e.g. 2x2 float64 + a 3-float32 target are 92 bytes: the numpy path's view of them had strides
    torch refuses)."""
    rng = np.random.default_rng(n)
    serde = SampleSerde(_spec(dtype, shape, target), None)
    xs = (rng.normal(size=(n, *shape)) * 100).astype(dtype) if np.dtype(dtype).kind == "f" else \
        rng.integers(0, 100, size=(n, *shape)).astype(dtype)
    ys = _targets(rng, target, n)
    values = [serde.encode(xs[i], int(ys[i]) if target[0] == "class" else ys[i], 0, i, 1.7e9) for i in range(n)]
    with ExitStack() as stack:
        if path == "numpy":
            stack.enter_context(mock.patch.object(wire, "_wirefast", None))
        got, bad = serde.decode(values, DeviceRule(0, 1))
    assert bad == []
    x, y = torch.from_numpy(np.asarray(got.x)), torch.from_numpy(got.labels)
    assert x.dtype == torch.from_numpy(xs).dtype and x.shape == (n, *shape)
    np.testing.assert_array_equal(x.numpy(), xs)
    np.testing.assert_array_equal(y.numpy(), ys if target[0] == "class" else ys.astype(np.float32))


# ---------------------------------------------------------------- every refusal
def _with(value: bytes, **fields) -> bytes:
    names = ("magic", "version", "dtype", "ndim", "target", "d0", "d1", "d2", "d3", "label", "device", "seq", "t")
    parts = dict(zip(names, HEADER.unpack_from(value, 0), strict=True))
    parts.update(fields)
    return HEADER.pack(*(parts[n] for n in names)) + value[HEADER_SIZE:]


def _v1(x: np.ndarray, label: int, device: int) -> bytes:
    """A version-1 message: pad byte 0 at offset 7, the label a class index, no target bytes."""
    return struct.pack("<4sBBBB4IiIQd", MAGIC, 1, wire.dtype_code(x.dtype), x.ndim, 0, *wire._dims(x.shape), label,
                       device, 0, 0.0) + x.tobytes()


X = np.arange(8, dtype=np.float32).reshape(2, 4)
VEC = np.array([0.5, -1.5], np.float32)
REG = SampleSpec(np.float32, (2, 4), 0, target_shape=(2,))
CLS = SampleSpec(np.float32, (2, 4), 37)
GOOD_REG = encode_sample(X, VEC, 0, 0, 0.0)
GOOD_CLS = encode_sample(X, 36, 0, 0, 0.0)
#: (spec, hostile value, reason)
HOSTILE = [
    (REG, b"", "truncated_header"), (REG, GOOD_REG[:HEADER_SIZE - 1], "truncated_header"),
    (REG, b"JUNK" + GOOD_REG[4:], "bad_magic"),
    (REG, _v1(X, 1, 0), "bad_version"), (CLS, _v1(X, 1, 0), "bad_version"),
    (REG, _with(GOOD_REG, version=3), "bad_version"),
    (REG, _with(GOOD_REG, dtype=200), "unknown_dtype"),
    (REG, _with(GOOD_REG, ndim=0), "bad_shape"), (REG, _with(GOOD_REG, label=-3), "bad_shape"),
    (REG, _with(GOOD_REG, target=4), "unknown_target"), (CLS, _with(GOOD_CLS, target=9), "unknown_target"),
    (REG, GOOD_REG[:-1], "bad_length"), (REG, GOOD_REG + b"\0", "bad_length"),
    (REG, _with(GOOD_REG, label=3), "bad_length"),  # says 3 target values, carries 2
    (REG, encode_sample(X.astype(np.float16), VEC, 0, 0, 0.0), "dtype_mismatch"),
    (REG, encode_sample(X.reshape(8), VEC, 0, 0, 0.0), "shape_mismatch"),
    (REG, encode_sample(X, 1, 0, 0, 0.0), "target_mismatch"),  # a class index in a regression run
    (REG, encode_sample(X, VEC.astype(np.float16), 0, 0, 0.0), "target_mismatch"),
    (REG, encode_sample(X, np.zeros(3, np.float32), 0, 0, 0.0), "target_mismatch"),
    (REG, encode_sample(X, np.float32(0.5), 0, 0, 0.0), "target_mismatch"),
    (SampleSpec(np.float32, (2, 4), 0, target_shape=()), encode_sample(X, VEC[:1], 0, 0, 0.0), "target_mismatch"),
    (CLS, GOOD_REG, "target_mismatch"),  # a float target in a classification run
    (REG, encode_sample(X, np.array([0.5, np.nan], np.float32), 0, 0, 0.0), "bad_target"),
    (REG, encode_sample(X, np.array([np.inf, 0.0], np.float32), 0, 0, 0.0), "bad_target"),
    (CLS, encode_sample(X, 37, 0, 0, 0.0), "bad_label"), (CLS, encode_sample(X, -1, 0, 0, 0.0), "bad_label"),
    (REG, encode_sample(X, VEC, 1, 0, 0.0), "device_mismatch"),
]


@pytest.mark.parametrize("path", ["c", "numpy"])
@pytest.mark.parametrize("device", [None, "cpu"])
def test_every_refusal_reason_names_the_message(path, device):
    seen = set()
    for k, (spec, value, reason) in enumerate(HOSTILE):
        serde = SampleSerde(spec, Affine())
        good = GOOD_CLS if spec.target_shape is None else encode_sample(X, np.zeros(spec.target_shape, np.float32),
                                                                        0, 0, 0.0)
        batch = [good, value, good, good]
        with ExitStack() as stack:
            if path == "numpy":
                stack.enter_context(mock.patch.object(wire, "_wirefast", None))
            out, bad = serde.decode(batch, DeviceRule(0, 1), device=device)
        assert bad == [(1, reason)], (k, reason, bad)
        assert serde.problem(value, DeviceRule(0, 1)) == reason
        assert len(out) == 3 and out.accepted == [good] * 3
        seen.add(reason)
    # decode_error: anything a message makes the decoder raise (here a normalisation that fails)
    serde = SampleSerde(REG, lambda x: 1 / 0)
    out, bad = serde.decode([GOOD_REG], DeviceRule(0, 1))
    assert out is None and bad == [(0, "decode_error")]
    seen.add("decode_error")
    assert seen == set(REASONS) | set(SPEC_REASONS)


def test_a_version_1_message_is_refused_with_one_line():
    with pytest.raises(WireError) as e:
        decode_sample(_v1(X, 1, 0))
    assert e.value.reason == "bad_version" and "\n" not in str(e.value) and "got 1" in str(e.value)
    with pytest.raises(WireError) as e:
        SampleSerde.header(_v1(X, 1, 0))  # restart scans and the DLQ read headers the same way
    assert e.value.reason == "bad_version"


# ---------------------------------------------------------------- the spec
def test_the_spec_of_a_regression_dataset():
    ds = SimpleNamespace(x_train=np.zeros((4, 6, 10), np.float16), y_train=np.zeros((4, 3), np.float32),
                         num_classes=0, target_shape=(3,))
    spec = SampleSpec.of(ds)
    assert spec == SampleSpec(np.float16, (6, 10), 0, target_shape=(3,), target_dtype=np.float32)
    assert spec.is_regression and spec.length == HEADER_SIZE + 6 * 10 * 2 + 3 * 4
    assert spec.empty_targets().shape == (0, 3) and spec.empty_targets().dtype == np.float32
    scalar = SampleSpec.of(SimpleNamespace(x_train=np.zeros((4, 5), np.float32), y_train=np.zeros(4, np.float32),
                                           num_classes=0, target_shape=()))
    assert scalar.target_shape == () and scalar.length == HEADER_SIZE + 20 + 4
    cls = SampleSpec.of(SimpleNamespace(x_train=np.zeros((4, 1, 8, 8), np.uint8), y_train=np.zeros(4, np.int64),
                                        num_classes=10))  # no target_shape attribute: class indices
    assert cls == SampleSpec(np.uint8, (1, 8, 8), 10) and not cls.is_regression
    assert cls.empty_targets().dtype == np.int64
    assert SampleSerde(spec).message_bytes == spec.length
    assert "float32 targets (3,)" in repr(SampleSerde(spec))


@pytest.mark.parametrize("kwargs,field", [
    ({"num_classes": 0}, "num_classes"),
    ({"num_classes": 3, "target_shape": ()}, "num_classes"),
    ({"num_classes": 0, "target_shape": (2, 2)}, "target_shape"),
    ({"num_classes": 0, "target_shape": (0,)}, "target_shape"),
    ({"num_classes": 0, "target_shape": (), "target_dtype": np.int32}, "target_dtype"),
    ({"num_classes": 4, "target_dtype": np.float32}, "target_dtype"),
])
def test_a_bad_spec_is_one_line_naming_the_field(kwargs, field):
    with pytest.raises(ValueError) as e:
        SampleSpec(np.float32, (4,), **kwargs)
    assert str(e.value).startswith(field) and "\n" not in str(e.value)


def test_the_encoder_checks_the_target_against_the_spec():
    serde = SampleSerde(REG)
    for bad in (1, 0.5, np.zeros(3, np.float32)):
        with pytest.raises(WireError) as e:
            serde.encode(X, bad, 0, 0, 0.0)
        assert e.value.reason == "target_mismatch"
    assert serde.encode(X, [0.5, -1.5], 0, 0, 0.0) == GOOD_REG  # lists and float64 rows convert to the spec's
    assert serde.encode(X, VEC.astype(np.float64), 0, 0, 0.0) == GOOD_REG
    with pytest.raises(WireError) as e:
        SampleSerde(CLS).encode(X, 0.5, 0, 0, 0.0)
    assert e.value.reason == "target_mismatch"


# ---------------------------------------------------------------- through Kafka
def _read(bootstrap: str, topic: str, want: int, group: str, limit_s: float = 30.0) -> list:
    c = Consumer(consumer_config(bootstrap, group))
    c.assign([TopicPartition(topic, 0, 0)])
    msgs, deadline = [], time.monotonic() + limit_s
    while len(msgs) < want and time.monotonic() < deadline:
        msgs += [m for m in c.consume(500, timeout=0.3) if m.error() is None]
    c.close()
    return msgs


@pytest.mark.parametrize("dtype,shape,tshape", [(np.float32, (3, 12), (3,)), (np.float16, (5,), ())],
                         ids=["vector", "scalar"])
def test_a_regression_stream_through_kafka_carries_its_targets(bootstrap, run_prefix, dtype, shape, tshape):
    rng = np.random.default_rng(3)
    n_data, devices = 200, 2
    x = _inputs(rng, dtype, shape, n_data)
    y = (rng.normal(size=(n_data, *tshape)) * 5).astype(np.float32)
    y[6] = np.nan  # (device 0's) a non-finite target: dead-lettered by the consumer, never trained on
    affine, _, _ = _affine(shape, dtype, rng)
    serde = SampleSerde(SampleSpec(dtype, shape, 0, target_shape=tshape), affine)
    shards = [np.arange(d, n_data, devices) for d in range(devices)]
    rates = build_rate_model({"distribution": "constant", "rate": 150}, None, devices, 1)
    producer = StreamProducer(bootstrap, run_prefix, list(range(devices)), x, y, shards, rates, serde, seed=1)
    summary = producer.run_for(1.0)
    assert summary.complete and summary.delivered > 100
    # restarts read the last header of each topic: a float-target message is a sample like any other
    ends = stream_ends(bootstrap, run_prefix, range(devices))
    assert ends == {d: producer.stats[d].delivered for d in range(devices)}
    # a version-1 message after the stream: refused with its reason, the rest is delivered
    p = Producer(producer_config(bootstrap))
    p.produce(device_topic(run_prefix, 0), value=_v1(np.zeros(shape, np.uint8), 1, 0), key=b"v1")
    assert p.flush(30) == 0

    # device 1 injects 3 samples of its first batch into device 0 (their original bytes)
    injection = {"alpha": 0.5, "beta": 0.5}
    ds1 = KafkaStreamDataset(bootstrap, run_prefix, 1, num_devices=devices, serde=serde, timeout=3,
                             batch={"policy": "fixed", "size": 8}, injection=injection)
    try:
        assert ds1.inject(ds1.next_batch(), [0, 1, 2], [0])[0] == 3
    finally:
        ds1.close()

    ds = KafkaStreamDataset(bootstrap, run_prefix, 0, num_devices=devices, serde=serde, timeout=3,
                            batch={"policy": "available", "max": 32}, injection=injection)
    deadline = time.monotonic() + 30
    while ds.channel.reader.queued < 3 and time.monotonic() < deadline:
        ds.channel.reader.fill(0.2)
    rows, dlq, injected = 0, 0, 0
    nan_seq = [k for k in range(ends[0]) if producer.orders[0].index(k) == 6]
    try:
        while rows + dlq < ends[0] + 1 + 3:
            b = ds.next_batch()
            if b is None:
                break
            assert b.labels.dtype == torch.float32 and tuple(b.labels.shape) == (b.n, *tshape)
            idx = [producer.orders[int(d)].index(int(k)) for d, k in zip(b.devices, b.seqs, strict=True)]
            np.testing.assert_array_equal(b.labels.numpy(), y[idx])  # the targets produced, row by row
            np.testing.assert_array_equal(b.x.numpy(), affine(x[idx]))
            rows, dlq, injected = rows + b.n, dlq + b.dlq, injected + b.injected
            ds.ack(b)
    finally:
        ds.close()
    assert injected == 3 and rows == ends[0] - len(nan_seq) + 3 and dlq == 1 + len(nan_seq)
    assert nan_seq  # the shard's sample 6 was streamed
    heads = [dict(m.headers()) for m in _read(bootstrap, dlq_topic(run_prefix), dlq, f"{run_prefix}.dlqcheck")]
    assert sorted(h["reason"].decode() for h in heads) == sorted(["bad_version"] + ["bad_target"] * len(nan_seq))
    # a rejected float-target sample's header is readable: its seq and device go with it
    assert sorted(int(h["seq"]) for h in heads if h["reason"] == b"bad_target") == nan_seq
    assert "seq" not in next(h for h in heads if h["reason"] == b"bad_version")
