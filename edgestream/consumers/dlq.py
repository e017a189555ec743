"""Dead-letter queue: rejected messages are copied to `<run>.dlq` with the reason in a header. Through a
Kafka outage they wait in the producer's queue (its delivery timeout is above the outage budget) and the
final flush waits for them as long as the budget lasts.

Headers: `reason`, `source_topic`, `source_offset`; when the value is a well-formed sample that the run
rejected (another dtype or shape, a bad label or target, another device), also the sample's `seq` and `device`
as its header says (read with the run's `SampleSerde`, the one place that knows the wire format).

A copy the broker refuses (e.g. a rejected message larger than the DLQ topic's `max.message.bytes`) is not
lost silently: `failed` counts them, the first is logged at once (logger edgestream.consumers.dlq, the rank's
log) and each flush logs how many were not copied since the last one, with the first error.
"""

from __future__ import annotations

import logging

from edgestream.consumers.broker_calls import BROKER_TIMEOUT_S
from edgestream.data.serde import SampleSerde, WireError
from edgestream.kafka.clients import producer_config
from edgestream.kafka.outage import Outage
from edgestream.kafka.replaceable_producer import PURGED, ReplaceableProducer
from edgestream.kafka.topic_names import dlq_topic

log = logging.getLogger(__name__)


class DeadLetters:
    """Copies rejected messages to the run's DLQ topic; `count` is what was sent there, `failed` what the
    broker refused (module doc)."""

    def __init__(self, bootstrap: str, run: str, security: dict | None = None, outage: Outage | None = None) -> None:
        self.topic = dlq_topic(run)
        self.outage = outage if outage is not None else Outage(bootstrap, BROKER_TIMEOUT_S)
        # replaced by a new one when its client wedges after an outage (kafka.replaceable_producer)
        self._tx = ReplaceableProducer(producer_config(bootstrap, security, outage_s=self.outage.budget_s,
                                                       **{"linger.ms": 0}), self.outage, security, who="DLQ",
                                       on_delivery=self._on_delivery)
        self.count = self.failed = 0
        self._told = 0                      # failures the last flush's line counted
        self._first_error: str | None = None

    def _on_delivery(self, err, msg) -> None:
        if err is None or err.code() in PURGED:  # purged: given up at a hurried stop (the caller logs that)
            return
        self.failed += 1
        if self._first_error is None:
            self._first_error = err.str()
            log.error("DLQ: a rejected message (%d bytes) could not be copied to %s: %s", len(msg.value() or b""),
                      self.topic, self._first_error)

    def send(self, value: bytes | None, reason: str, *, source_topic: str, offset: int,
             key: bytes | None = None) -> None:
        """Copy a rejected message (its value and original key, unchanged) with the reason, the source
        topic and offset in headers (and its seq and device when its header is readable)."""
        headers = [("reason", reason.encode()), ("source_topic", source_topic.encode()),
                   ("source_offset", str(offset).encode())]
        try:
            head = SampleSerde.header(value)
        except (WireError, ValueError, TypeError):  # not a readable sample: the three headers only
            pass
        else:
            headers += [("seq", str(head.seq).encode()), ("device", str(head.device).encode())]
        self._tx.produce(self.topic, value, key=key, headers=headers)
        self._tx.producer.poll(0)
        self.count += 1

    def flush(self, wait: bool = True) -> None:
        """Wait until the broker acknowledged every DLQ message (through an outage, within its budget)."""
        self._tx.flush_through(f"flushing the DLQ messages to {self.topic}", wait)
        if self.failed > self._told:
            log.error("DLQ: %d of the %d rejected message(s) sent were not copied to %s (first error: %s)",
                      self.failed - self._told, self.count, self.topic, self._first_error)
            self._told = self.failed
