"""A producer that waits until the broker acknowledged what it sent, through a Kafka outage (`TopicWriter`):
the parameter server's sender (edgestream.ps.transport.Sender: envelopes as chunks) and the model-version
publisher (edgestream.publish) send with it.

With an `Outage` (edgestream.kafka.outage; runtime.kafka_outage_s), it keeps its messages in librdkafka's queue
through an outage (their `message.timeout.ms` is above the budget) and `send_values` waits until they are
acknowledged, telling the outage when the wait starts and ends and asking Kafka every few seconds whether it
answers again (kafka.outage_calls.Probe); KafkaUnavailable once the wait has lasted the budget. A topic whose
leader went away (one broker of a cluster) is a wait for a new leader (kafka.leader_watch.LeaderWatch), bounded
by the same budget. Without an `Outage`, a send fails after `timeout_s`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import KafkaError, Producer

from edgestream.kafka.clients import producer_config
from edgestream.kafka.leader_watch import LeaderWatch
from edgestream.kafka.outage import Outage
from edgestream.kafka.outage_calls import Probe, answers, on_client_error
from edgestream.kafka.replaceable_producer import ReplaceableProducer

#: a send not acknowledged after this many seconds asks Kafka whether it answers (a silent network
#: drops no connection, so librdkafka may not say "all brokers down" for a long while)
SLOW_SEND_S = 5.0

log = logging.getLogger("edgestream.kafka.topic_writer")


class DeliveryFailed(RuntimeError):
    """A message was not acknowledged by the broker."""


class SendInterrupted(RuntimeError):
    """`stop()` turned true while a send waited for Kafka (e.g. SIGTERM during an outage)."""


class TopicWriter:
    """Sends messages and waits until the broker acknowledged all of them (acks=all, idempotent): when
    `send_values` returns, they are durable in their topic. With an `outage`, it waits through an outage (module
    doc); `stop()` true while it waits: SendInterrupted."""

    def __init__(self, bootstrap: str, max_bytes: int, security: Mapping[str, str] | None = None, *,
                 outage: Outage | None = None, stop: Callable[[], bool] | None = None,
                 who: str = "sender") -> None:
        self.max_bytes = int(max_bytes)
        self.outage, self.stop = outage, stop
        # replaced by a new one when its client wedges after an outage (kafka.replaceable_producer)
        self._tx = ReplaceableProducer(producer_config(
            bootstrap, security, outage_s=outage.budget_s if outage is not None else None,
            **{"linger.ms": 0, **({"error_cb": self._on_error} if outage is not None else {})}),
            outage, security, on_delivery=self._on_delivery, who=who)
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

    def send_values(self, topic: str, items: Iterable[tuple[bytes | None, bytes | None, list | None]],
                    timeout_s: float = 60.0, *, wait: bool = True, what: str | None = None) -> int:
        """Produce (key, value, headers) messages to `topic` in order (a None value: a tombstone) and, with
        `wait`, wait until all are acknowledged (as `send`); returns the bytes sent (values)."""
        sent = 0
        for key, value, headers in items:
            self._tx.produce(topic, value, key=key, headers=headers)
            sent += len(value or b"")
        self._producer.poll(0)
        self._topic = topic
        if wait:
            self.flush(timeout_s, what=what or f"sending to {topic}")
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
