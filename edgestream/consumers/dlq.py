"""Dead-letter queue: rejected messages are copied to `<run>.dlq` with the reason in a header. Through a
Kafka outage they wait in the producer's queue (its delivery timeout is above the outage budget) and the
final flush waits for them as long as the budget lasts.

Headers: `reason`, `source_topic`, `source_offset`; when the value is a well-formed sample that the run
rejected (another dtype or shape, a bad label or target, another device), also the sample's `seq` and `device`
as its header says (read with the run's `SampleSerde`, the one place that knows the wire format).
"""

from __future__ import annotations

from edgestream.consumers.broker_calls import BROKER_TIMEOUT_S
from edgestream.data.serde import SampleSerde, WireError
from edgestream.kafka.clients import producer_config
from edgestream.kafka.outage import Outage
from edgestream.kafka.replaceable_producer import ReplaceableProducer
from edgestream.kafka.topic_names import dlq_topic


class DeadLetters:
    """Copies rejected messages to the run's DLQ topic; `count` is what was sent there."""

    def __init__(self, bootstrap: str, run: str, security: dict | None = None, outage: Outage | None = None) -> None:
        self.topic = dlq_topic(run)
        self.outage = outage if outage is not None else Outage(bootstrap, BROKER_TIMEOUT_S)
        # replaced by a new one when its client wedges after an outage (kafka.replaceable_producer)
        self._tx = ReplaceableProducer(producer_config(bootstrap, security, outage_s=self.outage.budget_s,
                                                       **{"linger.ms": 0}), self.outage, security, who="DLQ")
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
        self._tx.produce(self.topic, value, key=key, headers=headers)
        self._tx.producer.poll(0)
        self.count += 1

    def flush(self, wait: bool = True) -> None:
        """Wait until the broker acknowledged every DLQ message (through an outage, within its budget)."""
        self._tx.flush_through(f"flushing the DLQ messages to {self.topic}", wait)
