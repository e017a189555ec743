"""Kafka consumers: per-device streams shaped by the streams/ policies, injection, DLQ, torch dataset."""

from edgestream.consumers.dataset import KafkaStreamDataset, make_dataloader
from edgestream.consumers.device_stream import DeviceStream, PartitionReader, RawBatch, trainer_group
from edgestream.consumers.dlq import DeadLetters
from edgestream.consumers.injection import InjectionChannel

__all__ = ["DeadLetters", "DeviceStream", "InjectionChannel", "KafkaStreamDataset", "PartitionReader", "RawBatch",
           "make_dataloader", "trainer_group"]
