"""One device's stream in virtual time: what has arrived, what is consumed, what truncation dropped.

`VirtualStream` is the simulator's source of a device stream (the Kafka consumer's is
`edgestream.consumers.kafka_stream.KafkaDeviceStream`). Counting follows the producers
(producers/schedule.py `due_count`): sample k (k = 0, 1, ...) of device i is due at due_time_i(k), so
by time t >= 0 the stream holds floor(C_i(t)) + 1 samples (sample 0 at t = 0). A batch is taken by
the sequence of `edgestream.streams.take` (the decisions are `TakeRule.decide`, shared with the
Kafka consumer); this source supplies the counts from the rate model and waits in virtual time:

1. at the request time t0 it counts what is buffered and what arrived in (t0 - window, t0] (and,
   with a lag bound `max_lag_s`, in (t0 - max_lag_s, t0]);
2. the rule truncates once (and skips what is older than max_lag_s), measures the rate and sizes
   b_i (an explicit size overrides the policy);
3. if the batch is not ready, the worker waits until the missing samples are due;
4. it takes the b_i oldest samples plus everything peers injected since its last batch.

The lag after a take is `Taken.backlog` samples and `Taken.lag_s` seconds of data: how long ago the
oldest unread sample was due (0 when nothing is buffered), the figure the Kafka stream reports from
its messages' produce times.

`VirtualStream` implements `edgestream.streams.source.StreamSource`: the engine takes its batches with
the shared `take_batch` (counts, skip, wait, take), the stream reading the time from its `clock` (the
SimPy environment: `.now`, and `.timeout(delay)` to wait) and building batches from its `data`
(`SimData`). Its state is plain values (`state_dict` / `load_state_dict`). `plan` and `take_at` are the
same steps at explicit times (no clock).
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgestream.streams import TakeRule, time_until_available
from edgestream.streams.source import BatchFacts, TakeCounts, check_state
from edgestream.streams.take import TakeDecision

#: version of `VirtualStream.state_dict()`
STATE_VERSION = 1

_EPS = 1e-9


@dataclass
class TakePlan:
    """What `VirtualStream.plan` decided at the request time: b_i, when it is ready, what was dropped."""

    target: int
    ready_at: float
    dropped: int
    rate: float


@dataclass
class Taken:
    """The own-stream positions [start, stop) of a batch, the injected dataset indices that join it, and
    the buffer right after taking (own samples arrived but not consumed) and its age in seconds."""

    start: int
    stop: int
    injected: np.ndarray
    backlog: int
    held: int
    lag_s: float = 0.0


@dataclass
class VirtualStream:
    """The virtual stream of `device` under `rate_model` with a buffer and a batch policy, and a lag
    bound `max_lag_s` (None: unbounded); `clock` and `data` for `take_batch` (module doc)."""

    device: int
    rate_model: object
    buffer_policy: object
    batch_policy: object
    max_lag_s: float | None = None
    clock: Any = None                  # .now and .timeout(delay): the SimPy environment
    data: Any = None                   # SimData: the dataset indices and tensors of a batch
    pos: int = 0                       # next own stream position not yet consumed (or skipped)
    dropped_total: int = 0
    taken_total: int = 0
    inbox: list[tuple[float, np.ndarray]] = field(default_factory=list)  # (arrival time, dataset indices)

    def __post_init__(self) -> None:
        self.rule = TakeRule(self.buffer_policy, self.batch_policy, max_lag_s=self.max_lag_s)
        self.suspended_s = 0.0  # wall seconds suspended in `wait` (other processes ran): not the stream's work

    @property
    def window_s(self) -> float:
        return self.rule.window_s

    def arrived(self, t: float) -> int:
        """Samples streamed in by time t (producer convention: floor(C(t)) + 1, 0 before t = 0)."""
        if t < 0:
            return 0
        return int(math.floor(self.rate_model.cumulative(self.device, t) + _EPS)) + 1

    def available(self, t: float) -> int:
        """Own samples buffered at time t (arrived, not yet consumed or skipped)."""
        return max(0, self.arrived(t) - self.pos)

    # ------------------------------------------------------------------ the steps, at explicit times
    def counts_at(self, t0: float) -> TakeCounts:
        """Step 1 at time t0: buffered, arrived in the last window, and (lag bound) in its last seconds."""
        arrived_now = self.arrived(t0)
        in_window = arrived_now - self.arrived(t0 - self.rule.window_s)
        recent = None if self.max_lag_s is None else arrived_now - self.arrived(t0 - self.max_lag_s)
        return TakeCounts(max(0, arrived_now - self.pos), in_window, recent)

    def skip(self, n: int) -> int:
        """Skip the `n` oldest buffered samples (truncation, the lag bound): counted as dropped."""
        self.pos += n
        self.dropped_total += n
        return n

    def ready_at(self, t0: float, decision: TakeDecision) -> float:
        """When the buffer holds the batch `decision` sized at t0 (t0 when it does already)."""
        ready_at = t0
        missing = decision.missing(decision.available)
        if missing:
            ready_at = t0 + time_until_available(self.rate_model, self.device, t0, missing)
            # due_time inverts a float integral: make sure the count really holds at ready_at
            bump = max(ready_at, 1.0) * 1e-15
            while not decision.ready(self.arrived(ready_at) - self.pos):
                ready_at += bump
                bump *= 2.0
        return ready_at

    def plan(self, t0: float, size: int | None) -> TakePlan:
        """Steps 1-3 at t0: truncate (once, now), decide b_i and the time the buffer will hold it."""
        counts = self.counts_at(t0)
        decision = self.rule.decide(counts.available, counts.arrived_in_window, size, counts.recent)
        if decision.skip:
            self.skip(decision.skip)
        return TakePlan(decision.target, self.ready_at(t0, decision), decision.skip, decision.rate)

    def take_at(self, t: float, target: int) -> Taken:
        """Consume `target` own samples at time t (they must have arrived) and the injected inbox."""
        have = self.arrived(t) - self.pos
        if have < target:
            raise RuntimeError(f"device {self.device}: taking {target} samples at t={t:.6f}, {have} arrived")
        start = self.pos
        self.pos += target
        self.taken_total += target
        if self.inbox:
            ready = [idx for when, idx in self.inbox if when <= t]
            self.inbox = [(when, idx) for when, idx in self.inbox if when > t]
            injected = np.concatenate(ready) if ready else np.zeros(0, dtype=np.int64)
        else:
            injected = np.zeros(0, dtype=np.int64)
        backlog = have - target
        lag_s = max(0.0, t - self.rate_model.due_time(self.device, self.pos)) if backlog else 0.0
        return Taken(start, self.pos, injected, backlog, have + len(injected), lag_s)

    def deliver(self, t: float, indices: np.ndarray) -> None:
        """Injected samples (dataset indices) that reach this device's queue at time t."""
        if len(indices):
            self.inbox.append((t, np.asarray(indices, dtype=np.int64)))

    # ------------------------------------------------------------------ StreamSource (the clock's time)
    def counts(self) -> TakeCounts:
        return self.counts_at(self.clock.now)

    def wait(self, decision: TakeDecision, timeout: float | None = None) -> Generator[Any, Any, bool]:
        """Wait in virtual time until the batch is due (a simulated stream never times out)."""
        now = self.clock.now
        ready_at = self.ready_at(now, decision)
        if ready_at > now:
            paused = time.perf_counter()
            yield self.clock.timeout(ready_at - now)
            self.suspended_s += time.perf_counter() - paused
        return True

    def take(self, decision: TakeDecision, dropped: int) -> Any:
        """The batch (`SimBatch` of `data`) of the `decision.target` oldest samples and the injected ones,
        with its `facts`."""
        data, target = self.data, decision.target
        taken = self.take_at(self.clock.now, target)
        indices = data.stream_indices(self.device, taken.start, taken.stop)
        if len(taken.injected):
            indices = np.concatenate([indices, taken.injected])
        batch = data.batch(self.device, indices, target)
        batch.facts = BatchFacts(
            batch.injected, batch=batch.n, dropped=dropped, buffer_samples=taken.backlog,
            buffer_bytes=taken.backlog * data.sample_bytes, held_samples=taken.held, rate=decision.rate,
            lag_s=taken.lag_s, seqs=range(taken.start, taken.stop),  # own stream: seq = position
            labels=data.labels(indices[:target]))
        return batch

    # ------------------------------------------------------------------ Stateful
    def state_dict(self) -> dict[str, Any]:
        """The stream's position (consumed, dropped, taken) and the injected samples not taken yet:
        plain values."""
        return {"version": STATE_VERSION, "device": self.device, "pos": self.pos,
                "dropped_total": self.dropped_total, "taken_total": self.taken_total,
                "inbox": [[float(when), [int(i) for i in idx]] for when, idx in self.inbox]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state` (`state_dict` of this device's stream)."""
        state = check_state(state, "VirtualStream", STATE_VERSION,
                            ("device", "pos", "dropped_total", "taken_total", "inbox"))
        if state["device"] != self.device:
            raise ValueError(f"the stream state is device {state['device']}'s; this stream is device {self.device}'s")
        try:
            pos, dropped, taken = int(state["pos"]), int(state["dropped_total"]), int(state["taken_total"])
            inbox = [(float(when), np.asarray(idx, dtype=np.int64)) for when, idx in state["inbox"]]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"VirtualStream state of device {self.device}: {exc}") from None
        if min(pos, dropped, taken) < 0:
            raise ValueError(f"VirtualStream state of device {self.device}: negative counts (pos {pos}, "
                             f"dropped_total {dropped}, taken_total {taken})")
        self.pos, self.dropped_total, self.taken_total, self.inbox = pos, dropped, taken, inbox
