"""dssp(s_low, r) — dynamic SSP (Zhao et al. 2019, named in 003; ALGORITHMS.md).

Workers push a gradient per step (`ps_worker.gradient_worker`); the PS applies every update on
arrival and pulls follow SSP (`SSPCoordinator`) with a per-worker threshold s_low + extra(m) in
[s_low, s_low + r]. The PS keeps each worker's last two push times (arrival `now` at the PS). When a
push takes worker m (then among the fastest) past its threshold — first at the s_low bound — it
predicts m's next pushes t_fast + k I_fast, k = 0..r, and the slowest worker's next push
t_slow + I_slow (I = last - previous push time), picks

    k* = argmin_k |t_fast + k I_fast - (t_slow + I_slow)|   (ties: the smallest k)

and lets m run s_low + k* ahead of the slowest: its threshold becomes s_low + k* (at a re-evaluation
at least m's lead - 1, see below), always within [s_low, s_low + r].

Choices where ALGORITHMS.md is silent:

* When k* is evaluated: on a push of m that leaves m over its current threshold (its pull would
  block) — the first time at the s_low bound, again each time m has used up its k* extra pushes
  while the slowest still lags. Each evaluation sets the threshold to max(s_low + k*, L - 1), L = m's
  lead after the push: k* is not added on top of the lead already reached (that would ratchet the
  threshold up to s_low + r under a lasting speed gap and turn DSSP into SSP(s_low + r)), and a
  small k* never makes m wait for more than the slowest workers' next push (L - 1). extra(m) returns
  to 0 once m's lead is back within s_low. Thresholds change only on pushes, never while a pull
  waits.
* The slowest worker: every worker at c_min (c_min rises only once all of them have pushed): its
  predicted next push is the latest of theirs.
* Before two push times are known for m or for a slowest worker there is no prediction: k* = 0
  (threshold s_low at the first crossing, plain SSP(s_low)).
* Intervals are push-to-push, as the spec says, so a worker's blocked time is part of its interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from edgestream.sync.coordinator import ServerContext
from edgestream.sync.params import Param
from edgestream.sync.ps_worker import BATCH, gradient_worker
from edgestream.sync.requests import Push
from edgestream.sync.ssp import SSPCoordinator

S_LOW = Param("s_low", 3, "int", ge=0, doc="lower staleness threshold (plain SSP bound before a prediction)")
R = Param("r", 12, "int", ge=0, doc="range: the threshold varies in [s_low, s_low + r]")
PARAMS = (S_LOW, R, BATCH)
worker = gradient_worker


def best_k(t_fast: float, i_fast: float, t_slow_next: float, r: int) -> int:
    """k* in 0..r minimising |t_fast + k i_fast - t_slow_next| (the smallest k on ties)."""
    best, gap = 0, abs(t_fast - t_slow_next)
    for k in range(1, r + 1):
        g = abs(t_fast + k * i_fast - t_slow_next)
        if g < gap:
            best, gap = k, g
    return best


class DSSPCoordinator(SSPCoordinator):
    """SSP with the per-worker threshold s_low + extra(m), extra chosen by prediction (module doc)."""

    def __init__(self, ctx: ServerContext, model: Sequence[Tensor]) -> None:
        super().__init__(ctx, model)
        self.s_low = int(ctx.params.get("s_low", 3))
        self.r = int(ctx.params.get("r", 12))
        self.extra = [0] * self.world
        self.last: list[float | None] = [None] * self.world   # last push time of each worker
        self.prev: list[float | None] = [None] * self.world   # the one before
        self.evaluations = 0

    def bound(self, worker: int) -> int:
        return self.s_low + self.extra[worker]

    def interval(self, worker: int) -> float | None:
        """Worker's last push-to-push interval, None before two pushes."""
        last, prev = self.last[worker], self.prev[worker]
        return None if last is None or prev is None else last - prev

    def k_star(self, worker: int) -> int:
        """k* for `worker` (the fast one) against the slowest workers' next push; 0 without a prediction."""
        i_fast = self.interval(worker)
        c_min = min(self.pushes)
        slow = [j for j in range(self.world) if self.pushes[j] == c_min]
        i_slow = [self.interval(j) for j in slow]
        if i_fast is None or any(i is None for i in i_slow):
            return 0
        t_slow_next = max(self.last[j] + i for j, i in zip(slow, i_slow, strict=True))  # type: ignore[operator]
        return best_k(float(self.last[worker]), i_fast, t_slow_next, self.r)  # type: ignore[arg-type]

    def on_push(self, worker: int, push: Push, now: float) -> dict[str, Any] | None:
        self.apply(push.update, push.lr)
        self.prev[worker], self.last[worker] = self.last[worker], float(now)
        c_min = min(self.pushes)
        for j in range(self.world):  # back within s_low: the next crossing is predicted afresh
            if self.pushes[j] - c_min <= self.s_low:
                self.extra[j] = 0
        lead = self.pushes[worker] - c_min
        if lead > self.bound(worker):
            self.evaluations += 1
            k = self.k_star(worker)
            self.extra[worker] = min(self.r, max(k, lead - 1 - self.s_low))
            return {"dssp_k": k, "dssp_threshold": self.bound(worker)}
        return None

    def on_pull_info(self, worker: int, now: float) -> dict[str, Any]:
        return {**super().on_pull_info(worker, now), "threshold": self.bound(worker)}

    def extra_state(self) -> dict[str, Any]:
        return {"extra": list(self.extra), "last": list(self.last), "prev": list(self.prev),
                "evaluations": self.evaluations}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        self.extra = [int(x) for x in state.get("extra", [0] * self.world)]
        self.last = [None if x is None else float(x) for x in state.get("last", [None] * self.world)]
        self.prev = [None if x is None else float(x) for x in state.get("prev", [None] * self.world)]
        self.evaluations = int(state.get("evaluations", 0))

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "thresholds": [self.bound(j) for j in range(self.world)],
                "dssp_evaluations": self.evaluations}
