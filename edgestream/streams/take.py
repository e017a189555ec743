"""Taking a batch from a device's stream: the one sequence both stream sources follow.

A device stream has two sources: `edgestream.sim.stream.VirtualStream` counts samples in virtual time
from the rate model, `edgestream.consumers.device_stream.KafkaDeviceStream` counts them on the
broker's offsets and timestamps. Both take a batch the same way, and the decisions in it live here,
once (`TakeRule.decide`); a source only supplies its counts, skips, waits and takes:

1. at the request time t, count `available` (buffered: arrived, not yet consumed) and
   `arrived_in_window` (arrived in (t - window_s, t]; a source may leave it unmeasured (None) when
   `TakeRule.measures_window` is False: persist with a fixed or available batch never reads it);
2. decide (`TakeRule.decide`): the buffer policy truncates ONCE, now -- skip the oldest `skip`
   samples (counted as dropped); the measured rate is arrived_in_window / window_s; the batch
   policy turns it into b_i = `target` (an explicit size overrides the policy);
3. the source skips `skip` samples, then waits until `decision.ready(buffered)` (the batch policy's
   readiness rule; an explicit size waits for all of it): the simulator computes when the missing
   `decision.missing(buffered)` samples are due, the consumer polls the broker;
4. it takes the `target` oldest samples (at most) and adds every sample peers injected since its
   last batch.

Pure: counts in, decisions out; no clock, no Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgestream.streams.policies import BatchPolicy, PersistBuffer, RateBatch


@dataclass(slots=True)
class TakeDecision:
    """What a stream decided at a batch request: truncate `skip`, size b_i = `target` (from `rate`).

    `available` is what stays buffered after the skip; `explicit` is True when the request named the
    size (then readiness is "all `target` buffered", whatever the batch policy says)."""

    skip: int
    rate: float
    target: int
    available: int
    explicit: bool
    batch_policy: BatchPolicy

    def ready(self, buffered: int) -> bool:
        """Whether `buffered` samples are enough to take the batch now."""
        if self.explicit:
            return buffered >= self.target
        return self.batch_policy.ready(self.target, buffered)

    def missing(self, buffered: int) -> int:
        """How many more samples must arrive before the batch is ready (0 when it is)."""
        return 0 if self.ready(buffered) else max(0, self.target - buffered)


@dataclass(frozen=True)
class TakeRule:
    """The buffer and batch policies of one device stream, and its window in seconds (default: the
    buffer policy's `window_s`)."""

    buffer_policy: object
    batch_policy: BatchPolicy
    window_s: float | None = None

    def __post_init__(self) -> None:
        if self.window_s is None:
            object.__setattr__(self, "window_s", float(getattr(self.buffer_policy, "window_s", 1.0)))
        if not self.window_s > 0:
            raise ValueError(f"window_s: {self.window_s} is not allowed; must be > 0")
        measures = not isinstance(self.buffer_policy, PersistBuffer) or isinstance(self.batch_policy, RateBatch)
        object.__setattr__(self, "_measures_window", measures)

    @property
    def measures_window(self) -> bool:
        """Whether `decide` reads `arrived_in_window`: truncation keeps the last window, a rate batch
        sizes b_i by it. A Kafka source skips the broker's time lookup when this is False."""
        return self._measures_window

    def decide(self, available: int, arrived_in_window: int | None, size: int | None = None) -> TakeDecision:
        """Steps 2 of the sequence (module doc): truncate once, measure the rate, size the batch.

        `available`: samples buffered now; `arrived_in_window`: samples that arrived in the last
        window (None: not measured, allowed only when `measures_window` is False; the rate is then
        reported as 0); `size`: an explicit batch size, or None for the batch policy's b_i.
        """
        if arrived_in_window is None:
            if self._measures_window:
                raise ValueError(f"{self.buffer_policy!r} with {self.batch_policy!r} needs the arrivals in "
                                 "the last window")
            skip, rate = 0, 0.0
        else:
            skip = int(self.buffer_policy.truncate(available, arrived_in_window))
            rate = arrived_in_window / self.window_s
        available -= skip
        if size is not None:
            target = int(size)
            if target < 0:
                raise ValueError(f"size: {size} is not allowed; must be >= 0")
        else:
            target = int(self.batch_policy.target(rate, available))
        return TakeDecision(skip, rate, target, available, size is not None, self.batch_policy)
