"""ScaDLES randomized data injection over Kafka: `<run>.inj.<j>` topics.

Each step a device sends floor(beta * b_i) samples of its batch to ceil(alpha * M) other devices
(the decision is edgestream.streams' injection policy); receivers mix what arrived into their next
batch. Injected samples travel as their original wire bytes, so nothing is re-encoded.
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Message

from edgestream.consumers.device_stream import BROKER_TIMEOUT_S, PartitionReader
from edgestream.kafka.clients import producer_config
from edgestream.kafka.layout import StreamLayout
from edgestream.kafka.outage import Outage
from edgestream.kafka.replaceable_producer import ReplaceableProducer
from edgestream.kafka.topic_names import trainer_group


class InjectionChannel:
    """Send samples to other devices' injection topics; receive this device's injected samples."""

    def __init__(self, bootstrap: str, run: str, device: int, security: dict | None = None, *,
                 broker_timeout_s: float = BROKER_TIMEOUT_S, outage: Outage | None = None,
                 layout: StreamLayout | None = None) -> None:
        self.run, self.device = run, device
        self.layout = layout = layout if layout is not None else StreamLayout(run, device + 1)
        topic, partition = layout.injection(device)
        self.reader = PartitionReader(bootstrap, topic, trainer_group(run, device, "inj"), security,
                                      broker_timeout_s=broker_timeout_s, outage=outage, partition=partition,
                                      keep=layout.injection_keep(device),
                                      share=1.0 if layout.external is not None else layout.share(device))
        self.outage = self.reader.outage
        # replaced by a new one when its client wedges after an outage (kafka.replaceable_producer)
        self._tx = ReplaceableProducer(producer_config(bootstrap, security, outage_s=self.outage.budget_s,
                                                       **{"linger.ms": 1}), self.outage, security,
                                       who=f"device {device}'s injection")
        self.sent_samples = self.sent_bytes = 0
        self.received_samples = self.received_bytes = 0

    def send(self, values: Sequence[bytes], targets: Sequence[int]) -> int:
        """Send `values` to every target device; return bytes sent."""
        nbytes = 0
        for target in targets:
            topic, partition = self.layout.injection(target)
            key = self.layout.injection_key(self.device, target)
            for value in values:
                self._tx.produce(topic, value, key=key, partition=partition)
                nbytes += len(value)
        self._tx.producer.poll(0)
        self.sent_samples += len(values) * len(targets)
        self.sent_bytes += nbytes
        return nbytes

    def flush(self, wait: bool = True) -> None:
        """Wait until the broker acknowledged every injected sample (through an outage, within its budget)."""
        self._tx.flush_through(f"flushing the samples device {self.device} injected", wait)

    def receive(self, wait_s: float = 0.0) -> tuple[list[Message], int]:
        """Everything injected into this device so far (not yet taken): (Kafka messages, next_offset)."""
        self.reader.fill(wait_s)
        messages = self.reader.take_all()
        self.received_samples += len(messages)
        self.received_bytes += sum(len(m) for m in messages)
        return messages, self.reader.next_offset

    def ack(self, next_offset: int) -> None:
        self.reader.commit(next_offset)

    def close(self, wait: bool = True) -> None:
        try:
            self.flush(wait)
        finally:
            self.reader.close(wait)
