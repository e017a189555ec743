"""Paced per-device Kafka producers and their effective-rate statistics. A run's producer is built by
its plan (`edgestream.producers.from_plan.stream_producer`); `DeviceProducer` publishes one device's samples from
device-side Python (docs/wire-format.md)."""

from edgestream.lazy import lazy_exports

#: public name -> the module that defines it (loaded on first use)
_EXPORTS = {
    "DeliveryError": "edgestream.producers.device",
    "DeviceProducer": "edgestream.producers.device",
    "ResumeError": "edgestream.kafka.stream_ends",
    "RunConfigConflict": "edgestream.producers.restart",
    "due_count": "edgestream.producers.schedule",
    "ProducerSummary": "edgestream.producers.stream_producer",
    "StreamProducer": "edgestream.producers.stream_producer",
    "parse_device_range": "edgestream.producers.stream_producer",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
