"""Kafka consumers: per-device streams shaped by the streams/ policies (the shared take sequence),
injection, DLQ, and the torch dataset of typed `StreamBatch`es."""

from edgestream.lazy import lazy_exports

#: public name -> the module that defines it (loaded on first use: a run's status reads no torch)
_EXPORTS = {
    "StreamBatch": "edgestream.consumers.batch",
    "KafkaStreamDataset": "edgestream.consumers.dataset",
    "make_dataloader": "edgestream.consumers.dataset",
    "PartitionReader": "edgestream.consumers.device_stream",
    "trainer_group": "edgestream.consumers.device_stream",
    "DeadLetters": "edgestream.consumers.dlq",
    "InjectionChannel": "edgestream.consumers.injection",
    "KafkaDeviceStream": "edgestream.consumers.kafka_stream",
    "RawBatch": "edgestream.consumers.kafka_stream",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
