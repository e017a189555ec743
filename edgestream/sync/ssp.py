"""ssp(s) — stale synchronous parallel (Ho et al. 2013; 002 Alg. 1; ALGORITHMS.md).

Each worker's clock c is the number of updates it has pushed (iterations completed). The PS applies
every update on arrival; a worker at clock c may proceed only if the slowest worker's clock
c_min >= c - s: its pull (after its c-th push) blocks exactly while c_min < c - s. Default s = 3.
`SSPCoordinator` is also the pull rule of ConSGD and DynSGD (002 builds them on SSP).
"""

from __future__ import annotations

from typing import Any

from edgestream.sync.coordinator import Coordinator
from edgestream.sync.hyperparams import Param
from edgestream.sync.ps_worker import BATCH, gradient_worker

S = Param("s", 3, "int", ge=0, doc="staleness bound: a worker runs at most s clocks ahead of the slowest")
PARAMS = (S, BATCH)
worker = gradient_worker


def ssp_blocks(clock: int, c_min: int, s: int) -> bool:
    """Whether a worker at `clock` must wait: c_min < clock - s."""
    return c_min < clock - s


class SSPCoordinator(Coordinator):
    """Apply on arrival; a pull returns once min_j c_j >= c_i - s (c = pushes so far)."""

    def may_pull(self, worker: int, now: float) -> bool:
        return not ssp_blocks(self.pushes[worker], min(self.pushes), self.bound(worker))

    def bound(self, worker: int) -> int:
        """The staleness bound for `worker` now (s; DSSP varies it)."""
        return int(self.ctx.params.get("s", 3))

    def on_pull_info(self, worker: int, now: float) -> dict[str, Any]:
        return {"clock": self.pushes[worker], "c_min": min(self.pushes)}
