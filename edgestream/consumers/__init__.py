"""Kafka consumers: per-device streams shaped by the streams/ policies (the shared take sequence),
injection, DLQ, and the torch dataset of typed `StreamBatch`es."""

from edgestream.consumers.batch import StreamBatch
from edgestream.consumers.dataset import KafkaStreamDataset, make_dataloader
from edgestream.consumers.device_stream import PartitionReader, trainer_group
from edgestream.consumers.dlq import DeadLetters
from edgestream.consumers.injection import InjectionChannel
from edgestream.consumers.kafka_stream import KafkaDeviceStream, RawBatch

__all__ = ["DeadLetters", "InjectionChannel", "KafkaDeviceStream", "KafkaStreamDataset", "PartitionReader", "RawBatch",
           "StreamBatch", "make_dataloader", "trainer_group"]
