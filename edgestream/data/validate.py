"""Validate streamed samples against the run's dataset, then decode the valid ones in one pass.

A sample is accepted only when it is a well-formed wire message (edgestream.data.wire) AND it is a
sample of this run: the dataset's dtype and shape, its target (a class index in [0, num_classes), or
a finite float target of the dataset's target dtype and shape), and the device the topic belongs to.
A batch is never shaped by its first message: every message is compared with the `SampleSpec` taken
from the dataset. Everything else is returned as (index, reason) so the consumer
can dead-letter it; nothing raised while decoding one message reaches the trainer.

Reasons (the DLQ's `reason` header): the wire format's (`wire.REASONS`: truncated_header, bad_magic,
bad_version, unknown_dtype, bad_shape, unknown_target, bad_length), and `dtype_mismatch` /
`shape_mismatch` (a valid sample of another input dtype / shape than the run's dataset),
`target_mismatch` (a class index where the run has float targets, or the other way round, or a float
target of another dtype or shape), `bad_label` (a class index outside [0, num_classes)), `bad_target`
(a float target that is NaN or infinite: one would turn the loss and then the model into NaN),
`device_mismatch`, `decode_error` (anything else a message made the decoder raise).

Other modules use this through the run's `SampleSerde` (edgestream.data.serde), never directly.

The fast path (every message of a batch valid, the common case) is one C pass (`_wirefast.gather`):
per message a header-prefix comparison, the label (or target-shape) and device checks, the header
fields, the payload (copied, or normalised to float32 on the way) and a float target's bytes -- or,
without the extension, vectorised numpy checks. A float target's finiteness and its conversion to
float32 are one vectorised numpy step over the batch.
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
SPEC_REASONS = ("dtype_mismatch", "shape_mismatch", "target_mismatch", "bad_label", "bad_target", "device_mismatch",
                "decode_error")

#: batches from this size on (float32, or raw: a block bound for a GPU copy) are written with non-temporal
#: stores by the C pass (x86): a batch that does not fit a core's L2 is mostly evicted before the model (or
#: the DMA engine) reads it anyway, and skipping the cache halves the write's memory traffic (the values are
#: the same). Measured on a 2-core VM (512 KiB L2 a core), 3x32x32 batches, side by side: float32, 64
#: samples (768 KiB) 0.47 -> 0.53 of a raw poll, 256 samples 0.53 -> 0.65 (benchmarks/bench_consumer_decode.py);
#: raw uint8 blocks of 1,344 samples: 41 -> 20-25 us a 64-sample batch
STREAM_MIN_BYTES = 256 << 10

#: one decoded batch: (x, targets: int64 [B] class indices or float32 [B, *target_shape], source devices
#: int64, seqs uint64, produce times float64)
Decoded = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class SampleSpec:
    """What every sample of a run must be: the input's dtype and shape (from the dataset) and its target:
    a class index in [0, num_classes) (`target_shape` None, the default), or a float target of
    `target_dtype` (default float32; float16, float64 allowed) and `target_shape` (() a scalar, (K,) a
    vector), with num_classes 0."""

    dtype: np.dtype
    shape: tuple[int, ...]
    num_classes: int
    target_shape: tuple[int, ...] | None = None
    target_dtype: np.dtype | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.target_shape is None:
            if self.target_dtype is not None:
                raise ValueError("target_dtype: only float targets have one (give target_shape too)")
            if self.num_classes < 1:
                raise ValueError(f"num_classes: {self.num_classes} is not allowed; must be >= 1")
            tcode, field, tbytes, bounds = wire.TARGET_CLASS, 0, 0, (0, self.num_classes)
        else:
            object.__setattr__(self, "target_shape", tuple(int(d) for d in self.target_shape))
            tdt = np.dtype(self.target_dtype if self.target_dtype is not None else np.float32)
            if tdt.kind != "f" or tdt.itemsize not in (2, 4, 8):
                raise ValueError(f"target_dtype: {tdt} is not allowed; must be float16, float32 or float64")
            object.__setattr__(self, "target_dtype", tdt)
            if self.num_classes != 0:
                raise ValueError(f"num_classes: {self.num_classes} with float targets; must be 0")
            try:
                field = wire.target_field(self.target_shape)
            except WireError:
                raise ValueError(f"target_shape: {self.target_shape} is not allowed; must be () (a scalar) "
                                 "or (K,) (a vector)") from None
            tcode, bounds = wire.target_code(tdt), (field, field + 1)
            tbytes = math.prod(self.target_shape) * tdt.itemsize
        dims = wire._dims(self.shape)
        prefix = struct.pack("<4sBBBB4I", MAGIC, VERSION, wire.dtype_code(self.dtype), len(self.shape), tcode, *dims)
        object.__setattr__(self, "prefix", prefix)
        #: bytes of a float target after the payload (0: a class index)
        object.__setattr__(self, "target_bytes", tbytes)
        #: [lo, hi) of the header's label field: the class range, or the one value of the target shape
        object.__setattr__(self, "label_bounds", bounds)
        object.__setattr__(self, "length", HEADER_SIZE + math.prod(self.shape) * self.dtype.itemsize + tbytes)

    @property
    def is_regression(self) -> bool:
        """Whether the targets are float values (not class indices)."""
        return self.target_shape is not None

    @classmethod
    def of(cls, dataset) -> SampleSpec:
        """The spec of an edgestream.data `Dataset` (what its producer streams): a float target when the
        dataset has a `target_shape` (its dtype: y_train's), else class indices in [0, num_classes)."""
        tshape = getattr(dataset, "target_shape", None)
        if tshape is None:
            return cls(dataset.x_train.dtype, dataset.x_train.shape[1:], dataset.num_classes)
        return cls(dataset.x_train.dtype, dataset.x_train.shape[1:], 0, tuple(tshape), dataset.y_train.dtype)

    def empty_targets(self) -> np.ndarray:
        """A batch of no targets: int64 (0,), or float32 (0, *target_shape)."""
        if self.target_shape is None:
            return np.zeros(0, np.int64)
        return np.zeros((0, *self.target_shape), np.float32)

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
        if s.target_dtype != self.target_dtype or s.target_shape != self.target_shape:
            return "target_mismatch"
        if self.target_shape is None:
            if not 0 <= s.label < self.num_classes:
                return "bad_label"
        elif not np.isfinite(s.target).all():
            return "bad_target"
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

    @property
    def bounds(self) -> tuple[int, int]:
        """[lo, hi): the device ids this rule accepts, as one range."""
        return (0, self.num_devices) if self.injected else (self.device, self.device + 1)

    def bad_mask(self, d: np.ndarray) -> np.ndarray:
        if self.injected:
            return (d < 0) | (d >= self.num_devices)
        return d != self.device


def _value(v) -> bytes:
    """A message's bytes: `v` itself, or a Kafka message's value() (a tombstone's None is b"")."""
    return v if isinstance(v, bytes | bytearray | memoryview) else (v.value() or b"")


def _c_affine(spec: SampleSpec, affine: Affine | None) -> bool:
    """Whether the C pass normalises while it copies: uint8 samples whose channels fit the Affine."""
    return (affine is not None and spec.dtype == np.uint8
            and (affine.channels == 1 or spec.shape[0] == affine.channels))


def _targets(spec: SampleSpec, raw: np.ndarray | None, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(the batch's targets, None) -- the class indices `labels`, or the float targets `raw` (n, *target_shape)
    in the wire's dtype as float32 -- or (labels, bad mask) when some float target is not finite."""
    if raw is None:
        return labels, None
    finite = np.isfinite(raw)
    if not finite.all():
        return labels, ~finite.reshape(len(raw), -1).all(axis=1)
    return wire.float_targets(raw), None


def _gathered(values: list, spec: SampleSpec, devices: DeviceRule, affine: Affine | None, alloc
              ) -> tuple[Decoded | None, np.ndarray | None]:
    """The C pass (edgestream.data._wirefast.gather): every value checked against the spec's header
    prefix and length, its label (or target shape) and device checked, its fields, payload and float
    target written in one call."""
    n = len(values)
    fused = _c_affine(spec, affine)
    if fused:
        # alloc: where the normalised batch goes (a reused buffer), else a fresh float32 array
        x = alloc(n) if alloc is not None else np.empty((n, *spec.shape), np.float32)
        xa = np.asarray(x)
        scale, bias = affine._arrays
        plane = math.prod(spec.shape) // affine.channels
    else:
        x = alloc(n) if alloc is not None and affine is None else np.empty((n, *spec.shape), spec.dtype)
        xa = np.asarray(x)  # a torch tensor from `alloc`: its memory, written in place
        scale = bias = None
        plane = 0
    raw = None if spec.target_shape is None else np.empty((n, *spec.target_shape), spec.target_dtype)
    labels, devs = np.empty(n, np.int64), np.empty(n, np.int64)
    seqs, times = np.empty(n, np.uint64), np.empty(n, np.float64)
    lo, hi = devices.bounds
    lab_lo, lab_hi = spec.label_bounds
    stream = xa.nbytes >= STREAM_MIN_BYTES  # a large batch: written with non-temporal stores
    if wire._wirefast.gather(values, spec.prefix, spec.length, spec.target_bytes, plane, scale, bias, xa, raw,
                             labels, devs, seqs, times, lab_lo, lab_hi, lo, hi, stream) >= 0:
        return None, None  # which values and why: the caller asks each one
    targets = labels
    if raw is not None:
        targets, bad = _targets(spec, raw, labels)
        if bad is not None:
            return None, bad
    if affine is not None and not fused:
        x = affine(x)
    return (x, targets, devs, seqs, times), None


def _uniform(values: list, spec: SampleSpec, affine: Affine | None, alloc=None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """(x, headers, float targets or None) when every value starts with the spec's header prefix and has
    its length; None otherwise. x is float32 normalised by `affine`, or the raw samples without one (a
    read-only view, or the array `alloc(n)` returned, filled); float targets in the wire's dtype."""
    n = len(values)
    raw = [_value(v) for v in values]
    if any(len(v) != spec.length for v in raw):
        return None
    rows = np.frombuffer(b"".join(raw), dtype=np.uint8).reshape(n, spec.length)
    ref = np.frombuffer(spec.prefix, dtype="<u8")
    if (np.ascontiguousarray(rows[:, :24]).view("<u8") != ref).any():
        return None
    headers = np.ascontiguousarray(rows[:, :HEADER_SIZE]).view(HEADER_DTYPE)[:, 0]
    end = spec.length - spec.target_bytes
    targets = None if spec.target_shape is None else rows[:, end:].view(spec.target_dtype).reshape(
        n, *spec.target_shape)
    x = rows[:, HEADER_SIZE:end].view(spec.dtype).reshape(n, *spec.shape)
    if affine is not None:
        return affine(x), headers, targets
    if alloc is not None:
        out = alloc(n)
        np.copyto(np.asarray(out), x)
        return out, headers, targets
    if x.strides[0] % x.itemsize or HEADER_SIZE % x.itemsize:
        # a row whose length is no multiple of the input's itemsize (a float target after a float64 input):
        # the view's strides would not be, and torch (from_numpy) refuses such an array; copied
        x = x.copy()  # (not ascontiguousarray: it keeps the strides of a batch of one row)
    return x, headers, targets


def _checked(values: list, spec: SampleSpec, devices: DeviceRule, affine: Affine | None, alloc=None
             ) -> tuple[Decoded | None, np.ndarray | None]:
    """The decoded batch when every value is valid; else (None, per-value bad mask or None = unknown)."""
    # the C pass when the extension is built with it (little-endian hosts); numpy otherwise: same values
    if getattr(wire._wirefast, "gather", None) is not None and isinstance(values, list):
        return _gathered(values, spec, devices, affine, alloc)
    got = _uniform(values, spec, affine, alloc)
    if got is None:
        return None, None
    x, h, raw = got
    labels, devs = h["label"].astype(np.int64), h["device"].astype(np.int64)
    lo, hi = spec.label_bounds
    bad = (labels < lo) | (labels >= hi) | devices.bad_mask(devs)
    targets, bad_target = _targets(spec, raw, labels)
    if bad_target is not None:  # every bad value marked, not only the first kind found: the unmarked are kept
        bad |= bad_target
    if bad.any():
        return None, bad
    return (x, targets, devs, h["seq"].astype(np.uint64), h["produce_time"].astype(np.float64)), None


def decode_checked(values: list, spec: SampleSpec, devices: DeviceRule, affine: Affine | None = None,
                   transform: Callable[[np.ndarray], object] | None = None, alloc: Callable[[int], object] | None = None
                   ) -> tuple[Decoded | None, list[tuple[int, str]]]:
    """Validate `values` (bytes, or Kafka messages) against `spec` and `devices`; decode the valid ones.

    Returns ((x, targets, devices, seqs, produce_times) of the valid values in order -- targets int64 class
    indices [B] or float32 [B, *target_shape] -- or None when none is valid;
    [(index, reason)] of the others). x is float32 normalised by `affine`, else `transform(raw)` when a
    transform is given, else the raw samples. Never raises for a bad message: a value the decoder
    cannot handle is reported as `decode_error`.

    `alloc(n)` returns the array the n samples are written to -- a C-contiguous (n, *spec.shape) numpy
    array or CPU torch tensor: of the spec's dtype for raw samples (no affine), e.g. pinned memory for
    a copy to a GPU; float32 with an affine, used when the C pass normalises while it copies (uint8
    samples; otherwise the affine's own result) -- and x is that object (when some values are rejected
    and the rest must be decoded one by one, x is their concatenation instead).
    """
    if not values:
        return None, []
    if alloc is not None and transform is not None:
        raise ValueError("decode_checked: alloc is for raw or Affine-normalised samples (no transform)")
    try:
        out, mask = _checked(values, spec, devices, affine, alloc)
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
        out, _ = _checked([values[i] for i in keep], spec, devices, affine, alloc)
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
