"""Dead-letter queue: rejected messages are copied to `<run>.dlq` with the reason in a header. Through a
Kafka outage they wait in the producer's queue (its delivery timeout is above the outage budget) and the
final flush waits for them as long as the budget lasts.

Headers: `reason`, `source_topic`, `source_offset`; when the value is a well-formed sample that the run
rejected (another dtype or shape, a bad label or target, another device), also the sample's `seq` and `device`
as its header says (read with the run's `SampleSerde`, the one place that knows the wire format).
"""

from __future__ import annotations

from confluent_kafka import Producer

from edgestream.consumers.broker_calls import BROKER_TIMEOUT_S
from edgestream.data.serde import SampleSerde, WireError
from edgestream.kafka.clients import produce, producer_config
from edgestream.kafka.outage import Outage
from edgestream.kafka.topic_names import dlq_topic


def flush_through(producer: Producer, outage: Outage, what: str, wait: bool = True) -> None:
    """Flush `producer`, waiting through an outage while its budget lasts (its messages stay queued:
    `producer_config(outage_s=)`): a second without progress counts as Kafka not answering
    (KafkaUnavailable once the budget is spent), any progress as an answer. wait=False (a process that
    is ending anyway): what Kafka does not take within a second is left, logged by the caller."""
    left = len(producer)
    while left:
        now = producer.flush(1.0)
        if now == 0:
            break
        if not wait:
            raise RuntimeError(f"{what}: {now} message(s) not acknowledged; not waiting: the process is ending")
        if now < left:
            outage.up()
        else:
            outage.down(what)
        left = now


class DeadLetters:
    """Copies rejected messages to the run's DLQ topic; `count` is what was sent there."""

    def __init__(self, bootstrap: str, run: str, security: dict | None = None, outage: Outage | None = None) -> None:
        self.topic = dlq_topic(run)
        self.outage = outage if outage is not None else Outage(bootstrap, BROKER_TIMEOUT_S)
        self._producer = Producer(producer_config(bootstrap, security, outage_s=self.outage.budget_s,
                                                  **{"linger.ms": 0}))
        self.count = 0

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
        produce(self._producer, self.topic, value, key=key, headers=headers)
        self._producer.poll(0)
        self.count += 1

    def flush(self, wait: bool = True) -> None:
        """Wait until the broker acknowledged every DLQ message (through an outage, within its budget)."""
        flush_through(self._producer, self.outage, f"flushing the DLQ messages to {self.topic}", wait)
