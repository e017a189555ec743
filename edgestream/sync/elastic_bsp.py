"""elastic-bsp(R) — ElasticBSP with ZipLine barrier placement (paper 003; ALGORITHMS.md "elastic-bsp").

Workers push a gradient per step (`ps_worker.gradient_worker`); the PS applies every update on
arrival, as ASP. Training alternates, per superstep, an ASP-like phase and a BSP-like barrier
(003 section 3 and 6.2.5):

1. Monitoring (003 Fig. 5, phase i): after a barrier (and from the start of the run) every pull
   returns at once; the PS notes each worker's push arrival times. It needs at least two pushes per
   worker *after* the barrier, so that the measured interval t_last - t_prev holds no barrier wait.
2. Prediction (phase ii): at the push that gives the last worker its second post-barrier push, the
   PS predicts every worker's next R push times from its latest two pushes,
   e_k = t_last + k (t_last - t_prev), k = 1..R (003 section 4), and runs ZipLine (default
   ZipLineOptBS, `edgestream.sync.zipline`) on the (n, R) matrix: Z* picks one predicted push per
   worker minimising max(Z) - min(Z); the barrier is t_sync = max(Z*), and the earliest optimum wins
   (003 section 4.2).
3. Barrier: worker p's barrier push is its picks[p]-th predicted push (column picks[p], i.e. its
   (c_p + picks[p] + 1)-th push since the last barrier, c_p its count at prediction). As in 003
   section 3 ("worker 9 ... will be the first to arrive in the barrier b and wait"), the worker
   waits *at its own chosen push*, not at the first push after t_sync: under exact prediction the
   others' chosen pushes are the last ones at or before t_sync. Robustness where prediction misses
   (003 section 4 accepts a "sub-optimal imposition" then): a worker has also reached the barrier
   when a push of it arrives at or after t_sync before its chosen one (it is slower than predicted;
   running on would only move the barrier further). A worker that reached the barrier has its pull
   blocked. When the last worker reaches it, every blocked pull is released at once.
4. Synchronisation: the updates were applied on arrival, so at the barrier W already aggregates
   every gradient pushed in the superstep; "synchronising" (003 section 3: "the model weights are
   then synchronized and will be available to all workers in the next iteration") is the PS holding
   the pull replies back until every worker has pushed its barrier update, so all workers start the
   next superstep from the same W (same version). The barrier-completing push starts the next
   monitoring phase. (ALGORITHMS.md says "averages/synchronises"; we do not re-weight the barrier
   pushes — the paper's server aggregates the same gradients and its text gives no other weighting.)

No deadlock: a blocked worker has already pushed, and every worker not at the barrier keeps
computing and pushing, so each eventually reaches its chosen push (or t_sync) and the barrier
completes; once the run is stopping the base class answers every pull. No timers are needed: a
worker can only reach a barrier by pushing.

Statistics (summary() and each pull's info): barriers passed, total wait at barriers (sum over
workers of the time from reaching a barrier to its release, per worker too), the sum over barriers
of the longest wait (003 eq. 2, c_sync) and of the predicted d_Z* (what ZipLine promised).

Where the spec is silent: R >= 1 default 15 (003 Fig. 4 and section 6.2); two monitored pushes
(003 Fig. 5: "at least two push requests per worker"); a measured interval of 0 is floored to
`MIN_INTERVAL_S` so predicted rows stay strictly ascending. The ZipLine variant is the param
`variant` (names in `VARIANTS`, default zipline_opt_bs); the coordinator's `variant=` argument
overrides it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from edgestream.sync.coordinator import Coordinator, ServerContext
from edgestream.sync.hyperparams import Param
from edgestream.sync.ps_worker import BATCH, gradient_worker
from edgestream.sync.requests import Push
from edgestream.sync.zipline import ZipLineResult, full_grid_scan, grid_scan, zipline, zipline_opt, zipline_opt_bs

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor

R = Param("R", 15, "int", ge=1, doc="lookahead: predicted future pushes per worker that ZipLine chooses from")
worker = gradient_worker

#: ZipLine variants by name (all take the (n, R) matrix and return a ZipLineResult)
VARIANTS: dict[str, Callable[[Any], ZipLineResult]] = {
    "zipline": zipline,
    "zipline_opt": zipline_opt,
    "zipline_opt_bs": zipline_opt_bs,
    "grid_scan": grid_scan,
    "full_grid_scan": full_grid_scan,
}
VARIANT = Param("variant", "zipline_opt_bs", "choice", choices=tuple(VARIANTS),
                doc="the ZipLine variant that places barriers")
PARAMS = (R, VARIANT, BATCH)
#: pushes per worker the PS monitors after a barrier before predicting (003 Fig. 5)
MONITOR = 2
#: floor of a measured push interval (seconds), so predicted times stay strictly ascending
MIN_INTERVAL_S = 1e-9


def predict_pushes(t_prev: float, t_last: float, r: int) -> list[float]:
    """A worker's next `r` push times from its last two: e_k = t_last + k (t_last - t_prev), k = 1..r."""
    step = max(float(t_last) - float(t_prev), MIN_INTERVAL_S)
    return [float(t_last) + k * step for k in range(1, int(r) + 1)]


def predict_matrix(t_prev: Sequence[float], t_last: Sequence[float], r: int) -> np.ndarray:
    """The (n, r) matrix of every worker's predicted push times (rows ascending)."""
    return np.array([predict_pushes(a, b, r) for a, b in zip(t_prev, t_last, strict=True)], dtype=float)


class ElasticBSPCoordinator(Coordinator):
    """Apply on arrival; pulls never wait except at the ZipLine-placed barrier (module doc)."""

    def __init__(self, ctx: ServerContext, model: Sequence[Tensor], variant: str | None = None) -> None:
        super().__init__(ctx, model)
        variant = variant or str(ctx.params.get("variant") or "zipline_opt_bs")
        if variant not in VARIANTS:
            raise ValueError(f"variant {variant!r} is not a ZipLine variant; choose one of {', '.join(VARIANTS)}")
        self.variant = variant
        self.R = int(ctx.params.get("R", 15))
        if self.R < 1:
            raise ValueError(f"R must be >= 1, got {self.R}")
        n = self.world
        # run totals
        self.barriers = 0
        self.barrier_wait_s = 0.0          # sum over barriers and workers of (release - reached)
        self.barrier_wait_worker = [0.0] * n
        self.barrier_wait_max_s = 0.0      # sum over barriers of the longest wait (003 eq. 2)
        self.predicted_wait_s = 0.0        # sum over passed barriers of ZipLine's d_Z* (what it promised)
        self.last_release = 0.0
        self.stop_counted = False          # the waits cut short by the run's stop are counted (once)
        self._new_superstep()

    # ------------------------------------------------------------------ superstep state
    def _new_superstep(self) -> None:
        n = self.world
        self.count = [0] * n                            # pushes since the last barrier
        self.t_prev: list[float | None] = [None] * n    # second-latest push arrival since the barrier
        self.t_last: list[float | None] = [None] * n    # latest push arrival since the barrier
        self.target: list[int] | None = None            # barrier push count per worker (None: monitoring)
        self.picks: list[int] | None = None             # ZipLine's columns
        self.t_sync: float | None = None                # predicted barrier time max(Z*)
        self.d_pred: float | None = None                # predicted d_Z*
        self.reached: list[float | None] = [None] * n   # when each worker reached the barrier
        self.t_prev_at: list[float] | None = None       # t_prev / t_last the barrier was predicted from
        self.t_last_at: list[float] | None = None

    @property
    def phase(self) -> str:
        """"monitor" (collecting post-barrier pushes) or "barrier" (a barrier is placed)."""
        return "monitor" if self.target is None else "barrier"

    def predicted(self) -> np.ndarray | None:
        """The (n, R) predicted push times the current barrier was placed on (None while monitoring)."""
        if self.t_prev_at is None or self.t_last_at is None:
            return None
        return predict_matrix(self.t_prev_at, self.t_last_at, self.R)

    def _place(self) -> None:
        """Predict every worker's next R pushes and place the barrier with ZipLine."""
        self.t_prev_at = [float(t) for t in self.t_prev]  # type: ignore[arg-type]
        self.t_last_at = [float(t) for t in self.t_last]  # type: ignore[arg-type]
        res = VARIANTS[self.variant](predict_matrix(self.t_prev_at, self.t_last_at, self.R))
        self.picks = list(res.picks)
        self.target = [c + k + 1 for c, k in zip(self.count, res.picks, strict=True)]
        self.t_sync = float(res.t_sync)
        self.d_pred = float(res.wait)

    def _release(self, now: float) -> None:
        """Every worker reached the barrier: count it, then start the next superstep (pulls return)."""
        waits = [now - float(t) for t in self.reached]  # type: ignore[arg-type]
        for p, w in enumerate(waits):
            self.barrier_wait_worker[p] += w
        self.barrier_wait_s += sum(waits)
        self.barrier_wait_max_s += max(waits)
        self.predicted_wait_s += float(self.d_pred or 0.0)
        self.barriers += 1
        self.last_release = now
        self._new_superstep()

    # ------------------------------------------------------------------ hooks
    def on_push(self, worker: int, push: Push, now: float) -> dict[str, Any] | None:
        self.apply(push.update, push.lr)
        self.count[worker] += 1
        self.t_prev[worker], self.t_last[worker] = self.t_last[worker], float(now)
        if self.stopping:  # no more barriers: every pull returns (base class)
            if not self.stop_counted:
                # the stop releases the workers held at an unfinished barrier now: count their waits once
                self.stop_counted = True
                for p, t in enumerate(self.reached):
                    if t is not None:
                        self.barrier_wait_worker[p] += now - float(t)
                        self.barrier_wait_s += now - float(t)
            return None
        if self.target is None and min(self.count) >= MONITOR:
            self._place()
        if self.target is not None and self.reached[worker] is None:
            assert self.t_sync is not None
            if self.count[worker] >= self.target[worker] or now >= self.t_sync:
                self.reached[worker] = float(now)
            if all(r is not None for r in self.reached):
                self._release(now)
                return {"barrier": self.barriers}
        return None

    def may_pull(self, worker: int, now: float) -> bool:
        return self.reached[worker] is None

    def on_pull_info(self, worker: int, now: float) -> dict[str, Any]:
        return {"barriers": self.barriers, "barrier_wait_s": self.barrier_wait_s, "phase": self.phase,
                "t_sync": self.t_sync}

    # ------------------------------------------------------------------ state
    _STATE = ("barriers", "barrier_wait_s", "barrier_wait_worker", "barrier_wait_max_s", "predicted_wait_s",
              "last_release", "count", "t_prev", "t_last", "target", "picks", "t_sync", "d_pred", "reached",
              "t_prev_at", "t_last_at", "stop_counted")

    def extra_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"variant": self.variant, "R": self.R}
        for k in self._STATE:
            v = getattr(self, k)
            out[k] = list(v) if isinstance(v, list) else v
        return out

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        if not state:
            return
        self.variant = str(state.get("variant", self.variant))
        self.R = int(state.get("R", self.R))
        for k in self._STATE:
            v = state[k]
            setattr(self, k, list(v) if isinstance(v, (list, tuple)) else v)

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "variant": self.variant, "R": self.R, "barriers": self.barriers,
                "barrier_wait_s": round(self.barrier_wait_s, 6),
                "barrier_wait_s_per_worker": [round(w, 6) for w in self.barrier_wait_worker],
                "barrier_wait_max_s": round(self.barrier_wait_max_s, 6),
                "predicted_wait_s": round(self.predicted_wait_s, 6)}
