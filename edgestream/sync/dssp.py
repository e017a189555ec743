"""dssp(s_low, r) — dynamic SSP (Zhao et al. 2019, named in 003; ALGORITHMS.md).

Workers push a gradient per step (`ps_worker.gradient_worker`); the PS applies every update on
arrival and pulls follow SSP (`SSPCoordinator`) with a per-worker threshold s_low + extra(m) in
[s_low, s_low + r]. When a push takes the fastest worker m past s_low, the PS predicts m's next
pushes t_fast + k I_fast, k = 0..r, and the slowest worker's next push t_slow_next, picks

    k* = argmin_k |t_fast + k I_fast - t_slow_next|   (ties: the smallest k)

and lets m run s_low + k* ahead of the slowest: its threshold becomes s_low + k*.

The rule, and choices where ALGORITHMS.md is silent:

* k* is re-picked at every push of the fastest worker past s_low, and the threshold is exactly
  s_low + k*: it falls as well as rises as the predictions change. A worker already further ahead
  than a lowered threshold simply waits (its pull returns once it is within the threshold again).
  (An earlier reading floored the threshold at the worker's lead - 1, which kept it at the highest
  s_low + k* seen while the worker stayed ahead: later, smaller k* never took effect.)
* Only the fastest worker (most pushes; ties: any of them) is evaluated, as the paper describes; a
  worker that is not the fastest keeps the extra it was given while it was, and every worker's extra
  returns to 0 once its lead is back within s_low.
* Predictions use each worker's unblocked step time: the time from the reply that released it to its
  next push (compute + transfer), not the push-to-push interval, which includes the time the worker
  was blocked in its pull: once the fast worker has waited, its push-to-push interval equals the slow
  worker's and k* would collapse to 0-1 (DSSP degenerating to SSP(s_low + 1)). Without a reply
  between two pushes (an engine that pushes without pulling) the push-to-push interval is used.
* A worker's next push is predicted at its last release (the reply after its last push; its last
  push when that reply has not gone out yet) plus its step time; the fast worker's next pushes are
  t_fast + k I_fast with t_fast its push now (released at once when k* allows it).
* The slowest worker: every worker at c_min (c_min rises only once all of them have pushed): its
  predicted next push is the latest of theirs.
* Before a step time is known for m or for a slowest worker there is no prediction: k* = 0
  (threshold s_low, plain SSP(s_low)).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from edgestream.sync.coordinator import ServerContext
from edgestream.sync.hyperparams import Param
from edgestream.sync.ps_worker import BATCH, gradient_worker
from edgestream.sync.requests import Pulled, Push
from edgestream.sync.ssp import SSPCoordinator

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor

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
        self.last: list[float | None] = [None] * self.world     # last push time of each worker
        self.released: list[float | None] = [None] * self.world  # last reply time of each worker
        self.step: list[float | None] = [None] * self.world      # last unblocked step time (module doc)
        self.evaluations = 0

    def bound(self, worker: int) -> int:
        return self.s_low + self.extra[worker]

    def _since_release(self, worker: int) -> float | None:
        """When `worker` was last set going: its reply after its last push, else that push."""
        last, rel = self.last[worker], self.released[worker]
        return rel if rel is not None and (last is None or rel >= last) else last

    def k_star(self, worker: int) -> int:
        """k* for `worker` (the fast one) against the slowest workers' next push; 0 without a prediction."""
        i_fast = self.step[worker]
        c_min = min(self.pushes)
        slow = [j for j in range(self.world) if self.pushes[j] == c_min]
        if i_fast is None or any(self.step[j] is None for j in slow):
            return 0
        t_slow_next = max(self._since_release(j) + self.step[j] for j in slow)  # type: ignore[operator]
        return best_k(float(self.last[worker]), i_fast, t_slow_next, self.r)  # type: ignore[arg-type]

    def on_push(self, worker: int, push: Push, now: float) -> dict[str, Any] | None:
        self.apply(push.update, push.lr)
        start = self._since_release(worker)
        if start is not None:
            self.step[worker] = float(now) - start
        self.last[worker] = float(now)
        c_min = min(self.pushes)
        for j in range(self.world):  # back within s_low: the next crossing is predicted afresh
            if self.pushes[j] - c_min <= self.s_low:
                self.extra[j] = 0
        lead = self.pushes[worker] - c_min
        if lead > self.s_low and self.pushes[worker] == max(self.pushes):
            self.evaluations += 1
            k = self.k_star(worker)
            self.extra[worker] = min(self.r, k)
            return {"dssp_k": k, "dssp_threshold": self.bound(worker)}
        return None

    def pull(self, worker: int, now: float, *, copy: bool = True) -> Pulled:
        self.released[worker] = float(now)
        return super().pull(worker, now, copy=copy)

    def on_pull_info(self, worker: int, now: float) -> dict[str, Any]:
        return {**super().on_pull_info(worker, now), "threshold": self.bound(worker)}

    def extra_state(self) -> dict[str, Any]:
        return {"extra": list(self.extra), "last": list(self.last), "released": list(self.released),
                "step": list(self.step), "evaluations": self.evaluations}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        def times(key: str) -> list[float | None]:
            return [None if x is None else float(x) for x in state.get(key, [None] * self.world)]

        self.extra = [int(x) for x in state.get("extra", [0] * self.world)]
        self.last, self.released, self.step = times("last"), times("released"), times("step")
        self.evaluations = int(state.get("evaluations", 0))

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "thresholds": [self.bound(j) for j in range(self.world)],
                "dssp_evaluations": self.evaluations}
