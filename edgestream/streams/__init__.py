"""edgestream.streams: per-device stream rates S_i(t), the pure buffer, batch and injection policies,
and the one take-a-batch sequence (`TakeRule`, `take_batch` over the `StreamSource` protocol) that the
simulated, the Kafka and the lockstep stream all follow.

Shared by the Kafka producers/consumers and the virtual-time simulator; no I/O (except reading a
rate trace when a model is built), no Kafka, no wall clock: time is an argument. See DESIGN.md.
"""

from edgestream.streams.policies import (
    AvailableBatch,
    BatchPolicy,
    FixedBatch,
    Injection,
    InjectionPlan,
    PersistBuffer,
    RateBatch,
    TruncateBuffer,
    arrived_in_window,
    build_batch_policy,
    build_buffer_policy,
    build_injection,
    injection_count,
    injection_targets,
    persist_buffer_size,
    samples_arrived,
    time_until_available,
)
from edgestream.streams.presets import PRESET_ALIASES, PRESETS, RatePreset, preset
from edgestream.streams.rates import RateModel, build_rate_model
from edgestream.streams.source import BatchFacts, Stateful, StreamSource, TakeCounts, take_batch
from edgestream.streams.take import TakeDecision, TakeRule

__all__ = [
    "PRESETS", "PRESET_ALIASES", "AvailableBatch", "BatchFacts", "BatchPolicy", "FixedBatch", "Injection",
    "InjectionPlan", "PersistBuffer", "RateBatch", "RateModel", "RatePreset", "Stateful", "StreamSource",
    "TakeCounts", "TakeDecision", "TakeRule", "TruncateBuffer", "arrived_in_window",
    "build_batch_policy", "build_buffer_policy", "build_injection", "build_rate_model", "injection_count",
    "injection_targets", "persist_buffer_size", "preset", "samples_arrived", "take_batch", "time_until_available",
]
