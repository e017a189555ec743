"""Validate streamed samples against the run's dataset, then decode the valid ones in one pass.

A sample is accepted only when it is a well-formed wire message (edgestream.data.wire) AND it is a
sample of this run: the dataset's dtype and shape, a label in [0, num_classes), and the device the
topic belongs to. A batch is never shaped by its first message: every message is compared with the
`SampleSpec` taken from the dataset. Everything else is returned as (index, reason) so the consumer
can dead-letter it; nothing raised while decoding one message reaches the trainer.

Reasons (the DLQ's `reason` header): the wire format's (`wire.REASONS`: truncated_header, bad_magic,
bad_version, unknown_dtype, bad_shape, bad_pad, bad_length), and `dtype_mismatch` / `shape_mismatch`
(a valid sample of another dtype / shape than the run's dataset), `bad_label`, `device_mismatch`,
`decode_error` (anything else a message made the decoder raise).

Other modules use this through the run's `SampleSerde` (edgestream.data.serde), never directly.

The fast path (every message of a batch valid, the common case) costs one header-prefix comparison per
message in C (or one vectorised numpy comparison) plus vectorised label and device checks.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgestream.data import wire
from edgestream.data.wire import HEADER_DTYPE, HEADER_SIZE, MAGIC, VERSION, Affine, WireError, decode_sample

#: reasons beyond the wire format's
SPEC_REASONS = ("dtype_mismatch", "shape_mismatch", "bad_label", "device_mismatch", "decode_error")

#: one decoded batch: (x, labels int64, source devices int64, seqs uint64, produce times float64)
Decoded = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class SampleSpec:
    """What every sample of a run must be: dtype, shape (from the dataset) and the label range."""

    dtype: np.dtype
    shape: tuple[int, ...]
    num_classes: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.num_classes < 1:
            raise ValueError(f"num_classes: {self.num_classes} is not allowed; must be >= 1")
        dims = wire._dims(self.shape)
        prefix = struct.pack("<4sBBBB4I", MAGIC, VERSION, wire.dtype_code(self.dtype), len(self.shape), 0, *dims)
        object.__setattr__(self, "prefix", prefix)
        object.__setattr__(self, "length", HEADER_SIZE + math.prod(self.shape) * self.dtype.itemsize)

    @classmethod
    def of(cls, dataset) -> SampleSpec:
        """The spec of an edgestream.data `Dataset` (what its producer streams)."""
        return cls(dataset.x_train.dtype, dataset.x_train.shape[1:], dataset.num_classes)

    def problem(self, value: bytes, devices: DeviceRule) -> str | None:
        """Why `value` is not a sample of this run (a reason), or None when it is."""
        try:
            s = decode_sample(value)
        except WireError as exc:
            return exc.reason
        if s.dtype != self.dtype:
            return "dtype_mismatch"
        if s.shape != self.shape:
            return "shape_mismatch"
        if not 0 <= s.label < self.num_classes:
            return "bad_label"
        if not devices.ok(s.device):
            return "device_mismatch"
        return None


@dataclass(frozen=True)
class DeviceRule:
    """Which device ids a topic's samples may carry: exactly `device` (a device stream), or any of
    [0, num_devices) (an injection topic: samples keep their origin device; an injected sample may be
    injected again, so even this device's own samples can come back)."""

    device: int
    num_devices: int
    injected: bool = False

    def ok(self, d: int) -> bool:
        if self.injected:
            return 0 <= d < self.num_devices
        return d == self.device

    def bad_mask(self, d: np.ndarray) -> np.ndarray:
        if self.injected:
            return (d < 0) | (d >= self.num_devices)
        return d != self.device


def _value(v) -> bytes:
    """A message's bytes: `v` itself, or a Kafka message's value() (a tombstone's None is b"")."""
    return v if isinstance(v, bytes | bytearray | memoryview) else (v.value() or b"")


def _uniform(values: list, spec: SampleSpec, affine: Affine | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(x, headers) when every value starts with the spec's header prefix and has its length; None
    otherwise. x is float32 normalised by `affine`, or the raw samples (a read-only view) without one."""
    n = len(values)
    if affine is not None and wire._wirefast is not None and spec.dtype == np.uint8 \
            and (affine.channels == 1 or spec.shape[0] == affine.channels):
        out = np.empty((n, *spec.shape), np.float32)
        headers = np.empty(n, HEADER_DTYPE)
        scale, bias = affine._arrays
        plane = math.prod(spec.shape) // affine.channels
        if wire._wirefast.u8_affine(values, spec.prefix, spec.length, plane, scale, bias, out, headers) >= 0:
            return None
        return out, headers
    raw = [_value(v) for v in values]
    if any(len(v) != spec.length for v in raw):
        return None
    rows = np.frombuffer(b"".join(raw), dtype=np.uint8).reshape(n, spec.length)
    ref = np.frombuffer(spec.prefix, dtype="<u8")
    if (np.ascontiguousarray(rows[:, :24]).view("<u8") != ref).any():
        return None
    headers = np.ascontiguousarray(rows[:, :HEADER_SIZE]).view(HEADER_DTYPE)[:, 0]
    x = rows[:, HEADER_SIZE:].view(spec.dtype).reshape(n, *spec.shape)
    return (affine(x) if affine is not None else x), headers


def _checked(values: list, spec: SampleSpec, devices: DeviceRule, affine: Affine | None
             ) -> tuple[Decoded | None, np.ndarray | None]:
    """The decoded batch when every value is valid; else (None, per-value bad mask or None = unknown)."""
    got = _uniform(values, spec, affine)
    if got is None:
        return None, None
    x, h = got
    labels, devs = h["label"].astype(np.int64), h["device"].astype(np.int64)
    bad = (labels < 0) | (labels >= spec.num_classes) | devices.bad_mask(devs)
    if bad.any():
        return None, bad
    return (x, labels, devs, h["seq"].astype(np.uint64), h["produce_time"].astype(np.float64)), None


def decode_checked(values: list, spec: SampleSpec, devices: DeviceRule, affine: Affine | None = None,
                   transform: Callable[[np.ndarray], object] | None = None
                   ) -> tuple[Decoded | None, list[tuple[int, str]]]:
    """Validate `values` (bytes, or Kafka messages) against `spec` and `devices`; decode the valid ones.

    Returns ((x, labels, devices, seqs, produce_times) of the valid values in order, or None when none is valid;
    [(index, reason)] of the others). x is float32 normalised by `affine`, else `transform(raw)` when a
    transform is given, else the raw samples. Never raises for a bad message: a value the decoder
    cannot handle is reported as `decode_error`.
    """
    if not values:
        return None, []
    try:
        out, mask = _checked(values, spec, devices, affine)
        if out is not None:
            return (_apply(out, transform), []) if transform is not None else (out, [])
    except Exception:  # noqa: BLE001 - isolate below, message by message
        mask = None
    if mask is None:
        reasons = [spec.problem(_value(v), devices) for v in values]
    else:
        reasons = [spec.problem(_value(v), devices) if m else None for v, m in zip(values, mask, strict=True)]
    keep = [i for i, r in enumerate(reasons) if r is None]
    bad = [(i, r) for i, r in enumerate(reasons) if r is not None]
    if not keep:
        return None, bad
    try:
        out, _ = _checked([values[i] for i in keep], spec, devices, affine)
        if out is None:
            raise WireError("decode_error", "valid messages did not decode together")
        return (_apply(out, transform) if transform is not None else out), bad
    except Exception:  # noqa: BLE001 - the last resort: one message at a time
        return _one_by_one(values, keep, bad, spec, devices, affine, transform)


def _apply(out: Decoded, transform: Callable) -> Decoded:
    return (transform(out[0]), *out[1:])


def _one_by_one(values, keep, bad, spec, devices, affine, transform):
    parts: list[Decoded] = []
    for i in keep:
        try:
            out, _ = _checked([values[i]], spec, devices, affine)
            if out is None:
                raise WireError("decode_error")
            parts.append(_apply(out, transform) if transform is not None else out)
        except Exception:  # noqa: BLE001
            bad.append((i, "decode_error"))
    bad.sort()
    if not parts:
        return None, bad
    xs = [p[0] for p in parts]
    try:
        import torch

        x = torch.cat(xs) if isinstance(xs[0], torch.Tensor) else np.concatenate(xs)
    except ImportError:  # pragma: no cover
        x = np.concatenate(xs)
    return (x, *(np.concatenate([p[k] for p in parts]) for k in (1, 2, 3, 4))), bad
