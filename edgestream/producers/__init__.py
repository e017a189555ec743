"""Paced per-device Kafka producers and their effective-rate statistics."""

from edgestream.producers.launch import producer_from_config
from edgestream.producers.restart import ResumeError, RunConfigConflict, producer_run_config
from edgestream.producers.schedule import due_count
from edgestream.producers.stream_producer import ProducerSummary, StreamProducer, parse_device_range

__all__ = ["ProducerSummary", "ResumeError", "RunConfigConflict", "StreamProducer", "due_count",
           "parse_device_range", "producer_from_config", "producer_run_config"]
