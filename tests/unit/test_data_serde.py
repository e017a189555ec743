"""The sample serde: one object for encode, validated decode, header reads and the message size,
across dtypes, shapes, class counts and device rules (no broker: values are plain bytes)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.data import Affine, DeviceRule, SampleHeader, SampleSerde, SampleSpec, WireError, encode_sample
from edgestream.data.wire import HEADER_SIZE, decode_sample

SHAPES = [(1, 6, 6), (3, 5, 7), (2, 4), (7,), (1, 8, 8)]
DTYPES = [np.uint8, np.float32]


def _rows(rng: np.random.Generator, dtype, shape, n: int) -> np.ndarray:
    if np.dtype(dtype) == np.uint8:
        return rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    return rng.normal(size=(n, *shape)).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(DTYPES), shape=st.sampled_from(SHAPES), classes=st.sampled_from([2, 15, 20, 37]),
       n=st.integers(1, 40), device=st.integers(0, 7), seed=st.integers(0, 2**16))
def test_encode_then_decode_gives_the_samples_and_their_headers(dtype, shape, classes, n, device, seed):
    rng = np.random.default_rng(seed)
    affine = Affine((0.5,) * shape[0], (-1.0,) * shape[0]) if len(shape) > 1 and shape[0] > 1 else Affine()
    serde = SampleSerde(SampleSpec(dtype, shape, classes), affine)
    xs, labels = _rows(rng, dtype, shape, n), rng.integers(0, classes, n)
    times = 1.7e9 + rng.random(n)
    values = [serde.encode(xs[i], int(labels[i]), device, 100 + i, float(times[i])) for i in range(n)]
    assert all(len(v) == serde.message_bytes == HEADER_SIZE + xs[0].nbytes for v in values)
    assert values[0] == encode_sample(xs[0], int(labels[0]), device, 100, float(times[0]))  # the one wire format
    batch, bad = serde.decode(values, DeviceRule(device, 8))
    assert bad == [] and len(batch) == n and batch.accepted == values
    np.testing.assert_array_equal(batch.labels, labels)
    assert batch.devices.tolist() == [device] * n and batch.seqs.tolist() == list(range(100, 100 + n))
    np.testing.assert_array_equal(batch.produce_times, times)
    assert batch.x.dtype == np.float32 and batch.x.shape == (n, *shape)
    np.testing.assert_allclose(batch.x, affine(xs), rtol=1e-6, atol=1e-6)
    h = SampleSerde.header(values[-1])
    assert isinstance(h, SampleHeader) and h == (100 + n - 1, float(times[-1]), device, int(labels[-1]))


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(DTYPES), shape=st.sampled_from(SHAPES), classes=st.sampled_from([2, 15, 20, 37]),
       bad_at=st.lists(st.integers(0, 19), max_size=6, unique=True), kind=st.sampled_from(
           ["label", "device", "shape", "dtype", "truncated", "null"]), seed=st.integers(0, 2**16))
def test_decode_rejects_what_the_spec_rejects_and_keeps_the_rest_in_order(dtype, shape, classes, bad_at, kind, seed):
    rng = np.random.default_rng(seed)
    serde = SampleSerde(SampleSpec(dtype, shape, classes))  # no normalisation: the raw samples
    rule = DeviceRule(3, 5)
    xs = _rows(rng, dtype, shape, 20)
    values: list = [serde.encode(xs[i], i % classes, 3, i, 0.0) for i in range(20)]
    other_dtype = np.float32 if np.dtype(dtype) == np.uint8 else np.uint8
    def mutant(i: int) -> bytes | None:
        x = xs[i]
        if kind == "label":
            return encode_sample(x, classes, 3, i, 0.0)
        if kind == "device":
            return encode_sample(x, 0, 4, i, 0.0)
        if kind == "shape":
            return encode_sample(x.reshape(-1)[:1], 0, 3, i, 0.0)
        if kind == "dtype":
            return encode_sample(x.astype(other_dtype), 0, 3, i, 0.0)
        return values[i][:HEADER_SIZE - 1] if kind == "truncated" else None

    for i in bad_at:
        values[i] = mutant(i)
    want = {"label": "bad_label", "device": "device_mismatch", "shape": "shape_mismatch",
            "dtype": "dtype_mismatch", "truncated": "truncated_header", "null": "truncated_header"}[kind]
    # a Kafka-message-like input: value() may be None (a tombstone)
    msgs = [type("M", (), {"value": (lambda self, v=v: v)})() for v in values]
    batch, bad = serde.decode(msgs, rule)
    assert bad == [(i, want) for i in sorted(bad_at)]
    assert all(serde.problem(values[i], rule) == want for i in bad_at)
    keep = [i for i in range(20) if i not in bad_at]
    assert batch.seqs.tolist() == keep and [m.value() for m in batch.accepted] == [values[i] for i in keep]
    np.testing.assert_array_equal(batch.x, xs[keep])


def test_a_serde_of_a_dataset_and_its_header_errors():
    from edgestream.data import load_dataset

    ds = load_dataset("synthetic", None, seed=0, shape=(3, 5, 7), num_classes=15, n_train=32, n_test=8)
    serde = SampleSerde.of(ds)
    assert serde.spec == SampleSpec(ds.x_train.dtype, (3, 5, 7), 15) and serde.normalize == ds.affine
    assert serde.message_bytes == HEADER_SIZE + 3 * 5 * 7 * ds.x_train.itemsize
    value = serde(ds.x_train[4], int(ds.y_train[4]), 1, 9, 2.5)  # a serde is the producer's encode callable
    assert decode_sample(value).seq == 9 and SampleSerde.header(value).device == 1
    with pytest.raises(WireError) as err:
        serde.encode(ds.x_train[4][:2], 0, 1, 0, 0.0)
    assert err.value.reason == "shape_mismatch"
    for bad, reason in ((None, "truncated_header"), (b"XXXX" + value[4:], "bad_magic"), (value[:-1], "bad_length")):
        with pytest.raises(WireError) as err:
            SampleSerde.header(bad)
        assert err.value.reason == reason
    batch, bad = serde.decode([], DeviceRule(0, 2))
    assert batch is None and bad == []


@pytest.mark.parametrize("tshape", [(), (4,)])
def test_a_float_target_serde_and_its_header(tshape):
    spec = SampleSpec(np.float16, (2, 3), 0, target_shape=tshape)
    serde = SampleSerde(spec, Affine((2.0, 0.5), (0.0, 1.0)))
    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    t = np.linspace(-1, 1, 4, dtype=np.float32)[: (tshape[0] if tshape else 1)].reshape(tshape)
    value = serde.encode(x, t, 1, 9, 2.5)
    assert len(value) == serde.message_bytes == HEADER_SIZE + 12 + t.nbytes
    assert SampleSerde.header(value) == (9, 2.5, 1, -1)  # label -1: not a class index
    assert decode_sample(value).target.tolist() == t.tolist()
    batch, bad = serde.decode([value, value], DeviceRule(1, 2))
    assert bad == [] and batch.labels.dtype == np.float32 and batch.labels.shape == (2, *tshape)
    np.testing.assert_array_equal(batch.x, serde.normalize(np.stack([x, x])))
