"""The ``edgestream`` record format: edgestream's own binary wire (edgestream.data.wire), decoded by the
run's `SampleSerde` with an identity normalisation (x float32, the values as sent). The wire header carries
the device, the sequence number and the produce time: the device is checked against the rule (and, on a
keyed topic, the key against the rule's device first), `seqs` and `produce_times` are the header's."""

from __future__ import annotations

from edgestream.data.records.base import RecordDecoder, _key_device, _show, key_of, with_dtype
from edgestream.data.serde import SampleSerde
from edgestream.data.wire import Affine

#: x * 1 + 0: the wire's values as float32
IDENTITY = Affine(scale=(1.0,), bias=(0.0,))


class WireDecoder(RecordDecoder):
    def __init__(self, fmt, spec) -> None:
        super().__init__(fmt, spec)
        self.serde = SampleSerde(self.spec, IDENTITY)
        self.message_bytes = self.serde.message_bytes

    def decode(self, messages, rule, device=None):
        if not self.keyed or not messages:
            return self.serde.decode(messages, rule, device)
        want = str(rule.device).encode()
        keep, bad = [], []
        for i, m in enumerate(messages):
            key = key_of(m)
            kd = _key_device(key)
            if rule.injected:
                ok = kd is not None and rule.ok(kd)
            else:
                ok = key == want
            if ok:
                keep.append(i)
            else:
                bad.append((i, f"device_mismatch: key {_show(key)} is not this stream's device {rule.device}"
                            if not rule.injected else
                            f"device_mismatch: key {_show(key)} is not a device in [0, {rule.num_devices})"))
        if not bad:
            return self.serde.decode(messages, rule, device)
        out, more = self.serde.decode([messages[i] for i in keep], rule, device)
        bad.extend((keep[j], r) for j, r in more)
        bad.sort(key=lambda b: b[0])
        return out, bad


def edgestream_decoder(fmt) -> WireDecoder:
    """streams.format: edgestream (streams.dtype: the wire's input dtype; default the spec's)."""
    return WireDecoder(fmt, with_dtype(fmt.spec, fmt.dtype) if fmt.dtype else fmt.spec)
