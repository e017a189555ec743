"""The workers' model replicas and optimizers, and the global model that evaluation scores.

Two layouts, chosen per run:

* per-worker: every worker has its own replica (a deep copy of one seeded initial model) and its own
  SGD optimizer (the run's momentum and weight decay), so algorithms whose workers drift apart (local
  SGD, delayed updates) behave exactly as on separate machines.
* shared (synchronous algorithms): all workers use ONE replica and optimizer, since every worker
  applies the same update and the replicas would stay identical. An `Apply` is deferred until every
  worker has applied: the first worker's update is kept, each later one must be bit-for-bit equal
  (torch.equal) and the optimizer then steps once. Model reads (Compute, GetParams) see the version
  the reading worker is at; if a worker needs a version the shared replica does not hold (it applied
  and reads before the others applied, as in ABS-SGD where workers apply at different times), or
  updates differ, or a worker sets parameters, the run falls back to per-worker replicas for good
  (M deep copies, once; `unshared` says why). So sharing never changes results, only cost: one
  optimizer step and one model in memory instead of M. A model with buffers (batch-norm running
  statistics) is never shared: every worker's forward pass updates them with its own batch, so one
  replica would update them M times per step where M separate machines update each once.

Per step only references move: gradients are handed out as the `.grad` tensors of the backward pass
(fresh tensors each step, since gradients are reset to None before it) and an update is installed as
`.grad` for `optimizer.step()` (torch's multi-tensor SGD). `wall` accumulates the wall time of the
torch work (forward/backward, optimizer; the engine adds evaluation) for the simulator's profile.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from edgestream.models import build_model, build_optimizer, param_names, set_lr
from edgestream.sync.requests import ComputeResult
from edgestream.tasks import CLASSIFICATION, Task

#: why a model with buffers is never shared (see module doc)
BUFFERS_REASON = "the model has buffers (batch-norm statistics) that every worker updates with its own batches"


class Replicas:
    """The replicas of `world` workers of `model` -- a built model (the run plan's `build_model()`: copied),
    or a model name built here for `shape` and `num_classes` outputs -- initialised identically from
    `seed` (the global torch RNG is left as it was); `shared` starts in the shared layout (see module
    doc). task: the loss a Compute takes the gradients of (edgestream.tasks; default classification)."""

    def __init__(self, model: str | nn.Module, shape: tuple[int, ...], num_classes: int, world: int,
                 lr: float, momentum: float, weight_decay: float, seed: int, shared: bool = False, *,
                 task: Task = CLASSIFICATION) -> None:
        if isinstance(model, nn.Module):
            base = copy.deepcopy(model)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                base = build_model(model, shape, num_classes)
        self.base = base
        self.task = task
        self.world = world
        self.names = param_names(base)
        self._optim_args = (lr, momentum, weight_decay)
        has_buffers = any(True for _ in base.buffers())
        self.shared = shared and world > 1 and not has_buffers
        count = 1 if self.shared else world
        self.models = [copy.deepcopy(base) for _ in range(count)]
        self.optimizers = [self._optimizer(m) for m in self.models]
        self.params = [self._trainable(m) for m in self.models]
        self.num_params = sum(p.numel() for p in self.params[0])
        self.version = 0                          # updates the shared replica has applied
        self.wver = [0] * world                   # updates each worker has applied
        self.pending: tuple[list[Tensor], float] | None = None
        self.applied: set[int] = set()
        self.unshared: str | None = BUFFERS_REASON if shared and world > 1 and has_buffers else None
        self._scratch: nn.Module | None = None
        self.wall = {"forward_backward": 0.0, "optimizer": 0.0, "eval": 0.0}
        #: score every Compute's batch before its step (prequential evaluation: ComputeResult.scores)
        self.scoring = False
        for m in self.models:
            m.train()

    # ------------------------------------------------------------------ helpers
    def _optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        opt = build_optimizer(model, *self._optim_args)
        for group in opt.param_groups:  # multi-tensor SGD kernels: the same update, far less Python per step
            group["foreach"] = True
        return opt

    @staticmethod
    def _trainable(model: nn.Module) -> list[nn.Parameter]:
        return [p for p in model.parameters() if p.requires_grad]

    def _slot(self, rank: int) -> int:
        """Index of the model worker `rank` reads, splitting the shared replica if it must."""
        if not self.shared:
            return rank
        if self.wver[rank] != self.version:
            self._unshare(f"worker {rank} read its model after applying an update others had not applied")
            return rank
        return 0

    def settled(self, rank: int) -> bool:
        """Whether worker `rank`'s model is the one it reads next, and stays so until it applies or sets
        parameters itself: always on per-worker replicas; on the shared replica unless the worker has
        applied an update that its peers have not applied yet (the replica does not hold it). A batched
        pass may serve a pending compute of a settled worker early (edgestream.sim.batched)."""
        return not self.shared or self.wver[rank] == self.version

    def _step(self, slot: int, update: Sequence[Tensor], lr: float) -> None:
        t0 = time.perf_counter()
        params = self.params[slot]
        if len(update) != len(params):
            raise ValueError(f"Apply: {len(update)} update tensors for {len(params)} parameters")
        for p, u in zip(params, update, strict=True):
            u = u.detach()
            if u.shape != p.shape or u.dtype != p.dtype:
                u = u.reshape(p.shape).to(p.dtype)
            p.grad = u
        opt = self.optimizers[slot]
        set_lr(opt, lr)
        opt.step()
        self.wall["optimizer"] += time.perf_counter() - t0

    def _unshare(self, reason: str) -> None:
        """Give every worker its own copy of the shared replica and optimizer state, then apply the
        deferred update to the workers that already applied it."""
        model, opt = self.models[0], self.optimizers[0]
        state = opt.state_dict()
        models, optimizers = [], []
        for _ in range(self.world):
            m = copy.deepcopy(model)
            o = self._optimizer(m)
            o.load_state_dict(copy.deepcopy(state))  # load_state_dict alone would share the momentum buffers
            models.append(m)
            optimizers.append(o)
        self.models, self.optimizers = models, optimizers
        self.params = [self._trainable(m) for m in models]
        self.shared = False
        self.unshared = reason
        if self.pending is not None:
            update, lr = self.pending
            for r in sorted(self.applied):
                self._step(r, update, lr)
        self.pending, self.applied = None, set()

    # ------------------------------------------------------------------ requests
    def compute(self, rank: int, x: Tensor, y: Tensor) -> ComputeResult:
        """Forward/backward of the task's mean loss on worker `rank`'s model."""
        slot = self._slot(rank)
        t0 = time.perf_counter()
        model, params = self.models[slot], self.params[slot]
        for p in params:
            p.grad = None
        output = model(x)
        loss = self.task.loss(output, y)
        loss.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        scores = self.task.sample_sums(output, y) if self.scoring else None
        result = ComputeResult(grads, float(loss.detach()), int(y.shape[0]), scores)
        self.wall["forward_backward"] += time.perf_counter() - t0
        return result

    def apply(self, rank: int, update: Sequence[Tensor], lr: float) -> None:
        """One optimizer step of worker `rank` with `update` as the gradient, at learning rate lr."""
        if self.shared:
            if self.wver[rank] != self.version:
                self._unshare(f"worker {rank} applied twice before the others applied once")
            elif self.pending is None:
                self.pending, self.applied = (list(update), float(lr)), {rank}
                self.wver[rank] += 1
            elif self._same(update, lr):
                self.applied.add(rank)
                self.wver[rank] += 1
            else:
                self._unshare(f"worker {rank} applied an update that differs from its peers'")
            if self.shared:
                if len(self.applied) == self.world:
                    assert self.pending is not None
                    self._step(0, *self.pending)
                    self.version += 1
                    self.pending, self.applied = None, set()
                return
        self._step(rank, update, lr)

    def _same(self, update: Sequence[Tensor], lr: float) -> bool:
        assert self.pending is not None
        ref, ref_lr = self.pending
        # `a is b`: workers of one simulated all-reduce usually hold the very same update tensors
        # (edgestream.sim.collectives.ReduceResult.derive), equal without comparing their elements
        return float(lr) == ref_lr and len(update) == len(ref) and all(
            a is b or torch.equal(a, b) for a, b in zip(update, ref, strict=True))

    def reset_optimizer(self, rank: int) -> None:
        """Forget worker `rank`'s optimizer state (momentum buffers): a drift response. On the shared replica
        every worker resets at the same step, before any of them applies it (edgestream.sync.drift), so the
        one optimizer is reset once in effect, as each of M separate machines resets its own."""
        self.optimizers[0 if self.shared else rank].state.clear()

    def get_params(self, rank: int) -> list[Tensor]:
        """Detached copies of worker `rank`'s trainable parameters."""
        slot = self._slot(rank)  # first: it may split the shared replica
        return [p.detach().clone() for p in self.params[slot]]

    def set_params(self, rank: int, tensors: Sequence[Tensor]) -> None:
        """Overwrite worker `rank`'s trainable parameters (optimizer state kept)."""
        if self.shared:
            self._unshare(f"worker {rank} set its parameters")
        params = self.params[rank]
        if len(tensors) != len(params):
            raise ValueError(f"SetParams: {len(tensors)} tensors for {len(params)} parameters")
        with torch.no_grad():
            torch._foreach_copy_(params, [t.detach().reshape(p.shape).to(p.dtype)
                                          for p, t in zip(params, tensors, strict=True)])

    # ------------------------------------------------------------------ global model
    def identical(self) -> bool:
        """Whether every worker holds exactly the same parameters (always, while shared)."""
        if self.shared:
            return self.pending is None
        ref = self.params[0]
        return all(all(torch.equal(a, b) for a, b in zip(ref, ps, strict=True)) for ps in self.params[1:])

    def global_model(self, synchronous: bool) -> nn.Module:
        """The model evaluation scores: the shared replica, or rank 0's for synchronous algorithms (all
        replicas equal), else the parameter average of all replicas (buffers, e.g. batch-norm
        statistics, from rank 0)."""
        if self.shared or synchronous or len(self.models) == 1:
            return self.models[0]
        if self._scratch is None:
            self._scratch = copy.deepcopy(self.base)
        with torch.no_grad():
            acc = [p.detach().clone() for p in self.params[0]]
            for ps in self.params[1:]:
                torch._foreach_add_(acc, [p.detach() for p in ps])
            torch._foreach_div_(acc, float(len(self.params)))
            self._scratch.load_state_dict(self.models[0].state_dict())
            torch._foreach_copy_(self._trainable(self._scratch), acc)
        return self._scratch

    def model_with(self, tensors: Sequence[Tensor]) -> nn.Module:
        """A scratch model holding `tensors` as its trainable parameters (the parameter server's W for
        evaluation; buffers from rank 0's replica)."""
        if self._scratch is None:
            self._scratch = copy.deepcopy(self.base)
        with torch.no_grad():
            self._scratch.load_state_dict(self.models[0].state_dict())
            torch._foreach_copy_(self._trainable(self._scratch), [t.detach() for t in tensors])
        return self._scratch

    def layout(self) -> dict[str, Any]:
        """For the summary: shared or per-worker, and why sharing ended."""
        return {"replicas": "shared" if self.shared else "per-worker", "unshared_reason": self.unshared}
