"""`RecordDecoder`: what every record decoder shares -- a message's bytes, key, offset and timestamp, the
device check of a keyed topic, and the batch it returns (`SampleSerde.decode`'s contract) -- so a format
only turns record bytes into (input, target).

A format overrides `record(value, message) -> (x, target)` (one record; raise `RecordError(code, detail)`
for a bad one), or, for speed, `records(values, messages) -> (x, targets, [(j, reason)])` (a batch; rows
of the accepted ones in order). Anything else a record makes it raise is that record's `decode_error`.

Per row: `devices` is the key's device when the topic is keyed or the rule an injection's (and the key a
decimal id), else the rule's device; `seqs` the message offset (a bytes item: its index); `produce_times`
the message timestamp in seconds (a bytes item, or a message without a timestamp: 0.0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from edgestream.data.records import values as check
from edgestream.data.records.values import RecordError  # also handed on from here (the formats import it)
from edgestream.data.serde import DecodedBatch
from edgestream.data.validate import DeviceRule, SampleSpec

if TYPE_CHECKING:
    from edgestream.data.records.format import RecordFormat

_BYTES = (bytes, bytearray, memoryview)


def with_dtype(spec: SampleSpec, dtype, field: str = "streams.dtype") -> SampleSpec:
    """`spec` with the input dtype `dtype` (ValueError naming `field` for a dtype the wire has no code of)."""
    from dataclasses import replace

    from edgestream.data.wire import DTYPE_CODES

    try:
        dt = np.dtype(dtype)
        return spec if dt == spec.dtype else replace(spec, dtype=dt)
    except Exception:  # noqa: BLE001 - numpy's TypeError, the wire's WireError
        allowed = ", ".join(str(d) for d in DTYPE_CODES.values())
        raise ValueError(f"{field}: {dtype!r} is not allowed; must be one of {allowed}") from None


def headers_of(message: Any) -> list[tuple[str, bytes | None]]:
    """A message's headers ([] for bytes or none)."""
    if isinstance(message, _BYTES):
        return []
    return message.headers() or []


def header(message: Any, name: str) -> bytes | None:
    """The last value of header `name` of a message (None: absent)."""
    got = None
    for k, v in headers_of(message):
        if k == name:
            got = v if v is not None else b""
    return got


def key_of(message: Any) -> bytes | None:
    """A message's key (None for bytes items or no key)."""
    if isinstance(message, _BYTES):
        return None
    k = message.key()
    return k.encode() if isinstance(k, str) else k


def _key_device(key: bytes | None) -> int | None:
    if key is None or not key.isdigit() or len(key) > 18:
        return None
    return int(key)


class RecordDecoder:
    """The base of the built-in decoders, and of a user's (see the module doc). `spec`: the samples it
    decodes (x float32 of `spec.shape`, the spec's target); `normalize`: None (records are used as they are);
    `message_bytes`: one record's size estimate (None: unknown)."""

    normalize = None
    message_bytes: int | None = None

    def __init__(self, fmt: RecordFormat, spec: SampleSpec | None = None) -> None:
        self.fmt = fmt
        self.spec = spec if spec is not None else fmt.spec
        self.keyed = fmt.keyed

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fmt.name!r}, {self.spec.shape}, keyed={self.keyed})"

    # ------------------------------------------------------------------ a format's part
    def record(self, value: bytes, message: Any) -> tuple[Any, Any]:
        """(x: array-like of spec.shape, target: a class index or a float / array of the target shape)."""
        raise NotImplementedError(f"{type(self).__name__}: override record() or records()")

    def records(self, values: list[bytes], messages: list) -> tuple[np.ndarray | None, np.ndarray | None,
                                                                     list[tuple[int, str]]]:
        """The default: `record` one by one, each x and target checked against the spec."""
        xs, ys, bad = [], [], []
        for j, (v, m) in enumerate(zip(values, messages, strict=True)):
            try:
                x, y = self.record(v, m)
                x, y = check.as_input(x, "input", self.spec.shape), check.as_target(y, "target", self.spec)
            except RecordError as exc:
                bad.append((j, str(exc)))
                continue
            except Exception as exc:  # noqa: BLE001 - a user's record() may raise anything
                bad.append((j, f"decode_error: {type(exc).__name__}: {' '.join(str(exc).split())}"[:300]))
                continue
            xs.append(x)
            ys.append(y)
        if not xs:
            return None, None, bad
        return np.stack(xs).astype(np.float32, copy=False), check.stack_targets(ys, self.spec), bad

    # ------------------------------------------------------------------ the contract
    def decode(self, messages: Sequence, rule: DeviceRule, device=None
               ) -> tuple[DecodedBatch | None, list[tuple[int, str]]]:
        """Decode `messages` (Kafka messages or bytes) of the device stream `rule` describes; never raises
        for a bad message. Returns (the accepted rows or None, [(index, reason)])."""
        n = len(messages)
        if not n:
            return None, []
        bad: list[tuple[int, str]] = []
        got = None if self.keyed or rule.injected else _plain(messages)
        if got is not None:
            keep, (values, seqs, times) = range(n), got
            devs = [rule.device] * n
        else:
            keep, values, devs, seqs, times = self._meta(messages, rule, bad)
        if not keep:
            return None, bad
        items = [messages[i] for i in keep]
        try:
            x, y, rec_bad = self.records(values, items)
        except Exception:  # noqa: BLE001 - a batch path's surprise: the records one by one
            x, y, rec_bad = RecordDecoder.records(self, values, items)
        if rec_bad:
            dropped = {j for j, _ in rec_bad}
            bad.extend((keep[j], r) for j, r in rec_bad)
            bad.sort(key=lambda b: b[0])
            rows = [j for j in range(len(keep)) if j not in dropped]
        else:
            rows = range(len(keep))
        if x is None or not len(rows):
            return None, bad
        accepted = [items[j] for j in rows]
        if rec_bad:
            devs, seqs, times = ([a[j] for j in rows] for a in (devs, seqs, times))
        return DecodedBatch(self._place(x, device), y, np.asarray(devs, np.int64), np.asarray(seqs, np.uint64),
                            np.asarray(times, np.float64), accepted), bad

    def _meta(self, messages: Sequence, rule: DeviceRule, bad: list) -> tuple[list, ...]:
        """Per message: (the kept indices, values, devices, seqs, times); a bad key's reason into `bad`."""
        keep, values, devs, seqs, times = [], [], [], [], []
        want = str(rule.device).encode()
        for i, m in enumerate(messages):
            try:
                if isinstance(m, _BYTES):
                    value, key, offset, ts = bytes(m), None, i, 0.0
                else:
                    value, key, offset = m.value() or b"", key_of(m), m.offset()
                    kind, ms = m.timestamp()
                    ts = ms / 1000.0 if kind and ms >= 0 else 0.0
                    if offset is None or offset < 0:
                        offset = i
                d = rule.device
                if self.keyed or rule.injected:
                    kd = _key_device(key)
                    if self.keyed and not rule.injected and key != want:
                        bad.append((i, f"device_mismatch: key {_show(key)} is not this stream's device "
                                       f"{rule.device}"))
                        continue
                    if kd is not None:
                        if not rule.ok(kd):
                            bad.append((i, f"device_mismatch: key {_show(key)} is not a device in "
                                           f"[0, {rule.num_devices})"))
                            continue
                        d = kd
                    elif self.keyed:
                        bad.append((i, f"device_mismatch: key {_show(key)} is not a device id"))
                        continue
            except Exception as exc:  # noqa: BLE001 - a broken message object
                bad.append((i, f"decode_error: {type(exc).__name__}: {exc}"[:300]))
                continue
            keep.append(i)
            values.append(value)
            devs.append(d)
            seqs.append(offset)
            times.append(ts)
        return keep, values, devs, seqs, times

    @staticmethod
    def _place(x: np.ndarray, device):
        if device is None:
            return x
        import torch

        return torch.from_numpy(np.ascontiguousarray(x)).to(torch.device(device), non_blocking=True)


def _plain(messages: Sequence) -> tuple[list, list, list] | None:
    """(values, offsets, times) of messages whose keys do not matter, in one pass each; None when some item
    is odd (the per-message path then tells which)."""
    try:
        if all(isinstance(m, bytes) for m in messages):
            return list(messages), list(range(len(messages))), [0.0] * len(messages)
        values = [m.value() or b"" for m in messages]
        offsets = [m.offset() for m in messages]
        stamps = [m.timestamp() for m in messages]
        if min(offsets) < 0:
            return None
        return values, offsets, [ms / 1000.0 if kind and ms >= 0 else 0.0 for kind, ms in stamps]
    except Exception:  # noqa: BLE001 - bytearrays, broken message objects, offsets of None
        return None


def _show(key: bytes | None) -> str:
    if key is None:
        return "None (no key)"
    text = key[:40].decode("utf-8", "replace")
    return repr(text + ("..." if len(key) > 40 else ""))
