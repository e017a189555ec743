"""consgd(lambda) — ConSGD, a constant global learning rate on top of SSP (002 "ConSGD"; ALGORITHMS.md).

Workers push a gradient per step (`ps_worker.gradient_worker`); the PS applies every pushed update
u = -eta g on arrival scaled by a constant lambda, w <- w + lambda u, and pulls follow SSP(s)
(`SSPCoordinator`). lambda defaults to 1/M (002 "Choose lambda": with M workers at the same clock the
result is the average of their updates, w_{c+1} = w_c + (1/M) sum_i u_c^i).
"""

from __future__ import annotations

from typing import Any

from edgestream.sync.coordinator import ServerContext
from edgestream.sync.hyperparams import Param
from edgestream.sync.ps_worker import BATCH, gradient_worker
from edgestream.sync.requests import Push
from edgestream.sync.ssp import S, SSPCoordinator

LAMBDA = Param("lambda", None, "float", gt=0, le=1, optional=True,
               doc="global learning rate lambda in (0, 1] each update is scaled by; null = 1/M")
PARAMS = (LAMBDA, S, BATCH)
worker = gradient_worker


def consgd_lambda(ctx: ServerContext) -> float:
    """The run's lambda: the param, or 1/M when it is null."""
    lam = ctx.params.get("lambda")
    return 1.0 / ctx.world_size if lam is None else float(lam)


class ConSGDCoordinator(SSPCoordinator):
    """SSP pulls; every push applied on arrival with its learning rate scaled by lambda."""

    def on_push(self, worker: int, push: Push, now: float) -> dict[str, Any] | None:
        # w <- w + lambda u with u = -eta g: one server step at lr lambda * eta. Scaling the lr (not the
        # gradient) scales the whole SGD step, the server's weight-decay term included, as the paper
        # scales the worker's whole update u (its regularizer too); with the server momentum the buffer
        # sums the unscaled directions and lambda, a constant, multiplies the step as well.
        self.apply(push.update, consgd_lambda(self.ctx) * push.lr)
        return None

    def on_pull_info(self, worker: int, now: float) -> dict[str, Any]:
        return {**super().on_pull_info(worker, now), "lambda": consgd_lambda(self.ctx)}
