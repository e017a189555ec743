"""The parameter server's Kafka side: its topics, a sender that chunks envelopes, a receiver that
reassembles them (DESIGN.md "Kafka conventions").

Topics of run `<run>` (one partition each, so a worker's messages stay in the order it sent them):

* `<run>.ps.push`: every worker's pushes, pull requests and join requests ("hello"), keyed by worker;
  the PS reads it from the offset its checkpoint names (edgestream.ps.server);
* `<run>.ps.pull.<i>`: the PS's replies to worker i (the model, its version, stop, the coordinator's info).

They are created explicitly, with a topic-level `max.message.bytes` sized for the model: one chunk of
the model (`chunk_bytes`: the whole model when it fits, at most `wire.DEFAULT_CHUNK_BYTES`) plus the
header, never below the producer's 1 MiB batch. Both the PS and every worker create them (idempotent),
so either may start first.

Outages: given the process's `Outage` (edgestream.kafka.outage; runtime.kafka_outage_s), a `Sender` keeps
its messages in librdkafka's queue through an outage (their `message.timeout.ms` is above the budget) and
its `send` waits until they are acknowledged, and a `Receiver` treats transport errors as Kafka not
answering (never as the end of its reader): both tell the outage when the wait starts and ends, ask Kafka
every few seconds whether it answers again (kafka.outage_calls.Probe), and raise KafkaUnavailable once the
wait has lasted the budget. Without an `Outage` they behave as before (a send fails after `timeout_s`).
With one, a topic whose leader went away (one broker of a cluster) is a wait for a new leader
(kafka.leader_watch.LeaderWatch), bounded by the same budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from edgestream.kafka.admin import create_topics
from edgestream.kafka.broker import MAX_MESSAGE_BYTES
from edgestream.kafka.clients import consumer_config, producer_config
from edgestream.kafka.leader_watch import LeaderWatch
from edgestream.kafka.outage import Outage
from edgestream.kafka.outage_calls import (
    PROBE_TIMEOUT_S,
    Probe,
    answers,
    call_through,
    fresh_answers,
    on_client_error,
    retriable,
)
from edgestream.kafka.replaceable_producer import ReplaceableProducer
from edgestream.kafka.topic_names import dlq_topic, ps_topic
from edgestream.kafka.topic_settings import TopicSettings
from edgestream.ps.wire import DEFAULT_CHUNK_BYTES, Envelope, chunks

#: room for a chunk's header (run name included) and Kafka's record overhead
HEADER_ROOM = 64 * 1024
#: the producer batches up to 1 MiB: a topic must accept at least that
MIN_TOPIC_BYTES = 2 * 1024 * 1024
#: meta (loss trace, info) a message may carry beside the model's tensors
META_ROOM = 256 * 1024
#: a reader that got nothing for this many seconds checks that its consumer has not stalled (`Receiver`);
#: each reopening doubles it (up to STALL_MAX_S) until a message arrives, so a slow link cannot loop
STALL_S = 30.0
STALL_MAX_S = 600.0
#: a send not acknowledged after this many seconds asks Kafka whether it answers (a silent network
#: drops no connection, so librdkafka may not say "all brokers down" for a long while)
SLOW_SEND_S = 5.0

log = logging.getLogger("edgestream.ps.transport")


def push_topic(run: str) -> str:
    return ps_topic(run, "push")


def pull_topic(run: str, worker: int) -> str:
    return ps_topic(run, f"pull.{worker}")


def chunk_bytes(model_bytes: int) -> int:
    """The body size of one chunk for a model of `model_bytes`: the whole message when it fits."""
    return max(1024, min(DEFAULT_CHUNK_BYTES, MAX_MESSAGE_BYTES - HEADER_ROOM, int(model_bytes) + META_ROOM))


def topic_bytes(model_bytes: int) -> int:
    """The topics' `max.message.bytes` for a model of `model_bytes`."""
    return min(MAX_MESSAGE_BYTES, max(MIN_TOPIC_BYTES, chunk_bytes(model_bytes) + HEADER_ROOM))


def ensure_ps_topics(bootstrap: str, run: str, world: int, model_bytes: int,
                     security: Mapping[str, str] | None = None, *, settings: TopicSettings | None = None) -> list[str]:
    """Create the run's PS topics (and its DLQ, where rejected PS messages go) unless they exist, with the
    run's topic `settings` (replication, retention; kafka.topics); returns their names."""
    names = {push_topic(run): 1, **{pull_topic(run, i): 1 for i in range(world)}, dlq_topic(run): 1}
    create_topics(bootstrap, names, max_message_bytes=topic_bytes(model_bytes), security=security,
                  settings=settings)
    return list(names)


class DeliveryFailed(RuntimeError):
    """A message was not acknowledged by the broker."""


class SendInterrupted(RuntimeError):
    """`stop()` turned true while a send waited for Kafka (e.g. SIGTERM during an outage)."""


class Sender:
    """Sends envelopes as chunks and waits until the broker acknowledged all of them (acks=all,
    idempotent): when `send` returns, the message is durable in its topic. With an `outage`, it waits
    through an outage (module doc); `stop()` true while it waits: SendInterrupted."""

    def __init__(self, bootstrap: str, max_bytes: int, security: Mapping[str, str] | None = None, *,
                 outage: Outage | None = None, stop: Callable[[], bool] | None = None) -> None:
        self.max_bytes = int(max_bytes)
        self.outage, self.stop = outage, stop
        # replaced by a new one when its client wedges after an outage (kafka.replaceable_producer)
        self._tx = ReplaceableProducer(producer_config(
            bootstrap, security, outage_s=outage.budget_s if outage is not None else None,
            **{"linger.ms": 0, **({"error_cb": self._on_error} if outage is not None else {})}),
            outage, security, on_delivery=self._on_delivery, who="PS sender")
        self._probe = Probe(self._tx.ask)
        self._errors: list[str] = []
        # a topic's leader gone (one broker of a cluster): a wait for a new one; `_topic`: the one sent to last
        self.leader = LeaderWatch(outage, lambda t, timeout: self._producer.list_topics(t, timeout=timeout),
                                  security=security) if outage is not None else None
        self._topic = ""

    @property
    def _producer(self) -> Producer:
        return self._tx.producer

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err.str()}")

    def _on_error(self, err: KafkaError) -> None:
        on_client_error(self.outage, err, "sending")
        self.leader.on_error(err)
        log.debug("producer: %s", err)

    def send(self, topic: str, env: Envelope, timeout_s: float = 60.0, *, wait: bool = True) -> int:
        """Produce `env` to `topic` (key: the worker); returns the bytes sent (chunk values)."""
        values = chunks(env, self.max_bytes)
        key = str(env.worker).encode()
        sent = 0
        for value in values:
            self._tx.produce(topic, value, key=key)
            sent += len(value)
        self._producer.poll(0)
        self._topic = topic
        if wait:
            self.flush(timeout_s, what=f"sending to {topic}")
        return sent

    def flush(self, timeout_s: float = 60.0, what: str = "sending") -> None:
        """Wait until every message sent was acknowledged: within `timeout_s`, or, with an outage, for as
        long as Kafka answers or the outage's budget lasts."""
        if self.outage is None:
            left = self._producer.flush(timeout_s)
            if left:
                raise DeliveryFailed(f"{left} message(s) were not acknowledged within {timeout_s:g} s")
        else:
            self._flush_through(what)
        if self._errors:
            errors, self._errors = self._errors, []
            raise DeliveryFailed(f"delivery failed: {errors[0]}")

    def _flush_through(self, what: str) -> None:
        outage, t0 = self.outage, time.monotonic()
        while self._producer.flush(0.5 if outage.waiting else 0.2):
            if self.stop is not None and self.stop():
                raise SendInterrupted(f"stopped while {what} (waiting for {outage.what})")
            self.leader.check(self._topic)  # its leader gone: a wait for a new one (module doc)
            if self.leader.lost is not None:
                continue  # Kafka answers; the topic waits for its new leader (LeaderWatch bounds the wait)
            if outage.waiting:
                self._probe.tick(outage, what)
            elif time.monotonic() - t0 >= SLOW_SEND_S:
                t0 = time.monotonic()
                if not answers(self._probe.probe):  # a silent network: ask whether Kafka answers at all
                    outage.down(what, error=f"not acknowledged for {SLOW_SEND_S:g} s, no answer to a metadata "
                                "request")
        self.leader.answered()
        if outage.waiting:
            outage.up()

    def close(self) -> None:
        self._producer.flush(10.0)


@dataclass
class Raw:
    """One Kafka message read from a PS topic: its offset and value."""

    offset: int
    value: bytes | None
    key: bytes | None


class Receiver:
    """A manually assigned reader of one single-partition PS topic from a given offset (`start`:
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
