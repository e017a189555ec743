"""A reader of one single-partition topic from a given offset that rides out a Kafka outage (`Receiver`): the
parameter server's topics (edgestream.ps.transport) and a run's model versions (edgestream.edge.subscriber) are
read with it. Needs confluent-kafka only (no torch), so device-side code can use it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from edgestream.kafka.clients import consumer_config
from edgestream.kafka.leader_watch import LeaderWatch
from edgestream.kafka.outage import Outage
from edgestream.kafka.outage_calls import (
    PROBE_TIMEOUT_S,
    Probe,
    call_through,
    fresh_answers,
    on_client_error,
    retriable,
)

#: a reader that got nothing for this many seconds checks that its consumer has not stalled (`Receiver`);
#: each reopening doubles it (up to STALL_MAX_S) until a message arrives, so a slow link cannot loop
STALL_S = 30.0
STALL_MAX_S = 600.0

log = logging.getLogger("edgestream.kafka.topic_reader")


@dataclass
class Raw:
    """One Kafka message read from a topic: its offset, value and key."""

    offset: int
    value: bytes | None
    key: bytes | None


class Receiver:
    """A manually assigned reader of one single-partition topic from a given offset (`start`:
    an offset; None = the topic's current end, so only messages produced from now on are seen;
    "beginning" = its first message). With an `outage` it reads through outages (module doc).

    A reader that got nothing for STALL_S seconds asks for the topic's end: messages waiting past its
    position while its consumer returns none mean the consumer stalled, and it is reopened at its position
    (`reopened` counts it; the next check waits twice as long, until a message arrives). So is a consumer
    that gets no answer from Kafka while a new client does: after a broker restart, librdkafka 2.16's
    consumer sometimes never reconnects (seen in 2 of 6 runs of a 90 s outage, tests/system/test_kafka_outage_ps.py:
    no error, no fetch, metadata requests waiting for a usable broker while other clients had one)."""

    def __init__(self, bootstrap: str, topic: str, group: str, start: int | str | None,
                 security: Mapping[str, str] | None = None, *, outage: Outage | None = None) -> None:
        self.topic = topic
        self.outage = outage
        self.tp = TopicPartition(topic, 0)
        self._bootstrap, self._security = bootstrap, security
        extra = {"error_cb": self._on_error} if outage is not None else {}
        self._conf = consumer_config(bootstrap, group, security,
                                     **{"fetch.wait.max.ms": 5, "fetch.queue.backoff.ms": 1}, **extra)
        self.consumer = Consumer(self._conf)
        self._probe = Probe(self._ask)
        self.leader = LeaderWatch(outage, lambda t, timeout: self.consumer.list_topics(t, timeout=timeout),
                                  security=security) if outage is not None else None
        if start is None:
            offset = self._end(self.tp)
        elif start == "beginning":
            offset = OFFSET_BEGINNING
        else:
            offset = int(start)
        self.position = offset  # the next offset to read (OFFSET_BEGINNING: the topic's first)
        self.consumer.assign([TopicPartition(topic, 0, offset)])
        self._quiet_since = time.monotonic()
        self._stall_s = STALL_S
        self.reopened = 0

    def _on_error(self, err: KafkaError) -> None:
        on_client_error(self.outage, err, f"reading {self.topic}")
        self.leader.on_error(err)
        log.debug("%s: %s", self.topic, err)

    def _end(self, tp: TopicPartition, timeout_s: float = 30.0) -> int:
        """The partition's end offset (retried while a new topic's leader is being elected, and with an
        outage through it)."""
        if self.outage is not None:
            return call_through(self.outage, lambda: int(self.consumer.get_watermark_offsets(tp, timeout=5.0)[1]),
                                f"reading the end of {self.topic}")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return int(self.consumer.get_watermark_offsets(tp, timeout=5.0)[1])
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def end(self) -> int:
        """The topic's end offset now (through an outage, with one)."""
        return self._end(self.tp)

    def _ask(self, timeout: float) -> object:
        """The outage's probe: this reader's own metadata request; when it gets no answer but a new client
        does, the reader is reopened and Kafka counts as answering."""
        try:
            return self.consumer.list_topics(self.topic, timeout=timeout)
        except KafkaException:
            if not fresh_answers(self._bootstrap, self._security):
                raise
            self._reopen("it got no answer from Kafka while a new client did")
            return None

    def _reopen(self, why: str) -> None:
        position = self.position if self.position >= 0 else OFFSET_BEGINNING
        log.warning("%s: reopening the reader at %s: %s", self.topic, position, why)
        self.consumer.close()
        self.consumer = Consumer(self._conf)
        self.consumer.assign([TopicPartition(self.topic, 0, position)])
        self.reopened += 1

    def _check_stall(self) -> None:
        """After STALL_S quiet seconds: reopen a consumer that returns nothing while messages wait (class doc)."""
        now = time.monotonic()
        if now - self._quiet_since < self._stall_s:
            return
        self._quiet_since = now
        try:
            low, high = self.consumer.get_watermark_offsets(self.tp, timeout=PROBE_TIMEOUT_S, cached=False)
        except KafkaException as exc:  # no answer: a wedged reader (reopened), or an outage to tell
            if fresh_answers(self._bootstrap, self._security):
                self._reopen("it got no answer from Kafka while a new client did")
            elif self.outage is not None:
                self.outage.down(f"reading {self.topic}", error=exc.args[0].str() if exc.args else str(exc))
            return
        position = self.position if self.position >= 0 else int(low)
        if int(high) <= position:
            return
        self._reopen(f"nothing read for {self._stall_s:.0f} s although offsets {position}-{int(high) - 1} are there")
        self._stall_s = min(2 * self._stall_s, STALL_MAX_S)

    def poll(self, timeout_s: float, max_messages: int = 256) -> Iterator[Raw]:
        """Messages that arrived within `timeout_s`: returns at the first one (with whatever else is already
        fetched), so a reply is handled the moment it lands. Without an outage, transport errors other than
        end-of-partition raise; with one, a retriable error is Kafka not answering (the client retries it),
        and while a wait runs, Kafka is asked whether it answers again (KafkaUnavailable past the budget)."""
        first = self.consumer.poll(max(0.0, timeout_s))
        quiet = first is None or first.error() is not None
        if self.leader is not None and quiet:
            self.leader.check(self.topic)  # its leader gone: a wait for a new one (module doc)
        if self.leader is not None and self.leader.lost is not None:
            pass  # Kafka answers; the partition waits for its new leader (LeaderWatch bounds the wait)
        elif self.outage is not None and self.outage.waiting and quiet:
            self._probe.tick(self.outage, f"reading {self.topic}")
        elif first is None:
            self._check_stall()
        if first is None:
            return
        batch = [first, *self.consumer.consume(max_messages - 1, timeout=0)] if max_messages > 1 else [first]
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if self.outage is None or not retriable(err):
                    raise KafkaException(err)
                log.debug("%s: %s (retried by the client)", self.topic, err)
                continue
            if self.leader is not None and self.leader.lost is not None:
                self.leader.answered()
            if self.outage is not None and self.outage.waiting:
                self.outage.up()  # a message came: Kafka answers
            self.position, self._quiet_since, self._stall_s = int(msg.offset()) + 1, time.monotonic(), STALL_S
            yield Raw(int(msg.offset()), msg.value(), msg.key())

    def close(self) -> None:
        self.consumer.close()
