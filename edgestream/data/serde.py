"""The sample serde: ONE object that turns a run's samples into Kafka message values and back.

Producer, consumer, dead-letter queue and injection all go through it, so no module outside
edgestream.data knows a byte offset of the wire header (the format is `edgestream.data.wire`, the
validation against the run's dataset `edgestream.data.validate`; this object puts them together for
one run, like confluent-kafka's serializer objects):

    serde = SampleSerde(SampleSpec(np.uint8, (3, 32, 32), 10), Affine(...))   # or SampleSerde.of(dataset)
    serde = SampleSerde(SampleSpec(np.float32, (6, 50), 0, target_shape=(3,)), affine)  # float targets
    value = serde.encode(x_row, target, device, seq, produce_time)            # producer (prefix packed once)
    batch, rejected = serde.decode(messages, DeviceRule(device, num_devices)) # consumer: validated, normalised
    batch, rejected = serde.decode(messages, rule, device="cuda")  # ... the raw batch normalised on the GPU
    head = SampleSerde.header(value)        # (seq, produce_time, device, label): restart scans, DLQ headers
                                            # (label: the class index, -1 for a float target)
    serde.message_bytes                     # one sample's size on the wire (the simulator's buffer bytes)

Injected samples travel as their original bytes (nothing is re-encoded); the receiving device decodes
them with the same serde and an injection `DeviceRule`.

Decoding to a device (`decode(..., device=...)`): the batch stays in the wire's dtype (uint8 images:
1 byte a value) from the message bytes to the device -- one C pass copies the payloads into one
(pinned, for CUDA) host buffer, `.to(device, non_blocking=True)` moves it, and the float32 conversion
and the `Affine` run there, with the same float32 operations as the host path (x * scale, then + bias,
never fused): the values are identical. Without a device the host path normalises while it copies
(one pass from the message bytes to float32), which is the cheapest on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from edgestream.data import wire
from edgestream.data.buffers import BatchBuffers
from edgestream.data.validate import DeviceRule, SampleSpec, decode_checked
from edgestream.data.wire import Affine, SampleEncoder, WireError, decode_sample

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    import torch


class SampleHeader(NamedTuple):
    """The metadata a sample message carries besides its values."""

    seq: int
    produce_time: float
    device: int
    label: int


@dataclass(slots=True)
class DecodedBatch:
    """The valid messages of one decode, in their order: rows of `x` and the header fields per row.

    `x` is float32 normalised by the serde's `Affine`, else what its callable returned, else the raw
    samples; a numpy array, or a torch tensor on the device `decode` was given. `labels` holds the
    targets: int64 class indices [B], or float32 float targets [B] (scalar) / [B, K] (vector).
    `accepted` holds the input items (bytes or Kafka messages) of the rows, in row order: what a
    consumer acknowledges or re-sends (injection) without re-encoding.
    """

    x: Any
    labels: np.ndarray          # int64 [B] class indices, or float32 [B] / [B, K] float targets
    devices: np.ndarray         # int64, the device each sample came from
    seqs: np.ndarray            # uint64, per-device sequence numbers
    produce_times: np.ndarray   # float64, unix seconds at produce
    accepted: list

    def __len__(self) -> int:
        return len(self.labels)

    def split(self, size: int) -> list[DecodedBatch]:
        """Consecutive batches of `size` rows (the last one shorter when `size` does not divide the rows),
        each a view of this batch: `x` a torch tensor (a view of this one's memory, on its device), the
        other fields numpy views, `accepted` a list slice. One torch call for all of them (`Tensor.split`)."""
        import torch

        x = self.x if isinstance(self.x, torch.Tensor) else torch.from_numpy(self.x)
        y, d, s, t, a = self.labels, self.devices, self.seqs, self.produce_times, self.accepted
        return [DecodedBatch(xi, y[lo:lo + size], d[lo:lo + size], s[lo:lo + size], t[lo:lo + size],
                             a[lo:lo + size])
                for xi, lo in zip(x.split(size), range(0, len(y), size), strict=True)]


class SampleSerde:
    """Serializer/deserializer of one run's samples: its `SampleSpec` (dtype, shape, target) and
    the consumer-side normalisation (`normalize`: an `Affine`, applied while decoding in one pass;
    any other callable gets the decoded raw batch (with the C extension a fresh array, else a read-only
    view) and returns the inputs; None leaves the raw samples)."""

    def __init__(self, spec: SampleSpec, normalize: Affine | Callable[[np.ndarray], Any] | None = None) -> None:
        self.spec, self.normalize = spec, normalize
        # the constant header prefix is packed once
        self._encoder = SampleEncoder(spec.dtype, spec.shape, spec.target_dtype, spec.target_shape)
        #: encode(x, target, device, seq, produce_time) -> the message value of sample `x` (the spec's dtype
        #: and shape, else WireError 'shape_mismatch') and its target (an int class index, or a float /
        #: array of the spec's target shape, else WireError 'target_mismatch'); the encoder itself, no
        #: wrapper call per message
        self.encode = self._encoder
        self._affine = normalize if isinstance(normalize, Affine) else None
        self._transform = None if self._affine is not None else normalize
        #: one sample's size on the wire, header included (bytes)
        self.message_bytes: int = spec.length
        # the device path: the Affine's (C, 1) scale and bias per device
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._pools: dict[tuple[np.dtype, bool], BatchBuffers] = {}
        a = self._affine
        # the Affine fits the samples (else the host path, which dead-letters them as it always did)
        self._device_ok = a is None or a.channels == 1 or (len(spec.shape) > 0 and spec.shape[0] == a.channels)
        self._bias_nonzero = a is not None and bool(a._arrays[1].any())
        # a scale with its sign bit set can make -0.0 (0 * -s), which the C pass's + 0.0 turns +0.0; with
        # none, + a zero bias changes no bit of a uint8 batch (the device path then skips it)
        self._neg_scale = a is not None and bool(np.signbit(a._arrays[0]).any())

    @classmethod
    def of(cls, dataset, normalize: Affine | Callable[[np.ndarray], Any] | None = None) -> SampleSerde:
        """The serde of an edgestream.data `Dataset`: its spec, normalised as the dataset says
        (`dataset.affine`) unless `normalize` is given."""
        return cls(SampleSpec.of(dataset), normalize if normalize is not None else dataset.affine)

    def __repr__(self) -> str:
        s = self.spec
        target = f"{s.num_classes} classes" if s.target_shape is None else f"{s.target_dtype} targets {s.target_shape}"
        return f"SampleSerde({s.dtype}{s.shape}, {target}, normalize={self.normalize!r})"

    # ------------------------------------------------------------------ producing
    def __call__(self, x: np.ndarray, target, device: int, seq: int, produce_time: float) -> bytes:
        """`encode`: a serde is also the `encode` callable a StreamProducer takes."""
        return self._encoder(x, target, device, seq, produce_time)

    # ------------------------------------------------------------------ consuming
    def decode(self, messages: Sequence, rule: DeviceRule, device: torch.device | str | None = None
               ) -> tuple[DecodedBatch | None, list[tuple[int, str]]]:
        """Validate `messages` (bytes, or Kafka messages: their `value()`) against the spec and `rule`
        and decode the valid ones in one pass (the C fast path for uint8 with an Affine).

        `device` (a torch device): x is a tensor there, and the batch crosses to it in the wire's dtype
        -- the float32 conversion and the Affine run on the device (see the module docstring); a
        callable `normalize` still runs on the host, its result is moved. None: the host path (x numpy).

        Returns (the decoded valid messages, or None when none is valid; [(index, reason)] of the
        others, for the DLQ). Never raises for a bad message (validate.decode_checked's reasons).
        """
        import torch

        if device is not None:
            device = torch.device(device)
            if self._transform is None and self._device_ok:
                pool = self._pool(self.spec.dtype, device.type == "cuda")
                out, bad = decode_checked(messages, self.spec, rule, alloc=pool.take_tensor)
                if out is not None:
                    out = (self._to_device(out[0], device, owned=True, pool=pool), *out[1:])
            else:
                out, bad = decode_checked(messages, self.spec, rule, self._affine, self._transform)
                if out is not None:
                    x = out[0] if isinstance(out[0], torch.Tensor) else torch.from_numpy(np.asarray(out[0]))
                    out = (x.to(device, non_blocking=True), *out[1:])
        else:
            # the C pass writes the batch (normalised, or raw) into a reused host buffer (a batch still
            # held keeps its own: BatchBuffers); a callable normalisation, or numpy, makes its own
            alloc = (None if self._transform is not None or getattr(wire._wirefast, "gather", None) is None
                     else self._pool(np.float32 if self._affine is not None else self.spec.dtype, False).take)
            out, bad = decode_checked(messages, self.spec, rule, self._affine, self._transform, alloc=alloc)
        if out is None:
            return None, bad
        if bad:
            rejected = {i for i, _ in bad}
            accepted = [m for i, m in enumerate(messages) if i not in rejected]
        else:
            accepted = messages if isinstance(messages, list) else list(messages)
        return DecodedBatch(*out, accepted), bad

    def _pool(self, dtype, pin: bool) -> BatchBuffers:
        """The reused host buffers of batches of `dtype` (pinned: staged for a CUDA device, the copy then
        asynchronous; a buffer is reused once its copy is done and nothing holds it: BatchBuffers)."""
        key = (np.dtype(dtype), pin)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = BatchBuffers(self.spec.shape, np.dtype(dtype).newbyteorder("="), pin=pin)
        return pool

    def to_device(self, x: torch.Tensor | np.ndarray, device: torch.device | str) -> torch.Tensor:
        """A raw batch (n, *spec.shape) in the wire's dtype -> `device`, then float32 normalised there by
        the serde's Affine (None: the raw batch on the device). The values equal the host path's:
        float32(x) * scale, then + bias, as separate operations. `x` is not modified."""
        import torch

        return self._to_device(x, torch.device(device), owned=False)

    def _to_device(self, x: torch.Tensor | np.ndarray, device: torch.device, owned: bool,
                   pool: BatchBuffers | None = None) -> torch.Tensor:
        import torch

        x0 = x if isinstance(x, torch.Tensor) else torch.from_numpy(x)
        xt = x0.to(device, non_blocking=True)  # first: the raw dtype crosses (1 byte a value for uint8)
        if pool is not None:
            pool.copied(x0)  # its staging buffer is reused once this copy is done
        a = self._affine
        if a is None:
            return xt
        if xt.dtype == torch.uint8 and xt.numel():
            # the conversion and the scale in one kernel (uint8 -> float32 is exact, so float32(x) * scale
            # as on the host), written to a fresh float32 batch on the device; then + bias
            a._check(tuple(xt.shape[1:]))
            scale, bias = self._device_affine(device)
            y = torch.empty(xt.shape, dtype=torch.float32, device=device)
            v = y.view(len(y), a.channels, -1)
            torch.mul(xt.view(len(xt), a.channels, -1), scale, out=v)
            if self._bias_nonzero or (self._neg_scale and getattr(wire._wirefast, "gather", None)):
                v.add_(bias)
            return y
        y = xt.to(torch.float32)  # then the conversion, on the device
        if not owned and y.data_ptr() == x0.data_ptr() and y.device == x0.device:
            y = y.clone()  # float32 samples already there: the caller's x stays as it was
        if y.numel():
            a._check(tuple(y.shape[1:]))
            scale, bias = self._device_affine(device)
            v = y.view(len(y), a.channels, -1)
            v.mul_(scale)
            # + bias even when it is 0 where the host path's C pass does (uint8): -0.0 turns +0.0 alike
            if self._bias_nonzero or (self.spec.dtype == np.uint8 and getattr(wire._wirefast, "gather", None)):
                v.add_(bias)
        return y

    def _device_affine(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        got = self._on_device.get(device)
        if got is None:
            scale, bias = self._affine._arrays
            got = self._on_device[device] = tuple(torch.from_numpy(v.copy()).view(-1, 1).to(device)
                                                  for v in (scale, bias))
        return got

    def problem(self, value: bytes | None, rule: DeviceRule) -> str | None:
        """Why one message value is not a sample of this run (a DLQ reason), or None when it is."""
        return self.spec.problem(value or b"", rule)

    @staticmethod
    def header(value: bytes | bytearray | memoryview | None) -> SampleHeader:
        """The header fields of a well-formed sample message (any run: the header describes itself);
        WireError with its reason otherwise (a null value is 'truncated_header'). `label` is the class
        index, or -1 for a float target (the target itself: `wire.decode_sample(value).target`)."""
        s = decode_sample(value if value is not None else b"")
        return SampleHeader(int(s.seq), float(s.produce_time), int(s.device), int(s.label))


__all__ = ["DecodedBatch", "DeviceRule", "SampleHeader", "SampleSerde", "SampleSpec", "WireError"]
