"""Decoding straight into normalised float32 (`decode_normalized`, `Affine`): the C extension's one-pass
path and the numpy path give the same values, name the same bad messages, and check channels."""

from __future__ import annotations

import time

import numpy as np
import pytest
from confluent_kafka import Message

from edgestream.data import wire
from edgestream.data.datasets import load_dataset
from edgestream.data.wire import Affine, WireError, decode_batch, decode_normalized, encode_sample

PER_CHANNEL = Affine((0.5 / 255, 1 / 255, 2 / 255), (-1.0, 0.25, 3.0))


def _values(n: int = 9, shape=(3, 4, 5), dtype=np.uint8, seed: int = 0) -> tuple[list[bytes], np.ndarray]:
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 256, size=(n, *shape)).astype(dtype)
    return [encode_sample(xs[i], i % 10, 7, 100 + i, time.time()) for i in range(n)], xs


@pytest.fixture(params=["c", "numpy"])
def path(request, monkeypatch):
    if request.param == "numpy":
        monkeypatch.setattr(wire, "_wirefast", None)
    return request.param


def test_the_c_extension_is_built():
    # make test installs it (setup.py, optional=True): a C build that broke must not pass silently
    assert wire._wirefast is not None, "edgestream.data._wirefast is not built: is a C compiler installed?"


@pytest.mark.parametrize("affine", [Affine(), PER_CHANNEL], ids=["unit", "per-channel"])
def test_matches_decode_then_affine(path, affine):
    values, xs = _values()
    x, labels, devices, seqs, times = decode_normalized(values, affine)
    scale = np.asarray(affine.scale, np.float32).reshape(-1, 1, 1)
    bias = np.asarray(affine.bias, np.float32).reshape(-1, 1, 1)
    want = xs.astype(np.float32) * scale + bias
    assert x.dtype == np.float32 and x.shape == xs.shape and x.flags.c_contiguous
    np.testing.assert_allclose(x, want, rtol=1e-6, atol=1e-6)
    _, *fields = decode_batch(values)
    for got, ref in zip((labels, devices, seqs, times), fields, strict=True):
        np.testing.assert_array_equal(got, ref)
        assert got.dtype == ref.dtype


def test_c_and_numpy_paths_agree_bit_for_bit(monkeypatch):
    values, _ = _values(n=33, shape=(3, 8, 8))
    fast = decode_normalized(values, PER_CHANNEL)[0]
    monkeypatch.setattr(wire, "_wirefast", None)
    np.testing.assert_array_equal(fast, decode_normalized(values, PER_CHANNEL)[0])


def test_messages_are_read_through_value(path):
    values, _ = _values()
    messages = [Message(topic="t", partition=0, offset=k, value=v) for k, v in enumerate(values)]
    x, *_ = decode_normalized(messages, Affine())
    np.testing.assert_array_equal(x, decode_normalized(values, Affine())[0])


@pytest.mark.parametrize("bad_at", [0, 4, 8])
@pytest.mark.parametrize("kind", ["short", "bad_magic", "other_shape"])
def test_a_bad_message_is_named(path, bad_at, kind):
    values, _ = _values()
    good = values[bad_at]
    values[bad_at] = {"short": good[:-1], "bad_magic": b"JUNK" + good[4:],
                      "other_shape": encode_sample(np.zeros((3, 4, 6), np.uint8), 0, 0, 0, 0.0)}[kind]
    reason = {"short": "bad_length", "bad_magic": "bad_magic", "other_shape": "shape_mismatch"}[kind]
    if bad_at == 0 and kind == "other_shape":
        bad_at, reason = 1, "shape_mismatch"  # the first message sets the batch's shape
    with pytest.raises(WireError) as e:
        decode_normalized(values, Affine())
    assert (e.value.index, e.value.reason) == (bad_at, reason)


def test_channels_must_match_the_samples(path):
    values, _ = _values(shape=(1, 4, 5))
    with pytest.raises(ValueError, match="3 channels.*first axis must be 3"):
        decode_normalized(values, PER_CHANNEL)


def test_other_dtypes_take_the_numpy_path():
    values, xs = _values(dtype=np.float32)
    x, *_ = decode_normalized(values, Affine((2.0,), (1.0,)))
    np.testing.assert_allclose(x, xs * 2.0 + 1.0)


def test_empty_batch():
    x, labels, *_ = decode_normalized([], Affine())
    assert len(x) == len(labels) == 0 and x.dtype == np.float32


def test_affine_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="same length"):
        Affine((1.0, 2.0), (0.0,))


def test_dataset_affine_is_its_normalisation():
    ds = load_dataset("synthetic", None, seed=0, shape=(3, 8, 8))
    raw = ds.x_train[:16]
    values = [encode_sample(raw[i], int(ds.y_train[i]), 0, i, 0.0) for i in range(16)]
    x, *_ = decode_normalized(values, ds.affine)
    np.testing.assert_allclose(x, ds.normalize(raw).numpy(), rtol=1e-5, atol=1e-5)


def test_decode_batch_view_is_read_only_and_equal():
    values, xs = _values()
    x, *_ = decode_batch(values, copy=False)
    assert not x.flags.writeable
    np.testing.assert_array_equal(x, xs)


def test_a_null_message_value_is_a_truncated_header(path):
    values, _ = _values()
    messages = [Message(topic="t", partition=0, offset=k, value=None if k == 3 else v) for k, v in enumerate(values)]
    with pytest.raises(WireError) as e:
        decode_normalized(messages, Affine())
    assert (e.value.index, e.value.reason) == (3, "truncated_header")


def test_a_value_that_is_neither_bytes_nor_a_message_raises(path):
    values, _ = _values()
    with pytest.raises(AttributeError, match="value"):
        decode_normalized(values[:4] + [12345] + values[4:], Affine())
