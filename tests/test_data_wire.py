"""The sample wire format: round trips, every malformed kind rejected with its reason, batch decoding."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from edgestream.data.wire import (
    DTYPE_CODES,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    SampleEncoder,
    WireError,
    decode_batch,
    decode_sample,
    encode_sample,
    split_valid,
)

DTYPES = list(DTYPE_CODES.values())


def _img(seed: int = 0, shape=(3, 4, 5)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def _raw_header(magic=MAGIC, version=1, code=0, ndim=3, dims=(3, 4, 5, 0), label=1, device=2, seq=3, t=4.0):
    return HEADER.pack(magic, version, code, ndim, 0, *dims, label, device, seq, t)


@st.composite
def samples(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5))
    x = draw(hnp.arrays(dtype, shape))
    label = draw(st.integers(-(2**31), 2**31 - 1))
    device = draw(st.integers(0, 2**32 - 1))
    seq = draw(st.integers(0, 2**64 - 1))
    t = draw(st.floats(allow_nan=False, allow_infinity=False))
    return x, label, device, seq, t


@settings(max_examples=60, deadline=None)
@given(samples())
def test_round_trip_every_dtype_and_shape(sample):
    x, label, device, seq, t = sample
    buf = encode_sample(x, label, device, seq, t)
    assert len(buf) == HEADER_SIZE + x.nbytes
    s = decode_sample(buf)
    assert s.dtype == x.dtype and s.shape == x.shape and s.x.shape == x.shape
    assert s.x.tobytes() == x.tobytes()  # bitwise, so NaN payloads compare too
    assert (s.label, s.device, s.seq, s.produce_time) == (label, device, seq, t)
    assert SampleEncoder(x.dtype, x.shape)(x, label, device, seq, t) == buf


def test_uint8_stays_uint8_and_decode_is_a_view():
    x = _img()
    buf = encode_sample(x, 7, 1, 2, 3.5)
    assert len(buf) == HEADER_SIZE + x.size  # one byte per pixel on the wire
    s = decode_sample(buf)
    assert s.x.dtype == np.uint8 and not s.x.flags.owndata
    np.testing.assert_array_equal(s.x, x)


def test_big_endian_input_is_sent_little_endian():
    x = np.arange(6, dtype=">f4").reshape(2, 3)
    assert encode_sample(x, 0, 0, 0, 0.0) == encode_sample(x.astype("<f4"), 0, 0, 0, 0.0)
    np.testing.assert_array_equal(decode_sample(encode_sample(x, 0, 0, 0, 0.0)).x, x)


def test_encode_rejects_unsupported_dtype_and_shape():
    with pytest.raises(WireError) as e:
        encode_sample(np.zeros(3, dtype=np.complex64), 0, 0, 0, 0.0)
    assert e.value.reason == "unknown_dtype"
    for bad in (np.zeros((), np.uint8), np.zeros((1, 1, 1, 1, 1), np.uint8)):
        with pytest.raises(WireError) as e:
            encode_sample(bad, 0, 0, 0, 0.0)
        assert e.value.reason == "bad_shape"
    with pytest.raises(WireError) as e:
        SampleEncoder(np.uint8, (3, 4, 5))(np.zeros((3, 4, 4), np.uint8), 0, 0, 0, 0.0)
    assert e.value.reason == "shape_mismatch"


GOOD = encode_sample(_img(), 1, 2, 3, 4.0)
PAYLOAD = GOOD[HEADER_SIZE:]
MALFORMED = {
    "truncated_header": [b"", GOOD[: HEADER_SIZE - 1]],
    "bad_magic": [b"XDGS" + GOOD[4:], _raw_header(magic=b"edgs") + PAYLOAD],
    "bad_version": [_raw_header(version=0) + PAYLOAD, _raw_header(version=2) + PAYLOAD],
    "unknown_dtype": [_raw_header(code=99) + PAYLOAD],
    "bad_shape": [_raw_header(ndim=0, dims=(0, 0, 0, 0)), _raw_header(ndim=5) + PAYLOAD,
                  _raw_header(dims=(3, 0, 5, 0)), _raw_header(dims=(3, 4, 5, 7)) + PAYLOAD],
    "bad_length": [GOOD[:-1], GOOD + b"\0", GOOD[:HEADER_SIZE]],
}


@pytest.mark.parametrize("reason,values", list(MALFORMED.items()))
def test_every_malformed_kind_is_rejected_with_its_reason(reason, values):
    for v in values:
        with pytest.raises(WireError) as e:
            decode_sample(v)
        assert e.value.reason == reason and isinstance(e.value, ValueError)


def test_header_layout_is_fixed():
    assert HEADER_SIZE == 48
    buf = GOOD
    assert buf[:4] == b"EDGS" and buf[4] == 1 and buf[5] == 0 and buf[6] == 3
    assert struct.unpack_from("<4I", buf, 8) == (3, 4, 5, 0)
    assert struct.unpack_from("<iIQd", buf, 24) == (1, 2, 3, 4.0)


def _batch(n: int, shape=(3, 4, 5), dtype=np.uint8) -> tuple[list[bytes], np.ndarray]:
    rng = np.random.default_rng(n)
    xs = (rng.standard_normal((n, *shape)) * 50).astype(dtype)
    return [encode_sample(xs[i], i % 10, i % 3, 100 + i, 1000.0 + i) for i in range(n)], xs


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float16, np.int16])
def test_decode_batch_matches_per_sample_decode(dtype):
    values, xs = _batch(17, dtype=dtype)
    x, labels, devices, seqs, times = decode_batch(values)
    assert x.shape == (17, 3, 4, 5) and x.dtype == dtype and x.flags.c_contiguous and x.flags.writeable
    for i, v in enumerate(values):
        s = decode_sample(v)
        np.testing.assert_array_equal(x[i], s.x)
        assert (labels[i], devices[i], seqs[i], times[i]) == (s.label, s.device, s.seq, s.produce_time)
    np.testing.assert_array_equal(x, xs)
    assert labels.dtype == np.int64 and seqs.dtype == np.uint64 and times.dtype == np.float64
    assert split_valid(values) == (list(range(17)), [])


def test_decode_batch_into_out_buffer():
    values, xs = _batch(5)
    out = np.zeros((8, 3, 4, 5), np.uint8)
    x, *_ = decode_batch(values, out=out)
    assert np.shares_memory(x, out) and x.shape == (5, 3, 4, 5)
    np.testing.assert_array_equal(out[:5], xs)
    with pytest.raises(ValueError, match="out"):
        decode_batch(values, out=np.zeros((8, 3, 4, 5), np.float32))
    with pytest.raises(ValueError, match="out"):
        decode_batch(values, out=np.zeros((4, 3, 4, 5), np.uint8))


def test_decode_batch_empty():
    x, labels, devices, seqs, times = decode_batch([])
    assert len(x) == len(labels) == len(devices) == len(seqs) == len(times) == 0


@pytest.mark.parametrize("reason,values", list(MALFORMED.items()))
def test_decode_batch_names_the_bad_message(reason, values):
    good, _ = _batch(6)
    for bad_at in (0, 4):
        batch = list(good)
        batch[bad_at] = values[0]
        with pytest.raises(WireError) as e:
            decode_batch(batch)
        assert e.value.index == bad_at and e.value.reason == reason
        valid, bad = split_valid(batch)
        assert bad == [(bad_at, reason)] and valid == [i for i in range(6) if i != bad_at]
        x, labels, *_ = decode_batch([batch[i] for i in valid])  # the retry without it succeeds
        assert len(x) == 5


def test_mixed_shapes_or_dtypes_are_a_shape_mismatch():
    values, _ = _batch(4)
    other = encode_sample(np.zeros((3, 4, 6), np.uint8), 0, 0, 0, 0.0)
    other_dtype = encode_sample(np.zeros((3, 4, 5), np.int8), 0, 0, 0, 0.0)  # same length, other dtype
    for odd in (other, other_dtype):
        batch = values[:2] + [odd] + values[2:]
        with pytest.raises(WireError) as e:
            decode_batch(batch)
        assert (e.value.index, e.value.reason) == (2, "shape_mismatch")
        assert split_valid(batch) == ([0, 1, 3, 4], [(2, "shape_mismatch")])
