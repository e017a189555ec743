"""Paced per-device Kafka producers and their effective-rate statistics. A run's producer is built by
its plan (`edgestream.runner.plan.RunPlan.producer`)."""

from edgestream.producers.restart import ResumeError, RunConfigConflict
from edgestream.producers.schedule import due_count
from edgestream.producers.stream_producer import ProducerSummary, StreamProducer, parse_device_range

__all__ = ["ProducerSummary", "ResumeError", "RunConfigConflict", "StreamProducer", "due_count",
           "parse_device_range"]
