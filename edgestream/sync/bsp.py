"""bsp — bulk synchronous parallel on the parameter server (000 section 5.1 baseline; ALGORITHMS.md
"Parameter-server family").

Workers push a gradient per step (`ps_worker.gradient_worker`). The PS buffers the gradients of a
step until all M workers have pushed theirs, then applies their mean once (W -= eta mean_i g_i, the
server optimizer with the run's momentum and weight decay), version + 1: one version per step. A
worker's pull after its k-th push returns once step k has been applied (version >= k), so every
worker trains every step on the same model and no update is ever stale.

Stopping (the base coordinator): once any push carries a stop vote, every pull returns at once and
says stop, so a worker waiting at the barrier never waits for a peer that has already left; a step
that not every worker pushed is then never applied.

Where ALGORITHMS.md is silent: the step's learning rate is the mean of the pushes' lr (every worker
is at the same step, so they agree); compressed pushes are averaged after decompression (the PS
receives the dense update `ps_worker.encode` reconstructs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from edgestream.sync.coordinator import Coordinator
from edgestream.sync.ps_worker import BATCH, gradient_worker
from edgestream.sync.requests import Push

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    import torch

PARAMS = (BATCH,)
worker = gradient_worker


class BSPCoordinator(Coordinator):
    """Sum the pushes of the current round (a step); at the M-th, apply their mean once at `round_lr()`.
    A pull returns once the round its worker pushed for is applied (version >= the worker's pushes).
    The PS-side ADACOMM baselines (ps_local) are this barrier with commits instead of gradients; they
    use the hooks `round_lr`, `on_round_push` and `on_round`."""

    def __init__(self, ctx: Any, model: Any) -> None:
        super().__init__(ctx, model)
        self.sum: list[torch.Tensor] | None = None   # sum of this round's updates so far
        self.count = 0                                # pushes of this round so far
        self.lr_sum = 0.0

    def on_push(self, worker: int, push: Push, now: float) -> dict[str, Any] | None:
        # a worker pushes round k only after its pull of round k - 1 returned, i.e. after round k - 1 was
        # applied: the buffer only ever holds the current round (this worker's k-th push is round k)
        import torch

        upd = [t.detach().reshape(w.shape).to(w.dtype) for t, w in zip(push.update, self.w, strict=True)]
        if self.sum is None:
            self.sum = [t.clone() for t in upd]
        else:
            torch._foreach_add_(self.sum, upd)
        self.count += 1
        self.lr_sum += float(push.lr)
        self.on_round_push(push)
        if self.count == self.world:
            self.apply(torch._foreach_div(self.sum, float(self.world)), self.round_lr())
            self.sum, self.count, self.lr_sum = None, 0, 0.0
            self.on_round()
        return None

    def round_lr(self) -> float:
        """The learning rate of the round's step: the mean of the pushes' lr (every worker is at the
        same step, so they agree)."""
        return self.lr_sum / self.world

    def on_round_push(self, push: Push) -> None:
        """A push of the current round arrived (after it was added to the sum)."""

    def on_round(self) -> None:
        """The round was applied (version + 1)."""

    def may_pull(self, worker: int, now: float) -> bool:
        return self.version >= self.pushes[worker]

    def on_pull_info(self, worker: int, now: float) -> dict[str, Any]:
        return {"step": self.version}

    def extra_state(self) -> dict[str, Any]:
        return {"sum": None if self.sum is None else [t.clone() for t in self.sum], "count": self.count,
                "lr_sum": self.lr_sum}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        s = state.get("sum")
        self.sum = None if s is None else [t.clone() for t in s]
        self.count = int(state.get("count", 0))
        self.lr_sum = float(state.get("lr_sum", 0.0))
