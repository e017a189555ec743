"""`DeviceProducer`: publish one edge device's samples into a run's stream, from device-side Python.

    from edgestream import DeviceProducer
    with DeviceProducer("broker:9092", "myrun-ddl-abc123", device=3, rate=50) as dev:
        for x, y in sensor():             # x: a numpy array (or list) of a wire dtype, 1-4 dims
            dev.send(x, y)                # y: a class index (int), or a float / float vector target

Each `send` encodes one sample with the wire format (`edgestream.data.wire.encode_sample`, version 2,
docs/wire-format.md) and queues it as one message on the device's stream (`StreamLayout.stream`:
`<run>.dev.<device>`, or partition device % P of `<run>.streams` with the partitioned layout), keyed by
the device id in decimal ASCII (b"3"). Sequence numbers count up from `start_seq` (0; "resume": after
the last sequence number in the topic). The Kafka producer is edgestream's own configuration
(`kafka.clients.producer_config`: idempotent, acks=all, batching; `security` passes through), so a
retried message is never written twice and a device's messages stay in order.

Pacing (`rate`, samples/s): sample k of this producer (k = 0 for its first `send`) goes out no earlier
than start + k / rate, start being the monotonic time of the first `send`; `send` waits (serving delivery
reports meanwhile). The schedule is absolute: a caller slower than `rate` is never delayed, and after a
pause the samples it then sends go out at once until the schedule is reached again, so `rate` bounds the
average rate from the start. None: every sample goes out as it is sent.

Nothing is silently lost: a message the broker refuses (or that times out) is counted, and the next
`send`, `flush` or `close` raises `DeliveryError` with the count and the first error, once per failure.
`close` flushes; what is still unacknowledged after its timeout is given up and raised the same way.

Kafka away (`outage_s`, 300 s by default; edgestream.kafka.outage): a device's link drops, a broker
restarts. `send` goes on queueing its samples in librdkafka's local queue (their `message.timeout.ms` is
above `outage_s`, so none times out meanwhile) and they are delivered, in order and once each, when Kafka
answers again; once the queue is full, `send` waits for room. An outage is said in the log (logger
edgestream.kafka.outage) once it has lasted 2 s, and its end. Past `outage_s`, `send` raises
`KafkaUnavailable` (one line: the address and the budget) and that sample is not sent; what was queued stays
queued. A client that does not come back after the outage (librdkafka 2.16 sometimes never reconnects while a
new client would) is replaced, its queue moved to the new one (edgestream.kafka.replaceable_producer).
`outage_s=None`: librdkafka's own defaults (a message times out after 300 s), nothing watched.

Device-side Python needs numpy and confluent-kafka, not torch: nothing here imports it.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Producer

from edgestream.data import wire
from edgestream.data.validate import DeviceRule, SampleSpec
from edgestream.kafka.admin import KafkaUnavailable
from edgestream.kafka.broker import MAX_MESSAGE_BYTES
from edgestream.kafka.clients import producer_config
from edgestream.kafka.layout import StreamLayout
from edgestream.kafka.outage import Outage
from edgestream.kafka.outage_calls import on_client_error
from edgestream.kafka.replaceable_producer import PURGED, ReplaceableProducer
from edgestream.kafka.stream_ends import stream_ends

#: the input dtypes the wire carries (its dtype codes), as numpy names
WIRE_DTYPES = tuple(str(dt.newbyteorder("=")) for dt in wire.DTYPE_CODES.values())
#: the float target dtypes the wire carries
TARGET_DTYPES = tuple(str(dt.newbyteorder("=")) for dt in wire.TARGET_DTYPES.values())
_I32_MAX, _U32_MAX, _U64_MAX = 2**31 - 1, 2**32 - 1, 2**64 - 1


class DeliveryError(RuntimeError):
    """Samples the broker did not acknowledge: `failed` refused or timed out, `unacknowledged` given up
    at `close`; `first_error` says why the first one failed."""

    def __init__(self, failed: int, unacknowledged: int, first_error: str | None, sent: int) -> None:
        self.failed, self.unacknowledged, self.first_error = failed, unacknowledged, first_error
        parts = []
        if failed:
            parts.append(f"{failed} of {sent} samples failed to deliver (first: {first_error})")
        if unacknowledged:
            parts.append(f"{unacknowledged} of {sent} samples were not acknowledged before close's timeout "
                         "and were given up")
        super().__init__("; ".join(parts))


def _check_x(x: Any) -> np.ndarray:
    """`x` as an array of a wire dtype with 1-4 dims, each >= 1; ValueError naming what is allowed."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as exc:  # e.g. a ragged list
        raise ValueError(f"x: not an array ({str(exc).splitlines()[0]}); must be an array-like of numbers") from None
    try:
        wire.dtype_code(a.dtype)
    except wire.WireError:
        raise ValueError(f"x: dtype {a.dtype} is not allowed; must be one of {', '.join(WIRE_DTYPES)}") from None
    if not 1 <= a.ndim <= wire.MAX_NDIM or 0 in a.shape or any(d > _U32_MAX for d in a.shape):
        raise ValueError(f"x: shape {a.shape} is not allowed; must have 1-{wire.MAX_NDIM} dimensions, each >= 1")
    return a


def _check_y(y: Any) -> int | np.ndarray:
    """`y` as a class index (an int) or a float target array of shape () or (K,); ValueError otherwise."""
    if isinstance(y, bool | np.bool_):
        raise ValueError("y: a bool is not allowed; must be a class index (an int >= 0) or a float / float vector")
    a = np.asarray(y) if isinstance(y, np.ndarray | np.generic) else None
    if isinstance(y, numbers.Integral) or (a is not None and a.ndim == 0 and a.dtype.kind in "iu"):
        k = int(y)
        if not 0 <= k <= _I32_MAX:
            raise ValueError(f"y: class index {k} is not allowed; must be in [0, 2**31)")
        return k
    if a is None:  # a Python float or a list: float32 on the wire (encode_sample's rule)
        try:
            a = np.asarray(y, dtype=np.float32)
        except (ValueError, TypeError):
            raise ValueError(f"y: {type(y).__name__} {str(y)[:40]} is not allowed; must be a class index (an int "
                             ">= 0) or a float / float vector") from None
    elif a.dtype.kind != "f" or a.dtype.newbyteorder("=").itemsize not in (2, 4, 8):
        raise ValueError(f"y: an array of dtype {a.dtype} is not allowed; must be a class index (an int >= 0) or "
                         f"a float target of dtype {', '.join(TARGET_DTYPES)}")
    if a.ndim > 1 or (a.ndim == 1 and not 1 <= len(a) <= _I32_MAX):
        raise ValueError(f"y: a float target of shape {a.shape} is not allowed; must be a scalar () or a vector "
                         "(K,), K >= 1")
    if not np.isfinite(a).all():
        raise ValueError(f"y: a float target must be finite (a run's consumers refuse NaN and infinity), got "
                         f"{str(a.tolist())[:60]}")
    return a


def _layout_of(x: np.ndarray, y: int | np.ndarray) -> tuple:
    """What every sample of one stream shares: the input's dtype and shape, the target's kind, dtype, shape."""
    t = None if isinstance(y, int) else (y.dtype.newbyteorder("<"), y.shape)
    return x.dtype.newbyteorder("<"), x.shape, t


def _describe(layout: tuple) -> str:
    dt, shape, t = layout
    target = "a class index" if t is None else f"a {t[0].name} target of shape {t[1]}"
    return f"x {dt.name} {shape} with {target}"


class DeviceProducer:
    """Publish device `device`'s samples into run `run` (module docstring).

    `bootstrap`: the brokers ("host:port[,host:port]"). `run`: the run's name as its topics have it
    (`<run>.dev.<i>`). `rate`: samples/s pacing (None: unpaced). `security`: librdkafka client settings
    (security.protocol, sasl.*, ssl.*: a run's `runtime.kafka_client`). `layout`: the run's `StreamLayout`
    (None: per-device topics), or `partitions`: the partitioned layout's partition count. `start_seq`: the
    first sequence number (an int, or "resume": after the last one in the device's stream). `spec`: the
    run's `SampleSpec`, to refuse at `send` what the run's consumers would dead-letter (class range, dtype,
    shape); without it, every sample must have the first one's dtype, shape and kind of target.
    `producer_overrides`: librdkafka settings on top of edgestream's (not the idempotence, acks).
    `outage_s`: how long it waits for an unreachable Kafka, its samples queued (module doc; None: not at all).

    The device's topic must exist (the run creates its topics; DESIGN.md: never auto-created): it is
    looked up within `timeout_s`, and a missing topic is a ValueError naming it.
    """

    def __init__(self, bootstrap: str, run: str, device: int, *, rate: float | None = None,
                 security: Mapping[str, str] | None = None, layout: StreamLayout | None = None,
                 partitions: int | None = None, start_seq: int | Literal["resume"] = 0, spec: SampleSpec | None = None,
                 producer_overrides: Mapping[str, Any] | None = None, timeout_s: float = 30.0,
                 outage_s: float | None = 300.0) -> None:
        if not isinstance(run, str) or not run:
            raise ValueError(f"run: {run!r} is not allowed; must be the run's name (its topics' prefix)")
        if isinstance(device, bool) or not isinstance(device, numbers.Integral) or not 0 <= device <= _U32_MAX:
            raise ValueError(f"device: {device!r} is not allowed; must be an int in [0, 2**32)")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, numbers.Real)
                                 or not math.isfinite(rate) or rate <= 0):
            raise ValueError(f"rate: {rate!r} is not allowed; must be a number of samples/s > 0, or None (unpaced)")
        if start_seq != "resume" and (isinstance(start_seq, bool) or not isinstance(start_seq, numbers.Integral)
                                      or not 0 <= start_seq <= _U64_MAX):
            raise ValueError(f"start_seq: {start_seq!r} is not allowed; must be an int in [0, 2**64) or 'resume'")
        if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, numbers.Integral)
                                       or partitions < 1):
            raise ValueError(f"partitions: {partitions!r} is not allowed; must be the partitioned layout's partition "
                             "count (an int >= 1), or None (per-device topics)")
        if outage_s is not None and (isinstance(outage_s, bool) or not isinstance(outage_s, numbers.Real)
                                     or not math.isfinite(outage_s) or outage_s <= 0):
            raise ValueError(f"outage_s: {outage_s!r} is not allowed; must be a number of seconds > 0, or None "
                             "(librdkafka's own timeouts)")
        if layout is not None and partitions is not None:
            raise ValueError("layout, partitions: give one of them (partitions is the partitioned layout's count)")
        if layout is None:
            layout = StreamLayout(run, int(device) + 1, partitions)
        elif layout.run != run:
            raise ValueError(f"layout: it is run {layout.run!r}'s, not {run!r}'s")
        bad = {k for k in (producer_overrides or {}) if k in ("enable.idempotence", "acks")}
        if bad:
            raise ValueError(f"producer_overrides: {', '.join(sorted(bad))} cannot be changed (the producer is "
                             "idempotent, acks=all)")
        self.bootstrap, self.run, self.device = bootstrap, run, int(device)
        self.rate = None if rate is None else float(rate)
        self.layout, self.spec = layout, spec
        self._rule = DeviceRule(self.device, self.device + 1)
        self.topic, self.partition = layout.stream(self.device)
        self.key: bytes = layout.key(self.device)
        #: counts of samples: queued by `send`, acknowledged by the broker, failed to deliver, given up at close
        self.sent = self.delivered = self.failed = self.unacknowledged = 0
        self.first_error: str | None = None
        self._reported = (0, 0)  # (failed, unacknowledged) already raised
        self._layout: tuple | None = None
        self._start: float | None = None
        self._closed = False
        #: this device's wait for Kafka (module doc); None: not watched
        self.outage = Outage(bootstrap, float(outage_s), field="outage_s") if outage_s is not None else None
        self._what = f"sending device {self.device}'s samples"  # what an outage line says it was doing
        extra = {"error_cb": self._on_error} if self.outage is not None else {}
        conf = producer_config(bootstrap, security, outage_s=outage_s, **{**extra, **dict(producer_overrides or {})})
        # replaced by a new one when its client wedges after an outage (kafka.replaceable_producer)
        self._tx = ReplaceableProducer(conf, self.outage, security, on_delivery=self._on_delivery,
                                       who=f"device {self.device}")
        try:
            self._check_topic(timeout_s)
            if start_seq == "resume":
                start_seq = stream_ends(bootstrap, run, [self.device], security, timeout_s, layout=layout)[self.device]
        except BaseException:
            self.producer.flush(0)
            raise
        #: the sequence number the next `send` gives its sample
        self.next_seq: int = int(start_seq)

    @property
    def producer(self) -> Producer:
        """The current librdkafka producer (a new one after a wedged one was replaced)."""
        return self._tx.producer

    def _on_error(self, err: KafkaError) -> None:
        on_client_error(self.outage, err, self._what)

    def _check_topic(self, timeout_s: float) -> None:
        try:
            md = self.producer.list_topics(self.topic, timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailable(f"bootstrap {self.bootstrap}: no broker answered within {timeout_s:g} s "
                                   f"({exc.args[0].str() if exc.args else exc})") from None
        t = md.topics.get(self.topic)
        if t is None or t.error is not None:
            why = t.error.str() if t is not None and t.error is not None else "not in the broker's metadata"
            raise ValueError(f"topic {self.topic}: {why}; the run creates its topics (edgestream produce / run, or "
                             "an administrator: docs/runtime.md), a device does not")
        if self.partition not in t.partitions:
            raise ValueError(f"topic {self.topic} has {len(t.partitions)} partitions; device {self.device} writes "
                             f"partition {self.partition} (layout: {self.layout.partitions} partitions)")

    # ------------------------------------------------------------------ sending
    def send(self, x: Any, y: Any, *, produce_time: float | None = None) -> int:
        """Queue one sample: `x` (an array-like of a wire dtype, 1-4 dims; a list becomes numpy's default
        int64 / float64) and its target `y`: a class index (an int >= 0), or a float target -- a float or a
        float vector (K,); numpy floats keep their dtype (float16/32/64), Python floats and lists travel as
        float32. `produce_time`: unix seconds (None: now, after the pacing wait). Returns the sample's
        sequence number. Raises ValueError (one line, naming the argument) for a sample the wire or the
        run does not take, DeliveryError when earlier samples failed, KafkaUnavailable when Kafka has not
        answered for `outage_s` (this one is then not sent)."""
        if self._closed:
            raise RuntimeError(f"DeviceProducer of device {self.device}: closed")
        a = _check_x(x)
        t = _check_y(y)
        got = _layout_of(a, t)
        if self._layout is not None and got != self._layout and self.spec is None:
            raise ValueError(f"x, y: {_describe(got)} differs from this stream's first sample "
                             f"({_describe(self._layout)}); a run's samples share one dtype, shape and kind of target")
        if produce_time is not None and (isinstance(produce_time, bool) or not isinstance(produce_time, numbers.Real)):
            raise ValueError(f"produce_time: {produce_time!r} is not allowed; must be unix seconds (a number) or None")
        size = wire.HEADER_SIZE + a.nbytes + (0 if isinstance(t, int) else t.nbytes)
        if size > MAX_MESSAGE_BYTES:
            raise ValueError(f"x: {a.dtype} {a.shape} makes a {size}-byte message, over the {MAX_MESSAGE_BYTES}-byte "
                             "limit of a sample")
        if self.spec is not None:  # what the run's consumers would refuse (DLQ reasons: docs/wire-format.md)
            reason = self.spec.problem(wire.encode_sample(a, t, self.device, 0, 0.0), self._rule)
            if reason is not None:
                raise ValueError(f"x, y: {_describe(got)} is not a sample of this run ({reason}; the run's "
                                 f"spec: {self.spec})")
        self._raise_failures()
        self._watch()
        self._pace()
        seq = self.next_seq
        now = time.time() if produce_time is None else float(produce_time)
        value = wire.encode_sample(a, t, self.device, seq, now)
        while True:  # the local queue full (Kafka away or slower than the device): wait for room, never drop
            try:
                self.producer.produce(self.topic, value, key=self.key, partition=self.partition)
                break
            except BufferError:
                self._watch()
                self.producer.poll(0.05)
        self.producer.poll(0)  # serve delivery reports as we go
        self.next_seq = seq + 1
        self.sent += 1
        if self._layout is None:
            self._layout = got
        return seq

    def _pace(self) -> None:
        """Wait until sample `sent` is due: start + sent / rate (module docstring)."""
        if self.rate is None:
            return
        now = time.monotonic()
        if self._start is None:
            self._start = now
            return
        due = self._start + self.sent / self.rate
        while now < due:
            self.producer.poll(due - now)  # returns early when it served a delivery report
            now = time.monotonic()

    def _watch(self) -> None:
        """During an outage: does Kafka answer again? (KafkaUnavailable past `outage_s`; a wedged client
        is replaced.) Outside one: a queue silent for long starts one (ReplaceableProducer.watch)."""
        self._tx.watch(self._what)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.delivered += 1
        elif err.code() in PURGED:
            self.unacknowledged += 1
        else:
            self.failed += 1
            if self.first_error is None:
                try:
                    seq = f"seq {wire.decode_sample(msg.value()).seq}"
                except wire.WireError:  # pragma: no cover - we wrote it
                    seq = "a sample"
                self.first_error = f"{msg.topic()} [{msg.partition()}] {seq}: {err.str()}"

    def _raise_failures(self) -> None:
        """DeliveryError for failures not raised before (each failure is raised once)."""
        now = (self.failed, self.unacknowledged)
        if now != self._reported:
            f0, u0 = self._reported
            self._reported = now
            raise DeliveryError(self.failed - f0, self.unacknowledged - u0, self.first_error, self.sent)

    # ------------------------------------------------------------------ ending
    def flush(self, timeout: float = 30.0) -> int:
        """Wait up to `timeout` s for the queued samples' acknowledgements; returns how many are still
        queued (0: every sample sent was acknowledged or failed). DeliveryError if some failed."""
        remaining = self._flush(timeout)
        self._raise_failures()
        return remaining

    def _flush(self, timeout: float) -> int:
        """Flush for up to `timeout` s (through an outage: a client wedged after it is replaced and its queue
        moved; the timeout still bounds the wait); returns how many are still queued."""
        if self.outage is None:
            return self.producer.flush(max(0.0, timeout))
        return self._tx.flush_through(self._what, timeout=timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Flush for up to `timeout` s, give up on what is still unacknowledged, and stop. DeliveryError when
        some sample failed or was given up. Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._flush(timeout):
            self.producer.purge(in_queue=True, in_flight=True, blocking=False)
            self.producer.flush(1.0)  # their reports: purged (unacknowledged)
        self._raise_failures()

    def __enter__(self) -> DeviceProducer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except DeliveryError as err:  # the exception under way stays the one raised
            exc.add_note(f"DeviceProducer.close: {err}")

    def __repr__(self) -> str:
        rate = f"{self.rate:g}/s" if self.rate is not None else "unpaced"
        return (f"DeviceProducer(device {self.device} -> {self.topic} [{self.partition}], {rate}, next_seq "
                f"{self.next_seq}, sent {self.sent}, delivered {self.delivered}, failed {self.failed})")


__all__ = ["DeliveryError", "DeviceProducer", "TARGET_DTYPES", "WIRE_DTYPES"]
