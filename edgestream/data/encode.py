"""The sample wire's constants and tables (edgestream.data.wire's module doc is the format), its `WireError` and
`Sample`, and writing one sample: `encode_sample`, `SampleEncoder` (its header prefix packed once). Reading
samples back: edgestream.data.wire."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

MAGIC = b"EDGS"
VERSION = 2
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
    7: np.dtype("<i8"),
}
_CODE_OF: dict[str, int] = {dt.str.replace("|", "<"): code for code, dt in DTYPE_CODES.items()}

#: the target code of a class index (header byte 7); a float target's code is its dtype's DTYPE_CODES code
TARGET_CLASS = 0
#: target code -> the dtype of a float target
TARGET_DTYPES: dict[int, np.dtype] = {code: DTYPE_CODES[code] for code in (1, 2, 5)}

#: numpy view of the 48-byte header, for validating many headers at once.
HEADER_DTYPE = np.dtype([
    ("magic", "S4"), ("version", "u1"), ("dtype", "u1"), ("ndim", "u1"), ("target", "u1"),
    ("dims", "<u4", (4,)), ("label", "<i4"), ("device", "<u4"), ("seq", "<u8"), ("produce_time", "<f8"),
])
assert HEADER_DTYPE.itemsize == HEADER_SIZE

REASONS = ("truncated_header", "bad_magic", "bad_version", "unknown_dtype", "bad_shape", "unknown_target",
           "bad_length", "shape_mismatch", "target_mismatch")

#: (input dtype, input shape, target dtype or None for a class index, target shape or None): what a
#: message's header says its bytes are
Layout = tuple[np.dtype, tuple[int, ...], "np.dtype | None", "tuple[int, ...] | None"]


class WireError(ValueError):
    """A value that is not a valid sample. `reason` is one of REASONS; `index` is set by batch decoders."""

    def __init__(self, reason: str, detail: str = "", index: int | None = None) -> None:
        self.reason, self.detail, self.index = reason, detail, index
        where = f" (message {index})" if index is not None else ""
        super().__init__(f"{reason}{where}: {detail}" if detail else f"{reason}{where}")


@dataclass(frozen=True, slots=True)
class Sample:
    """One decoded sample. `x` is a read-only view into the message buffer where possible (no copy).

    `target` is the class index (an int; `target_dtype` and `target_shape` None), or the float target
    as an array of `target_dtype` and `target_shape` (() or (K,)), a view like `x`. `label` is the class
    index, or -1 for a float target."""

    x: np.ndarray
    label: int
    device: int
    seq: int
    produce_time: float
    dtype: np.dtype
    shape: tuple[int, ...]
    target: int | np.ndarray = -1
    target_dtype: np.dtype | None = None
    target_shape: tuple[int, ...] | None = None


def dtype_code(dtype: np.dtype | type | str) -> int:
    """The wire code of `dtype` (any byte order); WireError('unknown_dtype') when it has none."""
    dt = np.dtype(dtype)
    code = _CODE_OF.get(dt.newbyteorder("<").str.replace("|", "<"))
    if code is None:
        raise WireError("unknown_dtype", f"dtype {dt} has no wire code; allowed: "
                        + ", ".join(str(d) for d in DTYPE_CODES.values()))
    return code


def target_code(dtype: np.dtype | type | str | None) -> int:
    """The header's target code: TARGET_CLASS for None (a class index), else the float dtype's code;
    WireError('unknown_target') for any other dtype."""
    if dtype is None:
        return TARGET_CLASS
    dt = np.dtype(dtype)
    code = _CODE_OF.get(dt.newbyteorder("<").str.replace("|", "<"))
    if code not in TARGET_DTYPES:
        raise WireError("unknown_target", f"target dtype {dt} is not allowed; must be a class index (int) or "
                        + ", ".join(str(d) for d in TARGET_DTYPES.values()))
    return code


def target_field(shape: tuple[int, ...]) -> int:
    """The header's label field of a float target of `shape`: 0 for a scalar (), K for a vector (K,)."""
    if shape == ():
        return 0
    if len(shape) == 1 and 1 <= shape[0] <= 0x7FFFFFFF:
        return int(shape[0])
    raise WireError("bad_shape", f"target shape {shape}: a float target is a scalar () or a vector (K,)")


def _dims(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    if not 1 <= len(shape) <= MAX_NDIM or any(d < 1 or d > 0xFFFFFFFF for d in shape):
        raise WireError("bad_shape", f"shape {shape}: need 1..{MAX_NDIM} dims, each >= 1")
    return tuple(shape) + (0,) * (MAX_NDIM - len(shape))  # type: ignore[return-value]


def _le_bytes(x: np.ndarray) -> bytes:
    if x.dtype.byteorder == ">":
        x = x.astype(x.dtype.newbyteorder("<"))
    return x.tobytes()


def _float_target(target) -> np.ndarray:
    """A float target as an array: numpy floats keep their dtype; Python floats and lists become float32."""
    if isinstance(target, np.ndarray | np.generic):
        t = np.asarray(target)
        if t.dtype.kind != "f":
            raise WireError("unknown_target", f"target of dtype {t.dtype}: a target is a class index (an integer) "
                            "or a float scalar/vector (float16, float32, float64)")
        return t
    return np.asarray(target, dtype=np.float32)


def _is_class(target) -> bool:
    return isinstance(target, int | np.integer) or (isinstance(target, np.ndarray) and target.ndim == 0
                                                    and target.dtype.kind in "iu")


def encode_sample(x: np.ndarray, target, device: int, seq: int, produce_time: float) -> bytes:
    """One message value for sample `x` (shape 1..4 dims, dtype in DTYPE_CODES) and its metadata.

    `target`: an integer is a class index; a float, a numpy float scalar or array of shape () or (K,)
    is a float target (numpy values keep their dtype, float16/32/64; Python floats and lists travel
    as float32)."""
    x = np.asarray(x)
    code = dtype_code(x.dtype)
    if _is_class(target):
        return HEADER.pack(MAGIC, VERSION, code, x.ndim, TARGET_CLASS, *_dims(x.shape), int(target), device, seq,
                           produce_time) + _le_bytes(x)
    t = _float_target(target)
    return (HEADER.pack(MAGIC, VERSION, code, x.ndim, target_code(t.dtype), *_dims(x.shape), target_field(t.shape),
                        device, seq, produce_time) + _le_bytes(x) + _le_bytes(t))


class SampleEncoder:
    """`encode_sample` for a fixed input dtype and shape and a fixed target (a class index: the default;
    or a float target of `target_dtype` and `target_shape`): the constant header prefix is packed once."""

    _TAIL = struct.Struct("<iIQd")

    def __init__(self, dtype: np.dtype | type | str, shape: tuple[int, ...],
                 target_dtype: np.dtype | type | str | None = None, target_shape: tuple[int, ...] | None = None
                 ) -> None:
        self.dtype, self.shape = np.dtype(dtype), tuple(int(d) for d in shape)
        if (target_dtype is None) != (target_shape is None):
            raise ValueError("SampleEncoder: target_dtype and target_shape go together (both None: a class index)")
        self.target_dtype = None if target_dtype is None else np.dtype(target_dtype).newbyteorder("<")
        self.target_shape = None if target_shape is None else tuple(int(d) for d in target_shape)
        tcode = target_code(self.target_dtype)
        self._field = 0 if self.target_shape is None else target_field(self.target_shape)
        self._prefix = struct.pack("<4sBBBB4I", MAGIC, VERSION, dtype_code(self.dtype), len(self.shape), tcode,
                                   *_dims(self.shape))
        tbytes = 0 if self.target_shape is None else math.prod(self.target_shape) * self.target_dtype.itemsize
        self.nbytes = HEADER_SIZE + math.prod(self.shape) * self.dtype.itemsize + tbytes

    def __call__(self, x: np.ndarray, target, device: int, seq: int, produce_time: float) -> bytes:
        if x.shape != self.shape or x.dtype != self.dtype:
            raise WireError("shape_mismatch",
                            f"encoder is for {self.dtype}{self.shape}, got {x.dtype}{x.shape}")
        if self.target_dtype is None:
            try:
                return self._prefix + self._TAIL.pack(target, device, seq, produce_time) + _le_bytes(x)
            except struct.error:
                if not _is_class(target):
                    raise WireError("target_mismatch", f"this encoder's targets are class indices, got "
                                    f"{type(target).__name__} {np.asarray(target).dtype}") from None
                raise WireError("bad_shape", f"class index {target} does not fit the i32 label field") from None
        t = np.asarray(target, dtype=self.target_dtype)
        if t.shape != self.target_shape:
            raise WireError("target_mismatch", f"encoder's targets are {self.target_dtype}{self.target_shape}, "
                            f"got shape {t.shape}")
        return self._prefix + self._TAIL.pack(self._field, device, seq, produce_time) + _le_bytes(x) + t.tobytes()
