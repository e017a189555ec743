"""Dead-letter queue: rejected messages are copied to `<run>.dlq` with the reason in a header.

Headers: `reason`, `source_topic`, `source_offset`; when the value is a well-formed sample that the run
rejected (another dtype or shape, a bad label or target, another device), also the sample's `seq` and `device`
as its header says (read with the run's `SampleSerde`, the one place that knows the wire format).
"""

from __future__ import annotations

from confluent_kafka import Producer

from edgestream.data.serde import SampleSerde, WireError
from edgestream.kafka.clients import produce, producer_config
from edgestream.kafka.topics import dlq_topic


class DeadLetters:
    """Copies rejected messages to the run's DLQ topic; `count` is what was sent there."""

    def __init__(self, bootstrap: str, run: str, security: dict | None = None) -> None:
        self.topic = dlq_topic(run)
        self._producer = Producer(producer_config(bootstrap, security, **{"linger.ms": 0}))
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

    def flush(self, timeout: float = 30.0) -> None:
        if self._producer.flush(timeout):
            raise RuntimeError(f"DLQ messages to {self.topic} were not acknowledged within {timeout} s")
