"""Checks of a record's input and target values (Python objects from JSON / Avro, or header text) against
the run's `SampleSpec`, one record at a time with a reason naming the field, and the batch conversions
that skip them when every record of a batch is well-formed (one numpy conversion per batch).

Reasons: ``missing_field``, ``bad_field`` (mistyped), ``shape_mismatch``, ``bad_label`` (a class index
outside [0, num_classes)), ``bad_target`` (a float target that is NaN or infinite).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edgestream.data.validate import SampleSpec


class RecordError(ValueError):
    """One bad record: `code` (a DLQ reason code) and a detail naming the field (raised here by the value
    checks and by every format; edgestream.data.records.base and the package hand it on)."""

    def __init__(self, code: str, detail: str) -> None:
        self.code, self.detail = code, detail
        super().__init__(f"{code}: {detail}")


_NUMERIC = "iuf"
#: an input's values: numbers, and bools as 0 / 1 (a switch's state is a feature; a batch converts them so)
_INPUT = "biuf"


def kind_of(v: Any) -> str:
    """How a line names the type of a JSON / Avro value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a bool"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list | tuple):
        return "a list"
    if isinstance(v, bytes | bytearray):
        return "bytes"
    if isinstance(v, float):
        return f"a float ({v!r})"
    return f"a {type(v).__name__}"


def _shape_text(shape: tuple[int, ...]) -> str:
    return str(tuple(shape))


def as_input(v: Any, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """A record's input as a numeric array of `shape` (a number stands for shape (1,); bools are 0 / 1);
    RecordError otherwise."""
    if v is None or isinstance(v, str | dict | bytes | bytearray):
        raise RecordError("bad_field", f"{what} is {kind_of(v)}; must be numbers of shape {_shape_text(shape)}")
    try:
        a = np.asarray(v)
    except ValueError:
        raise RecordError("shape_mismatch", f"{what} is a ragged list; must have shape {_shape_text(shape)}") from None
    if a.dtype.kind not in _INPUT:
        what_kind = {"U": "strings", "S": "bytes"}.get(a.dtype.kind, "non-numbers (null, objects, "
                                                                                   "mixed or huge values)")
        if a.dtype.kind == "O" and a.ndim == 1 and len(a) and isinstance(a[0], list | tuple):
            raise RecordError("shape_mismatch", f"{what} is a ragged list; must have shape {_shape_text(shape)}")
        raise RecordError("bad_field", f"{what} holds {what_kind}; must be numbers of shape {_shape_text(shape)}")
    if a.shape != shape:
        if a.shape == () and shape == (1,):
            return a.reshape(1)
        raise RecordError("shape_mismatch", f"{what} has shape {_shape_text(a.shape)}; must be {_shape_text(shape)}")
    return a


def as_target(v: Any, what: str, spec: SampleSpec) -> int | np.ndarray:
    """A record's target: an int class index in [0, num_classes) (an integral float too; a bool or a
    non-integral float is refused), or a finite float / list of the spec's target shape."""
    if spec.target_shape is None:
        c = spec.num_classes
        must = f"must be an integer class index in [0, {c})"
        if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
            raise RecordError("bad_field", f"{what} is {kind_of(v)}; {must}")
        if isinstance(v, float | np.floating) and not (math.isfinite(v) and float(v).is_integer()):
            raise RecordError("bad_field", f"{what} is {kind_of(float(v))}; {must}")
        if not 0 <= v < c:
            raise RecordError("bad_label", f"{what} is {int(v)}; must be in [0, {c})")
        return int(v)
    tshape = spec.target_shape
    must = "a number" if tshape == () else f"numbers of shape {_shape_text(tshape)}"
    if isinstance(v, bool) or v is None or isinstance(v, str | dict | bytes | bytearray):
        raise RecordError("bad_field", f"{what} is {kind_of(v)}; must be {must}")
    try:
        a = np.asarray(v)
    except ValueError:
        raise RecordError("shape_mismatch", f"{what} is a ragged list; must be {must}") from None
    if a.dtype.kind not in _NUMERIC:
        raise RecordError("bad_field", f"{what} holds non-numbers; must be {must}")
    if a.shape != tshape:
        if not (a.size == 1 and a.ndim <= 1 and math.prod(tshape) == 1):
            raise RecordError("shape_mismatch", f"{what} has shape {_shape_text(a.shape)}; must be {must}")
        a = a.reshape(tshape)
    with np.errstate(over="ignore"):
        a = a.astype(np.float32)  # a float64 beyond float32's range is as infinite as the batch would see it
    if not np.isfinite(a).all():
        raise RecordError("bad_target", f"{what} is not finite ({a.tolist()})")
    return a


def stack_targets(ys: list, spec: SampleSpec) -> np.ndarray:
    """Checked targets of a batch: int64 [n], or float32 [n, *target_shape]."""
    if spec.target_shape is None:
        return np.asarray(ys, np.int64)
    return np.asarray(ys, np.float32).reshape(len(ys), *spec.target_shape)


def batch_inputs(vals: list, shape: tuple[int, ...]) -> np.ndarray | None:
    """float32 (n, *shape) when every value is a well-formed input (numbers, the shape); else None."""
    try:
        a = np.asarray(vals)
    except (ValueError, TypeError):
        return None
    if a.dtype.kind not in _INPUT:
        return None
    if a.shape[1:] != shape:
        if shape == (1,) and a.ndim == 1:
            a = a.reshape(len(a), 1)
        else:
            return None
    return a.astype(np.float32, copy=False)


def batch_targets(vals: list, spec: SampleSpec) -> np.ndarray | None:
    """The targets (int64 [n] or float32 [n, *target_shape]) when every value is a valid one; else None."""
    if spec.target_shape is None and not set(map(type, vals)) <= {int, float}:
        return None  # a bool (numpy would take it as 0 / 1), a string, ...: the records one by one
    try:
        a = np.asarray(vals)
    except (ValueError, TypeError):
        return None
    if spec.target_shape is None:
        if a.ndim != 1:
            return None
        if a.dtype.kind == "f":
            if not (np.isfinite(a).all() and (a == np.floor(a)).all()):
                return None
        elif a.dtype.kind not in "iu":
            return None
        if len(a) and (a.min() < 0 or a.max() >= spec.num_classes):
            return None
        return a.astype(np.int64)
    if a.dtype.kind not in _NUMERIC:
        return None
    tshape = spec.target_shape
    if a.shape[1:] != tshape:
        if math.prod(tshape) == 1 and a.ndim <= 2 and a.size == len(a):
            a = a.reshape(len(a), *tshape)
        else:
            return None
    with np.errstate(over="ignore"):
        a = a.astype(np.float32)
    if not np.isfinite(a).all():
        return None
    return a


def parse_text_target(text: bytes | None, what: str, spec: SampleSpec) -> int | np.ndarray:
    """A target written as text (a header's or a key's value): a decimal class index, or decimal float(s)
    separated by commas (the target's shape)."""
    if text is None:
        raise RecordError("missing_field", f"{what} is not in the message")
    try:
        s = bytes(text).decode("ascii").strip()
    except UnicodeDecodeError:
        raise RecordError("bad_field", f"{what} is not ASCII text") from None
    if spec.target_shape is None:
        c = spec.num_classes
        if not (s.isdigit() or (s.startswith("-") and s[1:].isdigit())) or len(s) > 18:
            raise RecordError("bad_field", f"{what} is {s[:40]!r}; must be a decimal class index in [0, {c})")
        v = int(s)
        if not 0 <= v < c:
            raise RecordError("bad_label", f"{what} is {v}; must be in [0, {c})")
        return v
    k = math.prod(spec.target_shape)
    parts = s.split(",")
    try:
        vals = [float(p) for p in parts]
    except ValueError:
        raise RecordError("bad_field", f"{what} is {s[:40]!r}; must be {k} decimal number(s) separated by "
                          "commas") from None
    if len(vals) != k:
        raise RecordError("shape_mismatch", f"{what} has {len(vals)} value(s); must be {k}")
    a = np.asarray(vals, np.float64).reshape(spec.target_shape)
    if not np.isfinite(a).all():
        raise RecordError("bad_target", f"{what} is not finite ({s[:40]})")
    return a
