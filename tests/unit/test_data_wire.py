"""The sample wire format (version 2): round trips of inputs and targets (class indices, float scalars and
vectors), every malformed kind rejected with its reason (a version-1 message too), batch decoding."""

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
    TARGET_DTYPES,
    VERSION,
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


def _raw_header(magic=MAGIC, version=VERSION, code=0, ndim=3, dims=(3, 4, 5, 0), label=1, device=2, seq=3, t=4.0,
                target=0):
    return HEADER.pack(magic, version, code, ndim, target, *dims, label, device, seq, t)


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
    assert (s.label, s.target, s.device, s.seq, s.produce_time) == (label, label, device, seq, t)
    assert s.target_dtype is None and s.target_shape is None
    assert SampleEncoder(x.dtype, x.shape)(x, label, device, seq, t) == buf


@st.composite
def float_targets(draw):
    dtype = draw(st.sampled_from(list(TARGET_DTYPES.values())))
    shape = draw(st.sampled_from([(), (1,), (2,), (7,)]))
    return draw(hnp.arrays(dtype, shape))


@settings(max_examples=60, deadline=None)
@given(sample=samples(), target=float_targets())
def test_round_trip_of_float_targets(sample, target):
    x, _, device, seq, t = sample
    buf = encode_sample(x, target, device, seq, t)
    assert len(buf) == HEADER_SIZE + x.nbytes + target.nbytes  # the target's bytes follow the payload
    s = decode_sample(buf)
    assert s.x.tobytes() == x.tobytes() and (s.device, s.seq, s.produce_time) == (device, seq, t)
    assert s.label == -1 and s.target_dtype == target.dtype and s.target_shape == target.shape
    assert s.target.shape == target.shape and s.target.tobytes() == target.tobytes()
    assert buf[7] == {2: 2, 4: 1, 8: 5}[target.dtype.itemsize]  # the target code: the float dtype's wire code
    assert struct.unpack_from("<i", buf, 24)[0] == (target.shape[0] if target.shape else 0)
    assert SampleEncoder(x.dtype, x.shape, target.dtype, target.shape)(x, target, device, seq, t) == buf


def test_python_floats_and_lists_travel_as_float32_and_ints_as_class_indices():
    x = _img()
    assert decode_sample(encode_sample(x, 2.5, 0, 0, 0.0)).target_dtype == np.float32
    s = decode_sample(encode_sample(x, [0.5, -1.0, 3.0], 0, 0, 0.0))
    assert s.target_shape == (3,) and s.target.tolist() == [0.5, -1.0, 3.0] and s.target_dtype == np.float32
    for cls in (3, np.int64(3), np.array(3, np.int32)):
        s = decode_sample(encode_sample(x, cls, 0, 0, 0.0))
        assert (s.label, s.target, s.target_dtype) == (3, 3, None)
    with pytest.raises(WireError) as e:
        encode_sample(x, np.array([1, 2], np.int32), 0, 0, 0.0)  # an int vector is no target
    assert e.value.reason == "unknown_target"
    with pytest.raises(WireError) as e:
        encode_sample(x, np.zeros((2, 2), np.float32), 0, 0, 0.0)
    assert e.value.reason == "bad_shape"


def test_an_encoder_refuses_the_other_kind_of_target():
    x = _img()
    with pytest.raises(WireError) as e:
        SampleEncoder(np.uint8, x.shape)(x, 0.5, 0, 0, 0.0)
    assert e.value.reason == "target_mismatch"
    enc = SampleEncoder(np.uint8, x.shape, np.float32, (2,))
    for bad in (0.5, [1.0, 2.0, 3.0], np.zeros((1, 2), np.float32)):
        with pytest.raises(WireError) as e:
            enc(x, bad, 0, 0, 0.0)
        assert e.value.reason == "target_mismatch"
    assert enc.nbytes == len(enc(x, [1.0, 2.0], 0, 0, 0.0)) == HEADER_SIZE + x.size + 8
    with pytest.raises(WireError) as e:
        SampleEncoder(np.uint8, x.shape, np.int32, ())
    assert e.value.reason == "unknown_target"


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
#: a version-1 message: the layout before targets (pad byte 0 at offset 7, the label a class index)
V1 = struct.pack("<4sBBBB4IiIQd", MAGIC, 1, 0, 3, 0, 3, 4, 5, 0, 1, 2, 3, 4.0) + PAYLOAD
FLOAT = encode_sample(_img(), np.array([0.5, 1.5], np.float32), 2, 3, 4.0)
MALFORMED = {
    "truncated_header": [b"", GOOD[: HEADER_SIZE - 1]],
    "bad_magic": [b"XDGS" + GOOD[4:], _raw_header(magic=b"edgs") + PAYLOAD],
    "bad_version": [V1, _raw_header(version=0) + PAYLOAD, _raw_header(version=3) + PAYLOAD],
    "unknown_dtype": [_raw_header(code=99) + PAYLOAD],
    "bad_shape": [_raw_header(ndim=0, dims=(0, 0, 0, 0)), _raw_header(ndim=5) + PAYLOAD,
                  _raw_header(dims=(3, 0, 5, 0)), _raw_header(dims=(3, 4, 5, 7)) + PAYLOAD,
                  _raw_header(target=1, label=-2) + PAYLOAD + bytes(8)],
    "unknown_target": [_raw_header(target=t) + PAYLOAD for t in (3, 4, 6, 7, 9, 255)],
    "bad_length": [GOOD[:-1], GOOD + b"\0", GOOD[:HEADER_SIZE], FLOAT[:-1], FLOAT + b"\0",
                   _raw_header(target=1, label=1) + PAYLOAD, _raw_header(target=5, label=2) + PAYLOAD + bytes(8)],
}


def test_a_version_1_message_is_refused_with_one_line():
    with pytest.raises(WireError) as e:
        decode_sample(V1)
    assert e.value.reason == "bad_version" and "\n" not in str(e.value)
    assert str(e.value).startswith("bad_version: expected 2, got 1")


@pytest.mark.parametrize("reason,values", list(MALFORMED.items()))
def test_every_malformed_kind_is_rejected_with_its_reason(reason, values):
    for v in values:
        with pytest.raises(WireError) as e:
            decode_sample(v)
        assert e.value.reason == reason and isinstance(e.value, ValueError)


def test_header_layout_is_fixed():
    assert HEADER_SIZE == 48 and VERSION == 2
    buf = GOOD
    assert buf[:4] == b"EDGS" and buf[4] == 2 and buf[5] == 0 and buf[6] == 3 and buf[7] == 0
    assert struct.unpack_from("<4I", buf, 8) == (3, 4, 5, 0)
    assert struct.unpack_from("<iIQd", buf, 24) == (1, 2, 3, 4.0)
    assert len(buf) == 48 + 60
    # a float vector target: code 1 (float32) at byte 7, K = 2 in the label field, its 8 bytes at the end
    assert FLOAT[7] == 1 and struct.unpack_from("<i", FLOAT, 24)[0] == 2 and len(FLOAT) == 48 + 60 + 8
    assert FLOAT[:48 + 60][48:] == PAYLOAD and struct.unpack("<2f", FLOAT[-8:]) == (0.5, 1.5)
    scalar = encode_sample(_img(), np.float64(-2.25), 2, 3, 4.0)
    assert scalar[7] == 5 and struct.unpack_from("<i", scalar, 24)[0] == 0 and len(scalar) == 48 + 60 + 8
    assert struct.unpack("<d", scalar[-8:]) == (-2.25,)


def _batch(n: int, shape=(3, 4, 5), dtype=np.uint8) -> tuple[list[bytes], np.ndarray]:
    rng = np.random.default_rng(n)
    xs = (rng.standard_normal((n, *shape)) * 50).astype(dtype)
    return [encode_sample(xs[i], i % 10, i % 3, 100 + i, 1000.0 + i) for i in range(n)], xs


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float16, np.int16, np.int64])
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


@pytest.mark.parametrize("tdtype", list(TARGET_DTYPES.values()))
@pytest.mark.parametrize("tshape", [(), (1,), (3,)])
def test_decode_batch_of_float_targets_gives_float32(tdtype, tshape):
    rng = np.random.default_rng(5)
    xs = rng.normal(size=(9, 7)).astype(np.float16)
    ts = rng.normal(size=(9, *tshape)).astype(tdtype)
    values = [encode_sample(xs[i], ts[i], 0, i, 0.0) for i in range(9)]
    x, targets, devices, seqs, _ = decode_batch(values)
    np.testing.assert_array_equal(x, xs)
    assert targets.dtype == np.float32 and targets.shape == (9, *tshape) and targets.flags.c_contiguous
    np.testing.assert_array_equal(targets, ts.astype(np.float32))
    assert seqs.tolist() == list(range(9)) and split_valid(values) == (list(range(9)), [])


def test_a_batch_needs_one_target_layout():
    x = _img()
    scalar = [encode_sample(x, np.float32(k), 0, k, 0.0) for k in range(3)]
    one = encode_sample(x, np.array([1.0], np.float32), 0, 3, 0.0)  # the same length, another shape
    half = encode_sample(x, np.float16(1.0), 0, 3, 0.0)
    cls = encode_sample(x, 1, 0, 3, 0.0)
    for odd in (one, half, cls):
        batch = scalar[:1] + [odd] + scalar[1:]
        with pytest.raises(WireError) as e:
            decode_batch(batch)
        assert (e.value.index, e.value.reason) == (1, "shape_mismatch")
        assert split_valid(batch) == ([0, 2, 3], [(1, "shape_mismatch")])
