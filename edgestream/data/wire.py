"""The wire format of one streamed sample (one Kafka message value): a fixed binary header + raw bytes.

Layout (little-endian, `HEADER`, 48 bytes, so the payload starts 8-byte aligned):

    offset  size  field
    0       4     magic          b"EDGS"
    4       1     version        u8, = VERSION (1)
    5       1     dtype code     u8, see DTYPE_CODES
    6       1     ndim           u8, 1..4
    7       1     pad            u8, 0
    8       16    dims           4 x u32, the first `ndim` >= 1, the rest 0
    24      4     label          i32
    28      4     device         u32
    32      8     seq            u64, per-device sequence number
    40      8     produce_time   f64, unix seconds at produce
    48      ...   payload        exactly prod(dims) * itemsize bytes, C order, little-endian

uint8 images travel as uint8 (normalisation happens on the consumer). No pickle anywhere. Malformed
values raise `WireError` with a short machine-readable `reason` that the consumer copies into the
dead-letter message's headers; `decode_batch` also sets `index`, the position of the bad value.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

MAGIC = b"EDGS"
VERSION = 1
MAX_NDIM = 4
HEADER = struct.Struct("<4sBBBB4IiIQd")
HEADER_SIZE = HEADER.size  # 48

#: dtype code on the wire -> numpy dtype (always little-endian on the wire).
DTYPE_CODES: dict[int, np.dtype] = {
    0: np.dtype("u1"),
    1: np.dtype("<f4"),
    2: np.dtype("<f2"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<f8"),
    6: np.dtype("i1"),
}
_CODE_OF: dict[str, int] = {dt.str.replace("|", "<"): code for code, dt in DTYPE_CODES.items()}

#: numpy view of the 48-byte header, for validating many headers at once.
HEADER_DTYPE = np.dtype([
    ("magic", "S4"), ("version", "u1"), ("dtype", "u1"), ("ndim", "u1"), ("pad", "u1"),
    ("dims", "<u4", (4,)), ("label", "<i4"), ("device", "<u4"), ("seq", "<u8"), ("produce_time", "<f8"),
])
assert HEADER_DTYPE.itemsize == HEADER_SIZE

REASONS = ("truncated_header", "bad_magic", "bad_version", "unknown_dtype", "bad_shape", "bad_pad",
           "bad_length", "shape_mismatch")


class WireError(ValueError):
    """A value that is not a valid sample. `reason` is one of REASONS; `index` is set by batch decoders."""

    def __init__(self, reason: str, detail: str = "", index: int | None = None) -> None:
        self.reason, self.detail, self.index = reason, detail, index
        where = f" (message {index})" if index is not None else ""
        super().__init__(f"{reason}{where}: {detail}" if detail else f"{reason}{where}")


@dataclass(frozen=True, slots=True)
class Sample:
    """One decoded sample. `x` is a read-only view into the message buffer where possible (no copy)."""

    x: np.ndarray
    label: int
    device: int
    seq: int
    produce_time: float
    dtype: np.dtype
    shape: tuple[int, ...]


def dtype_code(dtype: np.dtype | type | str) -> int:
    """The wire code of `dtype` (any byte order); WireError('unknown_dtype') when it has none."""
    dt = np.dtype(dtype)
    code = _CODE_OF.get(dt.newbyteorder("<").str.replace("|", "<"))
    if code is None:
        raise WireError("unknown_dtype", f"dtype {dt} has no wire code; allowed: "
                        + ", ".join(str(d) for d in DTYPE_CODES.values()))
    return code


def _dims(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    if not 1 <= len(shape) <= MAX_NDIM or any(d < 1 or d > 0xFFFFFFFF for d in shape):
        raise WireError("bad_shape", f"shape {shape}: need 1..{MAX_NDIM} dims, each >= 1")
    return tuple(shape) + (0,) * (MAX_NDIM - len(shape))  # type: ignore[return-value]


def _le_bytes(x: np.ndarray) -> bytes:
    if x.dtype.byteorder == ">":
        x = x.astype(x.dtype.newbyteorder("<"))
    return x.tobytes()


def encode_sample(x: np.ndarray, label: int, device: int, seq: int, produce_time: float) -> bytes:
    """One message value for sample `x` (shape 1..4 dims, dtype in DTYPE_CODES) and its metadata."""
    x = np.asarray(x)
    code = dtype_code(x.dtype)
    return HEADER.pack(MAGIC, VERSION, code, x.ndim, 0, *_dims(x.shape), label, device, seq,
                       produce_time) + _le_bytes(x)


class SampleEncoder:
    """`encode_sample` for a fixed dtype and shape: the constant header prefix is packed once."""

    _TAIL = struct.Struct("<iIQd")

    def __init__(self, dtype: np.dtype | type | str, shape: tuple[int, ...]) -> None:
        self.dtype, self.shape = np.dtype(dtype), tuple(int(d) for d in shape)
        code = dtype_code(self.dtype)
        self._prefix = struct.pack("<4sBBBB4I", MAGIC, VERSION, code, len(self.shape), 0, *_dims(self.shape))
        self.nbytes = HEADER_SIZE + math.prod(self.shape) * self.dtype.itemsize

    def __call__(self, x: np.ndarray, label: int, device: int, seq: int, produce_time: float) -> bytes:
        if x.shape != self.shape or x.dtype != self.dtype:
            raise WireError("shape_mismatch",
                            f"encoder is for {self.dtype}{self.shape}, got {x.dtype}{x.shape}")
        return self._prefix + self._TAIL.pack(label, device, seq, produce_time) + _le_bytes(x)


def _check_header(magic: bytes, version: int, code: int, ndim: int, pad: int, dims: tuple[int, ...],
                  length: int) -> tuple[np.dtype, tuple[int, ...]]:
    """Validate the unpacked header fields against the value's total `length`; return (dtype, shape)."""
    if magic != MAGIC:
        raise WireError("bad_magic", f"expected {MAGIC!r}, got {magic!r}")
    if version != VERSION:
        raise WireError("bad_version", f"expected {VERSION}, got {version}")
    dt = DTYPE_CODES.get(code)
    if dt is None:
        raise WireError("unknown_dtype", f"code {code}; known: {sorted(DTYPE_CODES)}")
    if not 1 <= ndim <= MAX_NDIM or any(d < 1 for d in dims[:ndim]) or any(dims[ndim:]):
        raise WireError("bad_shape", f"ndim {ndim}, dims {dims}")
    if pad != 0:
        raise WireError("bad_pad", f"pad byte is {pad}, must be 0")
    shape = dims[:ndim]
    want = HEADER_SIZE + math.prod(shape) * dt.itemsize
    if length != want:
        raise WireError("bad_length", f"{length} bytes, header says {want}")
    return dt, shape


#: the first 24 bytes of the header: magic, version, dtype, ndim, pad, dims -- what fixes the layout
_PREFIX = struct.Struct("<4sBBBB4I")


@lru_cache(maxsize=64)
def _layout_of(prefix: bytes, length: int) -> tuple[np.dtype, tuple[int, ...]]:
    magic, version, code, ndim, pad, *dims = _PREFIX.unpack(prefix)
    return _check_header(magic, version, code, ndim, pad, tuple(dims), length)


def _layout(header, length: int) -> tuple[np.dtype, tuple[int, ...]]:
    """(dtype, shape) of a `length`-byte message whose header (>= 24 bytes) is `header`; WireError if
    invalid. A stream's messages share their prefix, so this is one cache lookup a batch."""
    return _layout_of(bytes(header[:_PREFIX.size]), length)


def decode_sample(buf: bytes | bytearray | memoryview) -> Sample:
    """Parse and validate one message value; `x` is a view of `buf` (read-only for bytes)."""
    if len(buf) < HEADER_SIZE:
        raise WireError("truncated_header", f"{len(buf)} bytes < header {HEADER_SIZE}")
    magic, version, code, ndim, pad, d0, d1, d2, d3, label, device, seq, t = HEADER.unpack_from(buf, 0)
    dt, shape = _check_header(magic, version, code, ndim, pad, (d0, d1, d2, d3), len(buf))
    x = np.frombuffer(buf, dtype=dt, offset=HEADER_SIZE).reshape(shape)
    return Sample(x, label, device, seq, t, dt, shape)


def _scan(values: list[bytes]) -> tuple[list[int], list[tuple[int, str]]]:
    """Per-message validation (slow path): valid indices and (index, reason) of the others.

    A message that is valid alone but whose dtype/shape differs from the first valid message gets
    reason 'shape_mismatch' (a batch needs one shape).
    """
    valid: list[int] = []
    bad: list[tuple[int, str]] = []
    ref: tuple[np.dtype, tuple[int, ...]] | None = None
    for i, v in enumerate(values):
        try:
            s = decode_sample(v)
        except WireError as e:
            bad.append((i, e.reason))
            continue
        if ref is None:
            ref = (s.dtype, s.shape)
        elif (s.dtype, s.shape) != ref:
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


def _uniform_ok(rows: np.ndarray, length: int) -> tuple[np.ndarray, np.dtype, tuple[int, ...]] | None:
    """(headers as HEADER_DTYPE, dtype, shape) when every header of `rows` (B x >= 48 uint8) is valid
    for a `length`-byte message and has the first one's dtype and shape (vectorised); None otherwise."""
    hb = np.ascontiguousarray(rows[:, :HEADER_SIZE])
    try:
        dt, shape = _layout(hb[0], length)
    except WireError:
        return None
    words = hb.view("<u8")[:, :3]  # bytes 0-23: magic, version, dtype, ndim, pad, dims
    if (words != words[0]).any():
        return None
    return hb.view(HEADER_DTYPE)[:, 0], dt, shape


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


def decode_batch(values: list[bytes], out: np.ndarray | None = None, *, copy: bool = True
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Decode many messages of one dtype/shape into one array.

    Returns (x [B, *shape], labels int64[B], devices int64[B], seqs uint64[B], produce_times float64[B]).
    x is C-contiguous and writable; with `copy=False` it is instead a read-only view into the one
    buffer the messages were joined into (rows `len(message)` bytes apart), which saves a pass over
    the payload when x is only read once (the consumer's normalisation). `out`, if given, must be
    C-contiguous with the messages' dtype and shape (B' >= B, *shape); x is then `out[:B]`. Raises
    WireError with `index` set at the first bad message (malformed, or dtype/shape differing from
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
    h, dt, shape = ok
    x = rows[:, HEADER_SIZE:].view(dt).reshape(n, *shape)  # rows stay where the join put them
    if out is not None:
        if (out.dtype.newbyteorder("<") != dt or out.shape[1:] != shape or out.shape[0] < n
                or not out.flags.c_contiguous):
            raise ValueError(f"out: need a C-contiguous {dt} array of shape (>= {n}, *{shape}), "
                             f"got {out.dtype} {out.shape}")
        out[:n] = x
        x = out[:n]
    elif copy:
        x = x.copy()
    return (x, *_fields(h))


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

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """float32 x * scale + bias for a batch x of shape (B, *shape); x is not modified."""
        self._check(x.shape[1:])
        scale, bias = self._arrays
        out = x.astype(np.float32)  # a cast, then in-place affine: faster than a casting multiply
        view = out.reshape(len(out), self.channels, -1)
        view *= scale[:, None]
        if bias.any():
            view += bias[:, None]
        return out


def decode_normalized(values: list, affine: Affine
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`decode_batch` then `affine`, as one float32 array: (x [B, *shape] float32, labels, devices, seqs,
    produce_times). For uint8 samples this is one pass over each message with no joined copy (the C
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
    # numpy: other dtypes, no extension, or a bad value (decode_batch raises WireError naming it)
    x, *rest = decode_batch([v if isinstance(v, bytes | bytearray | memoryview) else v.value() or b""
                             for v in values], copy=False)
    return affine(x), *rest


def _u8_shape(value: bytes) -> tuple[int, ...] | None:
    """The sample shape of a valid uint8 message; None for anything else."""
    if len(value) < HEADER_SIZE:
        return None
    try:
        dt, shape = _layout(value, len(value))
    except WireError:
        return None
    return shape if dt == np.uint8 else None


try:  # the optional C extension (setup.py); without it decode_normalized uses numpy
    from edgestream.data import _wirefast
except ImportError:  # pragma: no cover - depends on the install
    _wirefast = None
