"""Taking a batch from a device's stream: the one sequence both stream sources follow.

A device stream has two sources: `edgestream.sim.stream.VirtualStream` counts samples in virtual time
from the rate model, `edgestream.consumers.kafka_stream.KafkaDeviceStream` counts them on the
broker's offsets and timestamps (and the lockstep engine's `ArrayStream` always holds its batch). All
take a batch the same way -- the sequence is `edgestream.streams.source.take_batch`, over the
`StreamSource` protocol -- and the decisions in it live here, once (`TakeRule.decide`); a source only
supplies its counts, skips, waits and takes:

1. at the request time t, count `available` (buffered: arrived, not yet consumed) and
   `arrived_in_window` (arrived in (t - window_s, t]; a source may leave it unmeasured (None) when
   `TakeRule.measures_window` is False: persist with a fixed or available batch never reads it);
2. decide (`TakeRule.decide`): the buffer policy truncates ONCE, now -- skip the oldest `skip`
   samples (counted as dropped); with a lag bound (`max_lag_s`, the config's `algorithm.max_lag_s`)
   it also skips whatever is older than the last max_lag_s seconds (`recent`: the samples that arrived
   in them; a source asks for that count only when `needs_recent(age of its oldest buffered sample)`);
   the measured rate is arrived_in_window / window_s; the batch policy turns it into b_i = `target`
   (an explicit size overrides the policy);
3. the source skips `skip` samples, then waits until `decision.ready(buffered)` (the batch policy's
   readiness rule; an explicit size waits for all of it): the simulator computes when the missing
   `decision.missing(buffered)` samples are due, the consumer polls the broker;
4. it takes the `target` oldest samples (at most) and adds every sample peers injected since its
   last batch;
5. (Kafka only: a simulated stream has no malformed samples) samples rejected by validation (to the
   DLQ) are replaced: `decision.refill(valid)` says how many more own samples to take and how many of
   them to wait for, so hostile input never changes a demanded batch size (fixed, rate, explicit).

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
    lag_skip: int = 0  # of `skip`: what the lag bound skipped beyond the buffer policy

    def ready(self, buffered: int) -> bool:
        """Whether `buffered` samples are enough to take the batch now."""
        if self.explicit:
            return buffered >= self.target
        return self.batch_policy.ready(self.target, buffered)

    def missing(self, buffered: int) -> int:
        """How many more samples must arrive before the batch is ready (0 when it is)."""
        return 0 if self.ready(buffered) else max(0, self.target - buffered)

    def refill(self, valid: int) -> tuple[int, int]:
        """After `valid` of the own samples taken passed validation (the others went to the DLQ):
        (up to how many more to take, how many of them to wait for). The rejected ones are replaced
        under the batch's own readiness rule: a demanded size (fixed, rate, explicit) waits for every
        missing sample, as for any slow stream; `available` tops up from what is buffered without
        waiting, unless no sample was valid (then it waits for one, as for its first)."""
        missing = self.target - valid
        if missing <= 0:
            return 0, 0
        return missing, next((k for k in range(missing + 1) if self.ready(valid + k)), missing)


@dataclass(frozen=True)
class TakeRule:
    """The buffer and batch policies of one device stream, its window in seconds (default: the
    buffer policy's `window_s`) and its lag bound `max_lag_s` (None: unbounded)."""

    buffer_policy: object
    batch_policy: BatchPolicy
    window_s: float | None = None
    max_lag_s: float | None = None

    def __post_init__(self) -> None:
        if self.window_s is None:
            object.__setattr__(self, "window_s", float(getattr(self.buffer_policy, "window_s", 1.0)))
        if not self.window_s > 0:
            raise ValueError(f"window_s: {self.window_s} is not allowed; must be > 0")
        if self.max_lag_s is not None and not self.max_lag_s > 0:
            raise ValueError(f"algorithm.max_lag_s: {self.max_lag_s} is not allowed; must be > 0 (or null: unbounded)")
        measures = not isinstance(self.buffer_policy, PersistBuffer) or isinstance(self.batch_policy, RateBatch)
        object.__setattr__(self, "_measures_window", measures)

    @property
    def measures_window(self) -> bool:
        """Whether `decide` reads `arrived_in_window`: truncation keeps the last window, a rate batch
        sizes b_i by it. A Kafka source skips the broker's time lookup when this is False."""
        return self._measures_window

    def needs_recent(self, oldest_age_s: float | None) -> bool:
        """Whether `decide` must be given `recent` (the samples that arrived in the last max_lag_s
        seconds): a lag bound is set and the oldest buffered sample is older than it (None: unknown)."""
        return self.max_lag_s is not None and (oldest_age_s is None or oldest_age_s > self.max_lag_s)

    def decide(self, available: int, arrived_in_window: int | None, size: int | None = None,
               recent: int | None = None) -> TakeDecision:
        """Steps 2 of the sequence (module doc): truncate once, measure the rate, size the batch.

        `available`: samples buffered now; `arrived_in_window`: samples that arrived in the last
        window (None: not measured, allowed only when `measures_window` is False; the rate is then
        reported as 0); `size`: an explicit batch size, or None for the batch policy's b_i;
        `recent`: with `max_lag_s`, the samples that arrived in the last max_lag_s seconds (None: the
        source found nothing older buffered) -- everything older is skipped, counted as dropped.
        """
        if arrived_in_window is None:
            if self._measures_window:
                raise ValueError(f"{self.buffer_policy!r} with {self.batch_policy!r} needs the arrivals in "
                                 "the last window")
            skip, rate = 0, 0.0
        else:
            skip = int(self.buffer_policy.truncate(available, arrived_in_window))
            rate = arrived_in_window / self.window_s
        lag_skip = 0
        if recent is not None and self.max_lag_s is not None:
            if recent < 0:
                raise ValueError(f"recent: {recent} is not allowed; must be >= 0")
            lag_skip = max(0, available - skip - recent)
            skip += lag_skip
        available -= skip
        if size is not None:
            target = int(size)
            if target < 0:
                raise ValueError(f"size: {size} is not allowed; must be >= 0")
        elif self.batch_policy is None:
            raise ValueError("a take without an explicit size (TakeBatch() without size) needs a batch_policy")
        else:
            target = int(self.batch_policy.target(rate, available))
        return TakeDecision(skip, rate, target, available, size is not None, self.batch_policy, lag_skip)
