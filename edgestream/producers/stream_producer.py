"""Paced per-device producers: one process drives many device topics at their rates S_i(t).

Every device streams its shard (seeded shuffled order, epoch after epoch) into `<run>.dev.<i>` (or, with
the partitioned layout, its partition of `<run>.streams`, keyed by the device: kafka/layout.py); sample
k of device i is sent when the integral of S_i reaches k (producers/schedule.py), against one
monotonic clock. The producer is idempotent (acks=all), batches (never flushes per message), handles
back-pressure by polling and retrying (never drops), and on stop flushes for a bounded time and reports
exactly what the broker acknowledged per device, and what it did not.

Restarted under an existing run id, it continues each device's stream after the last sequence number
in its topic (kafka/stream_ends.py): sample k stays sample k (same dataset index, same point of the
rate schedule), so a crashed producer can be restarted without duplicates.

Kafka outages (`outage_s`: runtime.kafka_outage_s; edgestream.kafka.outage): the producer keeps its rate
schedule while Kafka is away. Samples that fall due are stamped and queued in librdkafka's local queue
(their `message.timeout.ms` is above the budget, so none fails) and delivered, in order and once each
(idempotent producer), when Kafka answers again; if the local queue fills first, the producer pauses and
sends the samples due meanwhile as soon as there is room (the schedule is absolute: it catches up, at most
`max_burst` per device per pass). It says when the wait starts and ends. Past the budget it stops streaming
(`ProducerSummary.error`), flushes for its flush timeout and reports what the broker did not acknowledge.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from confluent_kafka import KafkaError, Producer

from edgestream.data.order import ShardOrder
from edgestream.data.serde import SampleSerde
from edgestream.kafka.admin import KafkaUnavailable
from edgestream.kafka.clients import producer_config
from edgestream.kafka.layout import StreamLayout
from edgestream.kafka.outage import Outage
from edgestream.kafka.outage_calls import WaitLines, on_client_error
from edgestream.kafka.replaceable_producer import PURGED, ReplaceableProducer
from edgestream.kafka.stream_ends import stream_ends
from edgestream.kafka.topic_provision import ensure_run_topics
from edgestream.kafka.topic_settings import TopicSettings
from edgestream.producers.restart import claim_run
from edgestream.producers.schedule import due_count
from edgestream.streams.drift import Drift, DriftedOrder


@dataclass
class DeviceStats:
    """What one device's stream did: counts are samples; `delivered` is what the broker acknowledged,
    `failed` what it refused (or what timed out), `unacknowledged` what was sent but never confirmed
    either way when the producer gave up waiting (it may or may not be in the topic)."""

    device: int
    target_rate: float
    start_seq: int = 0
    produced: int = 0
    delivered: int = 0
    failed: int = 0
    bytes: int = 0
    first_ack: bytes | None = None  # values of the first and last samples the broker acknowledged
    last_ack: bytes | None = None
    window_start: float = 0.0
    window_delivered: int = 0
    last_rate: float = 0.0

    @property
    def unacknowledged(self) -> int:
        return self.produced - self.delivered - self.failed

    def as_dict(self, elapsed: float) -> dict:
        return {"device": self.device, "target_rate": round(self.target_rate, 3), "start_seq": self.start_seq,
                "produced": self.produced, "delivered": self.delivered, "failed": self.failed,
                "unacknowledged": self.unacknowledged, "bytes": self.bytes,
                "effective_rate": round(self.delivered / elapsed, 3) if elapsed > 0 else 0.0,
                "seq_range": self.seq_range}

    @property
    def seq_range(self) -> list[int]:
        """[first, last] sequence number acknowledged. The producer is idempotent and a device is one
        partition, so acknowledgements come in sequence order; any `failed` ones are gaps inside."""
        if not self.delivered:
            return []
        return [SampleSerde.header(self.first_ack).seq, SampleSerde.header(self.last_ack).seq]


@dataclass
class ProducerSummary:
    run: str
    bootstrap: str
    devices: list[dict] = field(default_factory=list)
    duration_s: float = 0.0
    produced: int = 0
    delivered: int = 0
    failed: int = 0
    unacknowledged: int = 0
    first_error: str | None = None
    kafka_waits: int = 0        # outages the producer waited through (or gave up in)
    kafka_wait_s: float = 0.0   # seconds it waited for Kafka in all
    error: str | None = None    # why it stopped by itself: Kafka away past runtime.kafka_outage_s

    @property
    def complete(self) -> bool:
        """Every sample produced was acknowledged by the broker."""
        return self.failed == 0 and self.unacknowledged == 0

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=None)


class StreamProducer:
    """Drive `devices` of a run: `x[i]`, `y[i]` are the dataset arrays (y: integer class indices, or float
    targets [N] / [N, K]), `shards[d]` device d's indices.

    `encode(x, target, device, seq, produce_time) -> bytes` is the run's `SampleSerde` (edgestream.data.serde;
    any callable with its `encode` signature, e.g. a `SampleEncoder`, works too).
    `rate_model` provides cumulative(device, t), due_time(device, k) and base_rate(device). `drift`: the plan's
    `drift_scenario` (edgestream.streams.drift; None: the samples are the dataset's as they are).

    `resume` (default): continue each device's stream after the last sequence number in its topic
    (a fresh run starts at 0). `run_config` (the plan's `stream_identity`): when given, the
    run's `<run>.meta` topic pins it, and a different one is refused with RunConfigConflict before any
    device topic is created. `outage_s`: ride out Kafka outages of up to that long (module doc); `note`:
    where the lines saying so go besides the log (None: no outage handling, as before). `topic_settings`:
    the run's kafka.topics resolved (edgestream.kafka.topic_settings): what its meta and device topics are
    created with, or checked against (create: false); None: replication factor 1 (tests).
    """

    def __init__(self, bootstrap: str, run: str, devices: Sequence[int], x: np.ndarray, y: np.ndarray,
                 shards: Sequence[np.ndarray], rate_model, encode: Callable[..., bytes], *, seed: int = 0,
                 security: dict | None = None, producer_overrides: dict | None = None,
                 create_topics: bool = True, resume: bool = True, run_config: dict | None = None,
                 outage_s: float | None = None, note: Callable[[str], None] | None = None,
                 layout: StreamLayout | None = None, topic_settings: TopicSettings | None = None,
                 drift: Drift | None = None) -> None:
        self.bootstrap, self.run, self.devices = bootstrap, run, list(devices)
        self.layout = layout if layout is not None else StreamLayout(run, len(shards))
        self.x, self.y, self.rates, self.encode = x, y, rate_model, encode
        self._class_targets = np.asarray(y).dtype.kind in "iub"
        self.orders = {d: ShardOrder(shards[d], seed, d) for d in self.devices}
        #: the run's drift scenarios (edgestream.streams.drift): from `first[d]` on, device d's samples change
        self.drift, self._drift_from = drift, (drift.first if drift is not None else {})
        for d in self.devices:
            if drift is not None and drift.picks(d):
                self.orders[d] = DriftedOrder(self.orders[d], drift, d)
        self.topics = {d: self.layout.stream(d) for d in self.devices}  # (topic, partition)
        self.stats = {d: DeviceStats(d, float(rate_model.base_rate(d))) for d in self.devices}
        if run_config is not None:
            claim_run(bootstrap, run, run_config, security, settings=topic_settings)
        if create_topics:
            ensure_run_topics(bootstrap, run, self.devices, security, layout=self.layout, settings=topic_settings)
        #: per device, the first sequence number this process sends (the stream's end when it started)
        self.start = (stream_ends(bootstrap, run, self.devices, security, layout=self.layout) if resume
                      else dict.fromkeys(self.devices, 0))
        for d, k in self.start.items():
            self.stats[d].start_seq = k
        self.waits = WaitLines("producer", echo=note)
        self.outage = Outage(bootstrap, outage_s, listener=self.waits) if outage_s is not None else None
        self.gave_up: str | None = None  # the line of an outage past the budget, once the producer gave up
        extra = {"error_cb": self._on_error} if self.outage is not None else {}
        # replaced by a new one when its client wedges after an outage (kafka.replaceable_producer)
        self._tx = ReplaceableProducer(producer_config(bootstrap, security, outage_s=outage_s,
                                                       **{**extra, **(producer_overrides or {})}),
                                       self.outage, security, on_delivery=self._on_delivery)
        self._keys = {d: self.layout.key(d) for d in self.devices}
        self._first_error: str | None = None
        self.started_at: float | None = None

    @property
    def producer(self) -> Producer:
        """The current librdkafka producer (a new one after a wedged one was replaced)."""
        return self._tx.producer

    def _on_error(self, err: KafkaError) -> None:
        on_client_error(self.outage, err, "streaming")

    def _on_delivery(self, err, msg) -> None:
        st = self.stats[int(msg.key())]
        if err is None:  # (an outage ends: ReplaceableProducer)
            if not st.delivered:
                st.first_ack = msg.value()
            st.last_ack = msg.value()
            st.delivered += 1
            st.window_delivered += 1
        elif err.code() in PURGED:
            pass  # given up on at stop: stays counted as unacknowledged (produced - delivered - failed)
        else:
            st.failed += 1
            if self._first_error is None:
                self._first_error = f"{msg.topic()}: {err.str()}"

    def _kafka_gone(self) -> bool:
        """Watch Kafka while samples wait (module doc): True once an outage has lasted the budget."""
        try:
            self._tx.watch("streaming")  # (kafka.replaceable_producer: probes, silence, a wedged client)
        except KafkaUnavailable as exc:
            self.gave_up = str(exc)
            return True
        return False

    def _drifted(self, d: int, lo: int, hi: int) -> tuple[int, np.ndarray, np.ndarray] | None:
        """(lo, inputs, targets) of device d's samples [lo, hi) as its drift scenarios make them, in one go per
        pass (vectorised: the per-sample cost of a scenario is paid once per pass); None when none changes."""
        if hi <= self._drift_from.get(d, hi):
            return None
        ks = np.arange(lo, hi, dtype=np.int64)
        order = self.orders[d]
        idx = order.indices(lo, hi) if isinstance(order, DriftedOrder) else \
            np.fromiter((order.index(k) for k in range(lo, hi)), dtype=np.int64, count=hi - lo)
        x, y = self.drift.apply(d, ks, self.x[idx], self.y[idx])
        return lo, x, y

    def _send(self, d: int, k: int, now: float, should_stop: Callable[[], bool],
              drifted: tuple[int, np.ndarray, np.ndarray] | None = None) -> bool:
        """Queue sample k of device d (taken from `drifted`, `_drifted`'s samples of the pass, when given); False
        (nothing queued) if stopped while the local queue was full."""
        if drifted is not None:
            x, y = drifted[1][k - drifted[0]], drifted[2][k - drifted[0]]
        else:
            idx = self.orders[d].index(k)
            x, y = self.x[idx], self.y[idx]  # a class index (an int on the wire), or a float target as it is
        value = self.encode(x, int(y) if self._class_targets else y, d, k, now)
        topic, partition = self.topics[d]
        while True:
            try:
                self.producer.produce(topic, value=value, key=self._keys[d], partition=partition)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry; never drop
                if should_stop() or self._kafka_gone():  # e.g. the broker is down and the queue filled up
                    return False
                self.producer.poll(0.01)
        st = self.stats[d]
        st.produced += 1
        st.bytes += len(value)
        return True

    def run_for(self, duration: float | None = None, should_stop: Callable[[], bool] = lambda: False,
                report: Callable[[dict], None] | None = None, report_every_s: float = 5.0,
                tick_s: float = 0.002, max_burst: int = 256, flush_timeout_s: float = 15.0) -> ProducerSummary:
        """Stream until `duration` seconds pass or `should_stop()`; then flush and summarise.

        Device d continues at its stream's end `start[d]`, on its own rate schedule from the point
        where that sample is due (tau_d = due_time(d, start[d])), so sample k keeps its place in S_i's
        schedule across restarts. The final flush waits at most `flush_timeout_s` seconds; what the
        broker has not acknowledged by then is given up and reported as `unacknowledged` (never
        raised): the summary says exactly what was acknowledged. `report_every_s` <= 0: no reports.
        `tick_s`: the shortest wait between two passes while on schedule (a sample goes out up to a tick after
        it is due, stamped when it is sent); `max_burst`: the most samples of a device per pass.
        """
        t0 = time.monotonic()
        self.started_at = t0
        next_report = report_every_s if report_every_s > 0 else float("inf")
        sent = dict(self.start)
        tau = {d: self.rates.due_time(d, sent[d]) for d in self.devices}  # device clock at our t = 0
        for st in self.stats.values():
            st.window_start = 0.0
        stopped = False
        while not stopped:
            now = time.monotonic() - t0
            if should_stop() or (duration is not None and now >= duration) or self._kafka_gone():
                break
            horizon = now if duration is None else min(now, duration)
            next_due = float("inf")
            for d in self.devices:
                # at most `max_burst` per device per pass, so an overloaded producer (behind its
                # schedule) still round-robins devices and sees the clock and stop requests
                due = min(due_count(self.rates, d, tau[d] + horizon), sent[d] + max_burst)
                if due > sent[d]:
                    wall = time.time()  # produce time stamped once per device pass
                    drifted = self._drifted(d, sent[d], due) if self.drift is not None else None
                    for k in range(sent[d], due):
                        if not self._send(d, k, wall, should_stop, drifted):
                            sent[d], due, stopped = k, k, True
                            break
                    sent[d] = due
                    if stopped:
                        break
                next_due = min(next_due, self.rates.due_time(d, sent[d]) - tau[d])
            if report is not None and now >= next_report:
                report(self._window_report(now))
                next_report += report_every_s
            # until the next sample is due, but at least a tick (behind the schedule: not at all): a wait under
            # librdkafka's 1 ms resolution returns at once, and at 1,000 samples/s the loop spun a core that way
            ahead = next_due - (time.monotonic() - t0)
            self.producer.poll(min(max(ahead, tick_s), tick_s * 5) if ahead > 0 else 0)
        remaining = self.producer.flush(max(0.0, flush_timeout_s))
        if remaining:
            # give up on the rest: their delivery reports come back as purged (counted unacknowledged)
            self.producer.purge(in_queue=True, in_flight=True, blocking=False)
            self.producer.flush(1.0)
        elapsed = time.monotonic() - t0
        summary = ProducerSummary(self.run, self.bootstrap, duration_s=round(elapsed, 3),
                                  first_error=self._first_error)
        if self.outage is not None:
            summary.kafka_waits = self.waits.waits
            summary.kafka_wait_s = round(self.waits.total_s(self.outage), 3)
            summary.error = self.gave_up
        for d in self.devices:
            st = self.stats[d]
            summary.devices.append(st.as_dict(elapsed))
            summary.produced += st.produced
            summary.delivered += st.delivered
            summary.failed += st.failed
            summary.unacknowledged += st.unacknowledged
        return summary

    def _window_report(self, now: float) -> dict:
        rates = []
        for st in self.stats.values():
            span = max(now - st.window_start, 1e-9)
            st.last_rate = st.window_delivered / span
            st.window_delivered, st.window_start = 0, now
            rates.append((st.device, st.target_rate, st.last_rate))
        stats = self.stats.values()
        return {"t": round(now, 1), "devices": rates, "produced": sum(s.produced for s in stats),
                "delivered": sum(s.delivered for s in stats), "failed": sum(s.failed for s in stats),
                "unacknowledged": sum(s.unacknowledged for s in stats), "queued": len(self.producer),
                "waiting_s": round(self.outage.length_s(), 1) if self.outage is not None and self.outage.waiting
                else None}


def parse_device_range(text: str | None, count: int) -> list[int]:
    """'0-15', '3', '0-3,8-11' -> device ids (all devices when None); ValueError names the bad part."""
    if not text:
        return list(range(count))
    out: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"--devices {text!r}: {part!r} is not a device number or range like 0-15") from None
        if a > b or a < 0 or b >= count:
            raise ValueError(f"--devices {text!r}: {part!r} is outside 0-{count - 1} (devices.count is {count})")
        out.extend(range(a, b + 1))
    return sorted(set(out))
