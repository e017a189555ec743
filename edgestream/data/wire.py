"""The wire format of one streamed sample (one Kafka message value): a fixed binary header + raw bytes.

Version 2 (little-endian, `HEADER`, 48 bytes, so the input payload starts 8-byte aligned):

    offset  size  field
    0       4     magic          b"EDGS"
    4       1     version        u8, = VERSION (2)
    5       1     dtype code     u8, the input's dtype, see DTYPE_CODES
    6       1     ndim           u8, 1..4
    7       1     target code    u8, 0: a class index; 1 / 2 / 5: a float32 / float16 / float64 target
    8       16    dims           4 x u32, the first `ndim` >= 1, the rest 0
    24      4     label          i32: the class index (target code 0), or the float target's shape:
                                 0 = a scalar (), K >= 1 = a vector (K,)
    28      4     device         u32
    32      8     seq            u64, per-device sequence number
    40      8     produce_time   f64, unix seconds at produce
    48      P     payload        the input: P = prod(dims) * itemsize bytes, C order, little-endian
    48 + P  T     target         float targets only: T = max(1, K) * itemsize bytes, little-endian

Version 1 had a pad byte (0) at offset 7, the label was always a class index and nothing followed the
payload; a version-1 message is refused ('bad_version'). Inputs keep their dtype on the wire (uint8
images stay uint8; normalisation happens on the consumer). No pickle anywhere. Malformed values raise
`WireError` with a short machine-readable `reason` that the consumer copies into the dead-letter
message's headers; `decode_batch` also sets `index`, the position of the bad value. The wire carries
any float target value (NaN too); the consumer's validation refuses non-finite ones (validate.py).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

# the format's constants and tables and the writing of a sample: encode.py; reading them back: below
from edgestream.data.encode import (  # noqa: F401 - the wire's names, here where the format is written down
    DTYPE_CODES,
    HEADER,
    HEADER_DTYPE,
    HEADER_SIZE,
    MAGIC,
    MAX_NDIM,
    REASONS,
    TARGET_CLASS,
    TARGET_DTYPES,
    VERSION,
    Layout,
    Sample,
    SampleEncoder,
    WireError,
    _dims,
    dtype_code,
    encode_sample,
    target_code,
    target_field,
)


def _check_header(magic: bytes, version: int, code: int, ndim: int, tcode: int, dims: tuple[int, ...], field: int,
                  length: int) -> Layout:
    """Validate the unpacked header fields against the value's total `length`; return its layout."""
    if magic != MAGIC:
        raise WireError("bad_magic", f"expected {MAGIC!r}, got {magic!r}")
    if version != VERSION:
        old = " (version 1 carried no target dtype or shape; re-produce the stream)" if version == 1 else ""
        raise WireError("bad_version", f"expected {VERSION}, got {version}{old}")
    dt = DTYPE_CODES.get(code)
    if dt is None:
        raise WireError("unknown_dtype", f"code {code}; known: {sorted(DTYPE_CODES)}")
    if not 1 <= ndim <= MAX_NDIM or any(d < 1 for d in dims[:ndim]) or any(dims[ndim:]):
        raise WireError("bad_shape", f"ndim {ndim}, dims {dims}")
    shape = dims[:ndim]
    want = HEADER_SIZE + math.prod(shape) * dt.itemsize
    if tcode == TARGET_CLASS:
        tdt = tshape = None
    else:
        tdt = TARGET_DTYPES.get(tcode)
        if tdt is None:
            raise WireError("unknown_target", f"target code {tcode}; known: 0 (class index), "
                            + ", ".join(f"{c} ({d})" for c, d in TARGET_DTYPES.items()))
        if field < 0:
            raise WireError("bad_shape", f"float target of {field} elements")
        tshape = (field,) if field else ()
        want += max(1, field) * tdt.itemsize
    if length != want:
        raise WireError("bad_length", f"{length} bytes, header says {want}")
    return dt, shape, tdt, tshape


#: the first 24 bytes of the header: magic, version, dtype, ndim, target code, dims -- what fixes the
#: layout (with the label field when the target is a float one)
_PREFIX = struct.Struct("<4sBBBB4I")
_FIELD = struct.Struct("<i")


@lru_cache(maxsize=64)
def _layout_of(prefix: bytes, field: int, length: int) -> Layout:
    magic, version, code, ndim, tcode, *dims = _PREFIX.unpack(prefix)
    return _check_header(magic, version, code, ndim, tcode, tuple(dims), field, length)


def _layout(header, length: int) -> Layout:
    """The layout of a `length`-byte message whose header (>= 28 bytes) is `header`; WireError if
    invalid. A stream's messages share their prefix, so this is one cache lookup a batch."""
    field = _FIELD.unpack_from(header, 24)[0] if header[7] != TARGET_CLASS else 0
    return _layout_of(bytes(header[:_PREFIX.size]), field, length)


def decode_sample(buf: bytes | bytearray | memoryview) -> Sample:
    """Parse and validate one message value; `x` (and a float target) are views of `buf` (read-only
    for bytes)."""
    if len(buf) < HEADER_SIZE:
        raise WireError("truncated_header", f"{len(buf)} bytes < header {HEADER_SIZE}")
    magic, version, code, ndim, tcode, d0, d1, d2, d3, label, device, seq, t = HEADER.unpack_from(buf, 0)
    dt, shape, tdt, tshape = _check_header(magic, version, code, ndim, tcode, (d0, d1, d2, d3), label, len(buf))
    size = math.prod(shape)
    x = np.frombuffer(buf, dtype=dt, count=size, offset=HEADER_SIZE).reshape(shape)
    if tdt is None:
        return Sample(x, label, device, seq, t, dt, shape, label)
    target = np.frombuffer(buf, dtype=tdt, count=max(1, label), offset=HEADER_SIZE + size * dt.itemsize)
    return Sample(x, -1, device, seq, t, dt, shape, target.reshape(tshape), tdt, tshape)


def _scan(values: list[bytes]) -> tuple[list[int], list[tuple[int, str]]]:
    """Per-message validation (slow path): valid indices and (index, reason) of the others.

    A message that is valid alone but whose layout (input dtype/shape, target dtype/shape) differs from
    the first valid message gets reason 'shape_mismatch' (a batch needs one layout).
    """
    valid: list[int] = []
    bad: list[tuple[int, str]] = []
    ref: tuple | None = None
    for i, v in enumerate(values):
        try:
            s = decode_sample(v)
        except WireError as e:
            bad.append((i, e.reason))
            continue
        got = (s.dtype, s.shape, s.target_dtype, s.target_shape)
        if ref is None:
            ref = got
        elif got != ref:
            bad.append((i, "shape_mismatch"))
            continue
        valid.append(i)
    return valid, bad


def _rows(values: list[bytes]) -> np.ndarray | None:
    """`values` joined into one buffer and viewed as uint8 rows (B, length) -- one copy, no per-message
    Python objects -- or None when they are not all the same length of at least a header."""
    length = len(values[0])
    if length < HEADER_SIZE or len(set(map(len, values))) != 1:
        return None
    return np.frombuffer(b"".join(values), dtype=np.uint8).reshape(len(values), length)


def _uniform_ok(rows: np.ndarray, length: int) -> tuple[np.ndarray, Layout] | None:
    """(headers as HEADER_DTYPE, layout) when every header of `rows` (B x >= 48 uint8) is valid for a
    `length`-byte message and has the first one's layout (vectorised); None otherwise."""
    hb = np.ascontiguousarray(rows[:, :HEADER_SIZE])
    try:
        layout = _layout(hb[0], length)
    except WireError:
        return None
    words = hb.view("<u8")[:, :3]  # bytes 0-23: magic, version, dtype, ndim, target code, dims
    if (words != words[0]).any():
        return None
    h = hb.view(HEADER_DTYPE)[:, 0]
    if layout[2] is not None and (h["label"] != h["label"][0]).any():  # a float target's shape
        return None
    return h, layout


def split_valid(values: list[bytes]) -> tuple[list[int], list[tuple[int, str]]]:
    """(indices of values that decode_batch accepts together, [(index, reason)] of the rest).

    Fast path: equal lengths and identical, valid header prefixes are checked vectorised; otherwise
    every message is checked on its own (see `_scan` for the 'shape_mismatch' rule).
    """
    if not values:
        return [], []
    rows = _rows(values)
    if rows is not None and _uniform_ok(rows, rows.shape[1]) is not None:
        return list(range(len(values))), []
    return _scan(values)


def float_targets(raw: np.ndarray) -> np.ndarray:
    """A batch's float targets (B, *target_shape) in their wire dtype -> float32, C-contiguous (the
    dtype of consumed regression targets), a fresh array: a view of the messages' rows can have strides no
    multiple of 4 (a row of a uint8 input and a float32 target), which torch refuses, and ascontiguousarray
    keeps them for a batch of one row."""
    return np.array(raw, dtype=np.float32)


def decode_batch(values: list[bytes], out: np.ndarray | None = None, *, copy: bool = True
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Decode many messages of one layout (input dtype/shape, target) into one array.

    Returns (x [B, *shape], targets, devices int64[B], seqs uint64[B], produce_times float64[B]); targets
    are the class indices as int64 [B], or the float targets as float32 [B, *target_shape].
    x is C-contiguous and writable; with `copy=False` it is instead a read-only view into the one
    buffer the messages were joined into (rows `len(message)` bytes apart), which saves a pass over
    the payload when x is only read once (the consumer's normalisation). `out`, if given, must be
    C-contiguous with the messages' dtype and shape (B' >= B, *shape); x is then `out[:B]`. Raises
    WireError with `index` set at the first bad message (malformed, or a layout differing from
    message 0) so the caller can dead-letter it and retry without it. With no values, x is `out[:0]`
    or an empty uint8 array of shape (0,).
    """
    n = len(values)
    if n == 0:
        x0 = out[:0] if out is not None else np.zeros((0,), dtype=np.uint8)
        z = np.zeros(0, dtype=np.int64)
        return x0, z, z.copy(), np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.float64)
    rows = _rows(values)
    ok = _uniform_ok(rows, rows.shape[1]) if rows is not None else None
    if ok is None:
        _raise_first_bad(values)
    h, (dt, shape, tdt, tshape) = ok
    end = HEADER_SIZE + math.prod(shape) * dt.itemsize
    x = rows[:, HEADER_SIZE:end].view(dt).reshape(n, *shape)  # rows stay where the join put them
    if out is not None:
        if (out.dtype.newbyteorder("<") != dt or out.shape[1:] != shape or out.shape[0] < n
                or not out.flags.c_contiguous):
            raise ValueError(f"out: need a C-contiguous {dt} array of shape (>= {n}, *{shape}), "
                             f"got {out.dtype} {out.shape}")
        out[:n] = x
        x = out[:n]
    elif copy:
        x = x.copy()
    labels, *fields = _fields(h)
    if tdt is not None:
        labels = float_targets(rows[:, end:].view(tdt).reshape(n, *tshape))
    return (x, labels, *fields)


def _fields(h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return (h["label"].astype(np.int64), h["device"].astype(np.int64), h["seq"].astype(np.uint64),
            h["produce_time"].astype(np.float64))


def _raise_first_bad(values: list[bytes]) -> None:
    _, bad = _scan(values)
    index, reason = bad[0]
    raise WireError(reason, f"batch of {len(values)}", index=index)


@dataclass(frozen=True)
class Affine:
    """Normalisation of raw sample values to float32: x * scale[c] + bias[c] per channel c (a sample's
    first axis), or one scale and bias for every element. `Affine()` is x / 255.

    Calling it on a decoded batch (B, *shape) gives a float32 array; `decode_normalized` applies it
    while decoding, in one pass over the messages.
    """

    scale: tuple[float, ...] = (1 / 255,)
    bias: tuple[float, ...] = (0.0,)

    def __post_init__(self) -> None:
        if not self.scale or len(self.scale) != len(self.bias):
            raise ValueError(f"Affine: scale and bias need the same length >= 1, got {len(self.scale)} "
                             f"and {len(self.bias)}")
        object.__setattr__(self, "_arrays", (np.asarray(self.scale, np.float32), np.asarray(self.bias, np.float32)))

    @property
    def channels(self) -> int:
        return len(self.scale)

    def _check(self, shape: tuple[int, ...]) -> None:
        if self.channels > 1 and (not shape or shape[0] != self.channels):
            raise ValueError(f"normalisation has {self.channels} channels; samples of shape {shape} do not "
                             f"(their first axis must be {self.channels})")

    def __call__(self, x: np.ndarray, zero_bias: bool = False) -> np.ndarray:
        """float32 x * scale + bias for a batch x of shape (B, *shape); x is not modified. A bias of zeros
        is skipped unless `zero_bias` (then -0.0 turns +0.0, as in the C pass, which always adds it)."""
        self._check(x.shape[1:])
        scale, bias = self._arrays
        out = x.astype(np.float32)  # a cast, then in-place affine: faster than a casting multiply
        view = out.reshape(len(out), self.channels, -1)
        view *= scale[:, None]
        if zero_bias or bias.any():
            view += bias[:, None]
        return out


def decode_normalized(values: list, affine: Affine
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`decode_batch` then `affine`, as one float32 array: (x [B, *shape] float32, targets, devices, seqs,
    produce_times). For uint8 samples with class indices this is one pass over each message with no joined copy (the C
    extension edgestream.data._wirefast, when built; numpy otherwise -- same values). `values` are
    bytes, or objects whose `value()` is the bytes (Kafka messages: no list of values is made; a null
    value counts as b"", a truncated header).
    Raises WireError with `index` like decode_batch; ValueError when the samples' channels do not match."""
    n = len(values)
    if n == 0:
        x, *rest = decode_batch([])
        return x.astype(np.float32), *rest
    if _wirefast is not None and isinstance(values, list):
        first = values[0] if isinstance(values[0], bytes) else values[0].value() or b""
        shape = _u8_shape(first)
        if shape is not None:
            affine._check(shape)
            out = np.empty((n, *shape), np.float32)
            headers = np.empty(n, HEADER_DTYPE)
            scale, bias = affine._arrays
            # the C pass checks every header against the first (valid) one while it converts
            bad = _wirefast.u8_affine(values, first[:_PREFIX.size], len(first),
                                      math.prod(shape) // affine.channels, scale, bias, out, headers)
            if bad < 0:
                return (out, *_fields(headers))
    # numpy: other dtypes, float targets, no extension, or a bad value (decode_batch raises WireError naming it)
    x, *rest = decode_batch([v if isinstance(v, bytes | bytearray | memoryview) else v.value() or b""
                             for v in values], copy=False)
    # uint8 with the extension: the C passes' operations (+ bias always), so the values are theirs
    return affine(x, zero_bias=_wirefast is not None and x.dtype == np.uint8), *rest


def _u8_shape(value: bytes) -> tuple[int, ...] | None:
    """The sample shape of a valid uint8 message with a class index; None for anything else."""
    if len(value) < HEADER_SIZE:
        return None
    try:
        dt, shape, tdt, _ = _layout(value, len(value))
    except WireError:
        return None
    return shape if dt == np.uint8 and tdt is None else None


try:  # the optional C extension (setup.py); without it decode_normalized uses numpy
    from edgestream.data import _wirefast
except ImportError:  # pragma: no cover - depends on the install
    _wirefast = None
