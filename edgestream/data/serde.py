"""The sample serde: ONE object that turns a run's samples into Kafka message values and back.

Producer, consumer, dead-letter queue and injection all go through it, so no module outside
edgestream.data knows a byte offset of the wire header (the format is `edgestream.data.wire`, the
validation against the run's dataset `edgestream.data.validate`; this object puts them together for
one run, like confluent-kafka's serializer objects):

    serde = SampleSerde(SampleSpec(np.uint8, (3, 32, 32), 10), Affine(...))   # or SampleSerde.of(dataset)
    value = serde.encode(x_row, label, device, seq, produce_time)             # producer (prefix packed once)
    batch, rejected = serde.decode(messages, DeviceRule(device, num_devices)) # consumer: validated, normalised
    head = SampleSerde.header(value)        # (seq, produce_time, device, label): restart scans, DLQ headers
    serde.message_bytes                     # one sample's size on the wire (the simulator's buffer bytes)

Injected samples travel as their original bytes (nothing is re-encoded); the receiving device decodes
them with the same serde and an injection `DeviceRule`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from edgestream.data.validate import DeviceRule, SampleSpec, decode_checked
from edgestream.data.wire import Affine, SampleEncoder, WireError, decode_sample


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
    samples (a read-only view). `accepted` holds the input items (bytes or Kafka messages) of the
    rows, in row order: what a consumer acknowledges or re-sends (injection) without re-encoding.
    """

    x: Any
    labels: np.ndarray          # int64
    devices: np.ndarray         # int64, the device each sample came from
    seqs: np.ndarray            # uint64, per-device sequence numbers
    produce_times: np.ndarray   # float64, unix seconds at produce
    accepted: list

    def __len__(self) -> int:
        return len(self.labels)


class SampleSerde:
    """Serializer/deserializer of one run's samples: its `SampleSpec` (dtype, shape, label range) and
    the consumer-side normalisation (`normalize`: an `Affine`, applied while decoding in one pass;
    any other callable gets the decoded raw batch (a read-only view) and returns the inputs; None
    leaves the raw samples)."""

    def __init__(self, spec: SampleSpec, normalize: Affine | Callable[[np.ndarray], Any] | None = None) -> None:
        self.spec, self.normalize = spec, normalize
        self._encoder = SampleEncoder(spec.dtype, spec.shape)  # the constant header prefix is packed once
        #: encode(x, label, device, seq, produce_time) -> the message value of sample `x` (the spec's dtype
        #: and shape, else WireError 'shape_mismatch'); the encoder itself, no wrapper call per message
        self.encode = self._encoder
        self._affine = normalize if isinstance(normalize, Affine) else None
        self._transform = None if self._affine is not None else normalize
        #: one sample's size on the wire, header included (bytes)
        self.message_bytes: int = spec.length

    @classmethod
    def of(cls, dataset, normalize: Affine | Callable[[np.ndarray], Any] | None = None) -> SampleSerde:
        """The serde of an edgestream.data `Dataset`: its spec, normalised as the dataset says
        (`dataset.affine`) unless `normalize` is given."""
        return cls(SampleSpec.of(dataset), normalize if normalize is not None else dataset.affine)

    def __repr__(self) -> str:
        s = self.spec
        return f"SampleSerde({s.dtype}{s.shape}, {s.num_classes} classes, normalize={self.normalize!r})"

    # ------------------------------------------------------------------ producing
    def __call__(self, x: np.ndarray, label: int, device: int, seq: int, produce_time: float) -> bytes:
        """`encode`: a serde is also the `encode` callable a StreamProducer takes."""
        return self._encoder(x, label, device, seq, produce_time)

    # ------------------------------------------------------------------ consuming
    def decode(self, messages: Sequence, rule: DeviceRule) -> tuple[DecodedBatch | None, list[tuple[int, str]]]:
        """Validate `messages` (bytes, or Kafka messages: their `value()`) against the spec and `rule`
        and decode the valid ones in one pass (the C fast path for uint8 with an Affine).

        Returns (the decoded valid messages, or None when none is valid; [(index, reason)] of the
        others, for the DLQ). Never raises for a bad message (validate.decode_checked's reasons).
        """
        out, bad = decode_checked(messages, self.spec, rule, self._affine, self._transform)
        if out is None:
            return None, bad
        if bad:
            rejected = {i for i, _ in bad}
            accepted = [m for i, m in enumerate(messages) if i not in rejected]
        else:
            accepted = messages if isinstance(messages, list) else list(messages)
        return DecodedBatch(*out, accepted), bad

    def problem(self, value: bytes | None, rule: DeviceRule) -> str | None:
        """Why one message value is not a sample of this run (a DLQ reason), or None when it is."""
        return self.spec.problem(value or b"", rule)

    @staticmethod
    def header(value: bytes | bytearray | memoryview | None) -> SampleHeader:
        """The header fields of a well-formed sample message (any run: the header describes itself);
        WireError with its reason otherwise (a null value is 'truncated_header')."""
        s = decode_sample(value if value is not None else b"")
        return SampleHeader(int(s.seq), float(s.produce_time), int(s.device), int(s.label))


__all__ = ["DecodedBatch", "DeviceRule", "SampleHeader", "SampleSerde", "SampleSpec", "WireError"]
