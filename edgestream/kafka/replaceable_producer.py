"""A producer that is replaced when its librdkafka client wedges after an outage (edgestream.kafka.outage).

After a broker restart, librdkafka 2.16's clients sometimes never reconnect: no error, no delivery, their
metadata requests waiting for a usable broker that never comes, while a new client gets answers at once.
Consumers are reopened for it (edgestream.consumers.device_stream, edgestream.ps.transport.Receiver); it
hits producers too (CI, tests/system/test_kafka_outage_ps.py: the broker back after 90 s, the stream
producer and a worker's PS sender got no answer for the remaining 210 s of their budget and the run
gave up, while the consumers of the same processes were reopened and went on).

`ReplaceableProducer` holds the current librdkafka `Producer` (`producer`). `revive()` -- called by the
owner's outage probe (`ask`) or flush loop -- replaces it when it is wedged (outage_calls.Wedge: its own
metadata request fails, the outage has lasted REPLACE_AFTER_S and a new client gets an answer): the old
producer's queue is purged and its messages are produced again into a new producer with the same
settings, in their order (librdkafka reports purged messages of a partition in the order they were
produced, those in flight after the queued ones: they go first), with their topic, partition, key and
headers; none is dropped. Two things a move cannot keep: a timestamp (a moved message is stamped when it
is produced again), and exactly-once for a message that was in flight (it may have been written already:
it is sent again, a duplicate, never a loss). The owner's delivery callback (`on_delivery`) sees every
report except the purges of a move.

REPLACE_AFTER_S is longer than a consumer's REOPEN_AFTER_S: a producer whose partition's leader is cut
off is not wedged but waits for the new leader (~10 s on a KRaft cluster), with messages in flight to
the old one; replacing it then (tests/system/test_kafka_cluster_netns.py, a first version at 10 s) sent
them again after the queued ones, out of their order. A wedged client stays so for minutes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from functools import partial

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from edgestream.kafka.admin import KafkaUnavailable
from edgestream.kafka.clients import produce
from edgestream.kafka.outage import Outage
from edgestream.kafka.outage_calls import Probe, Wedge, answers

log = logging.getLogger("edgestream.kafka.producer")

#: reports of messages given up on (a move's purge, or the owner's at its stop)
PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
#: the outage a producer waits out before it may count as wedged (module doc)
REPLACE_AFTER_S = 60.0
#: the longest a move waits for the old producer's purge reports (local: served at once in practice)
PURGE_WAIT_S = 5.0
#: seconds without a delivery report, with messages queued, before `watch` asks whether Kafka answers (a
#: silent network drops no connection, so librdkafka may not say "all brokers down" for a long while)
SILENT_S = 10.0


class ReplaceableProducer:
    """The current producer of an owner (module doc). `conf`: its settings (a new one gets the same);
    `outage`: the owner's wait for Kafka (None: never replaced); `on_delivery(err, msg)`: the delivery
    callback of every message (set for all in `conf`, so a message's own callback is only needed for a
    move to keep its headers: `produce(headers=...)` sets it)."""

    def __init__(self, conf: Mapping, outage: Outage | None, security: Mapping[str, str] | None = None, *,
                 on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
                 who: str = "producer") -> None:
        self.conf = {**conf, "on_delivery": self._report}
        self.outage, self.on_delivery, self.who = outage, on_delivery, who
        self.wedge = Wedge(conf["bootstrap.servers"], security)
        self.producer = Producer(self.conf)
        self.replaced = 0       # times a wedged producer was replaced
        self.moved = 0          # messages moved to a new producer, in all
        self.last_ack = time.monotonic()  # the last successful delivery report (or the start)
        self._moving: list[tuple[Message, list | None]] | None = None
        self._probe = Probe(self.ask)

    def _report(self, err: KafkaError | None, msg: Message, headers: list | None = None) -> None:
        if self._moving is not None and err is not None and err.code() in PURGED:
            self._moving.append((msg, headers))
            return
        if err is None:  # Kafka answers: an outage ends
            self.last_ack = time.monotonic()
            if self.outage is not None and self.outage.waiting:
                self.outage.up()
        if self.on_delivery is not None:
            self.on_delivery(err, msg)

    def produce(self, topic: str, value, *, key=None, partition: int | None = None, headers=None) -> None:
        """Queue a message (waiting while the local queue is full, never dropping it: clients.produce)."""
        cb = partial(self._report, headers=headers) if headers else None
        produce(self.producer, topic, value, key=key, partition=partition, headers=headers, on_delivery=cb)

    def ask(self, timeout: float) -> object:
        """The owner's outage probe (outage_calls.Probe): this producer's metadata request; when it gets no
        answer and the producer is wedged, the producer is replaced and Kafka counts as answering."""
        try:
            return self.producer.list_topics(timeout=timeout)
        except KafkaException:
            if not self.revive(asked=True):
                raise
            return None

    def watch(self, what: str) -> None:
        """Watch Kafka while messages wait, for an owner that sends as it goes (the stream producer, a
        device's producer): during an outage, ask every PROBE_S seconds whether Kafka answers again (a
        wedged producer is replaced; KafkaUnavailable once the outage has lasted its budget); outside one,
        a queue without a delivery report for SILENT_S whose metadata request gets no answer starts one.
        A delivery ends an outage (`_report`)."""
        outage = self.outage
        if outage is None:
            return
        if outage.waiting:
            self._probe.tick(outage, what)
        elif len(self.producer) and time.monotonic() - self.last_ack >= SILENT_S:
            self.last_ack = time.monotonic()
            if not answers(self.ask):
                outage.down(what, error=f"no delivery report for {SILENT_S:g} s, no answer to a metadata request")

    def revive(self, *, asked: bool = False) -> bool:
        """Replace the producer if it is wedged (module doc); True if it was. `asked`: its own metadata
        request has just failed (else it is asked here)."""
        if self.outage is None or not self.wedge.wedged(self.outage, None if asked else self._own_answers,
                                                        after_s=REPLACE_AFTER_S):
            return False
        self.replace("it got no answer from Kafka while a new client did")
        return True

    def _own_answers(self, timeout: float) -> object:
        return self.producer.list_topics(timeout=timeout)

    def replace(self, why: str) -> int:
        """Move the queue into a new producer (module doc); returns the messages moved."""
        old = self.producer
        self._moving = moving = []
        try:
            old.purge(in_queue=True, in_flight=True, blocking=True)  # every message's report is queued now
            deadline, seen = time.monotonic() + PURGE_WAIT_S, -1
            while len(moving) != seen and time.monotonic() < deadline:  # served (poll: all that are there)
                seen = len(moving)
                old.poll(0.01)
        finally:
            self._moving = None
        # in flight means older than anything queued (per partition): those first, each group in its order
        moving.sort(key=lambda mh: mh[0].error() is None or mh[0].error().code() != KafkaError._PURGE_INFLIGHT)
        new = Producer(self.conf)
        for msg, headers in moving:
            part = msg.partition()  # None or -1: not assigned yet (the partitioner picks it, as it would have)
            produce(new, msg.topic(), msg.value(), key=msg.key(), headers=headers,
                    partition=part if part is not None and part >= 0 else None,
                    on_delivery=partial(self._report, headers=headers) if headers else None)
        self.producer = new
        self.replaced += 1
        self.moved += len(moving)
        log.warning("%s: replaced its Kafka producer (%d queued message(s) moved to the new one): %s", self.who,
                    len(moving), why)
        return len(moving)

    def flush_through(self, what: str, wait: bool = True, timeout: float | None = None) -> int:
        """Flush, waiting through an outage while its budget lasts (the messages stay queued:
        `producer_config(outage_s=)`): a second without progress counts as Kafka not answering
        (KafkaUnavailable once the budget is spent; a wedged producer is replaced), any progress as an
        answer. wait=False (a process that is ending anyway): what Kafka does not take within a second is
        left (RuntimeError, logged by the caller). `timeout`: the caller's own bound instead (a device's
        `flush(timeout)`): past it, or past the budget, the rest stays queued. Returns how many are left."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        left = len(self.producer)
        while left:
            now = self.producer.flush(1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic())))
            if now == 0:
                break
            if not wait:
                raise RuntimeError(f"{what}: {now} message(s) not acknowledged; not waiting: the process is ending")
            if deadline is not None and time.monotonic() >= deadline:
                return now
            if now < left:
                self.outage.up()
            else:
                try:
                    self.outage.down(what)
                except KafkaUnavailable:
                    if deadline is None:
                        raise
                self.revive()
            left = len(self.producer)
        return 0
