"""dynsgd — DynSGD, a dynamic per-version learning rate on top of SSP (002 Alg. 2; ALGORITHMS.md).

Workers push a gradient per step (`ps_worker.gradient_worker`); pulls follow SSP(s)
(`SSPCoordinator`). The PS keeps V(m), the version worker m's next update is based on, S(v) the
number of updates received for version v (starting at 1) and u(PS, v) the combined update of version
v. On a push of u from worker m:

    v = V(m); d = S(v); delta = (u - u(PS, v)) / d; w += delta; u(PS, v) += delta
    S(v) += 1; V(m) += 1; clear u(PS, v) and S(v) once every V(.) > v

The first update of a version is applied whole (d = 1); the d-th moves w by (u_d - mean of the
first d-1) / d, so after d updates w has moved by their mean: updates based on the same version are
averaged, not summed (002 "Fast staleness computing": u(PS, i) = sum_j u_j / staleness(j)).

Choices where ALGORITHMS.md is silent (following the paper):

* Version = the worker's clock. V(m) is incremented on every push of m (Alg. 2 line 9), so it is m's
  push count: the c-th updates of all workers form version c (the paper's f_clock). `Push.version`
  (the global model version the worker last pulled, bumped by every applied delta) plays no part in
  the grouping; the base class still measures staleness against it (deltas applied since that pull).
* Units. The coordinator keeps u(PS, v) in gradient units and applies delta through the server
  optimizer at the push's lr, `apply(delta_g, lr)`, so with momentum 0 and weight decay 0 w moves by
  exactly -lr * delta_g = delta_u. Within one version all updates share the lr unless a step-decay
  milestone falls inside it; then the version is averaged in gradient units at the newest lr.
* Weight decay is folded into each gradient (g + wd * w at arrival) before averaging and the server
  optimizer's own weight decay is off, so it is averaged with the updates (applied once per version,
  not once per push). Server momentum (optim.server.momentum) acts on the applied deltas, i.e. per
  push; PS configs normally use momentum 0 (see the context notes on async momentum).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from edgestream.sync.coordinator import ServerContext
from edgestream.sync.ps_worker import BATCH, gradient_worker
from edgestream.sync.requests import Push
from edgestream.sync.ssp import S, SSPCoordinator

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor

PARAMS = (S, BATCH)
worker = gradient_worker


class DynSGDCoordinator(SSPCoordinator):
    """SSP pulls; each push applied as its correction to the running mean of its version (module doc)."""

    server_weight_decay = 0.0  # folded into the averaged gradients instead (module doc)

    def __init__(self, ctx: ServerContext, model: Sequence[Tensor]) -> None:
        super().__init__(ctx, model)
        self.V = [0] * self.world                   # V(m): the version m's next update is based on
        self.S: dict[int, int] = {}                 # S(v): updates of version v received + 1 (absent: 1)
        self.U: dict[int, list[Tensor]] = {}        # u(PS, v) in gradient units (absent: 0)

    def on_push(self, worker: int, push: Push, now: float) -> dict[str, Any] | None:
        import torch

        v = self.V[worker]
        d = self.S.get(v, 1)
        g = [t.detach().reshape(p.shape).to(p.dtype) for t, p in zip(push.update, self.w, strict=True)]
        if self.ctx.weight_decay:
            g = torch._foreach_add(g, self.w, alpha=float(self.ctx.weight_decay))
        u = self.U.get(v)
        delta = [t.clone() for t in g] if u is None else torch._foreach_sub(g, u)
        if d != 1:
            torch._foreach_div_(delta, float(d))
        self.apply(delta, push.lr)                  # w += delta (as -lr * delta_g)
        if u is None:
            self.U[v] = [t.clone() for t in delta]
        else:
            torch._foreach_add_(u, delta)
        self.S[v] = d + 1
        self.V[worker] = v + 1
        low = min(self.V)
        for old in [k for k in self.U if k < low]:  # every V(.) > old: nobody adds to it again
            del self.U[old]
            self.S.pop(old, None)
        return {"dyn_version": v, "dyn_d": d}

    def extra_state(self) -> dict[str, Any]:
        keys = sorted(self.U)
        return {"V": list(self.V), "versions": keys, "S": [self.S[k] for k in keys],
                "U": [[t.clone() for t in self.U[k]] for k in keys]}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        self.V = [int(x) for x in state.get("V", [0] * self.world)]
        keys = [int(k) for k in state.get("versions", [])]
        self.S = {k: int(s) for k, s in zip(keys, state.get("S", []), strict=True)}
        self.U = {k: [t.clone() for t in u] for k, u in zip(keys, state.get("U", []), strict=True)}

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "dyn_live_versions": len(self.U)}
