"""`WorkerContext`: what a worker generator knows about its run — plain data, no engine objects.

The run plan builds one per worker (`edgestream.runner.plan.RunPlan.worker_context`) with the engine's
`should_stop(completed)` callback; sync/ never reads a config.

Stopping: an algorithm asks `ctx.should_stop(completed)` with the
number of steps it will have completed when the collective that carries its stop flag finishes (ddl:
`ctx.step + 1`, asked during the step's exchange; local SGD: `ctx.step`, asked at the averaging after
the period). A worker may get a different answer than its peers (each engine decides by its own
clock); algorithms therefore agree on stopping through that collective (the flag is reduced with the
data), so every worker leaves after the same step, and an engine's `stop.max_steps` rule
(`completed >= max_steps`) ends every algorithm after exactly max_steps steps (the local-SGD family
also shortens its last period to end there, see `max_steps`).

State contract (checkpoint and resume; DESIGN.md "One algorithm, two engines"):

* `step` counts the steps this worker has completed; `state` is everything else the algorithm carries
  from one step to the next (error-feedback residuals, adaptive Top-k's statistic, abs-sgd's previous
  weights and gradient sums, dbs-sgd's batch assignment and speed counters, AdaComm's F_0 and tau, a
  local-SGD period's progress, seeded compressors' draw counters). It holds tensors and plain values
  only (None, bool, int, float, str, and lists, tuples and dicts with str keys of these), so
  `torch.save` + `torch.load(..., weights_only=True)` round-trips it.
* At every `Log` request (the end of a step, or of an averaging round) the algorithm has brought
  `step` and `state` up to date. An engine may checkpoint then: `step`, a copy of `state` (torch.save
  copies), the model and optimizer state and its streams' positions. A worker started later with a
  `WorkerContext` holding that step and state, on a model and optimizer restored from the same
  checkpoint, continues exactly as the original would have (tests/unit/test_runner_state.py checks this
  bitwise for every algorithm). `state` is only guaranteed consistent AT the Log request: the
  algorithm edits it afterwards.
* A worker started with `state == {}` starts the algorithm from scratch (at `step`, which sets the
  learning-rate schedule and the injection draws).
* Batches are engine objects and never state. A worker may hold batches it has not acked at a Log
  (abs-sgd acks a batch one iteration after computing on it; their gradients are already in
  `state`): a restored worker never acks those, so an engine that checkpoints must record how far its
  streams were consumed (not only acked) for the restored worker to continue where it left off.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edgestream.models.optim import lr_at

#: should_stop(completed): whether the run stops once `completed` steps are done (see module doc)
StopTest = Callable[[int], bool]


def never_stop(completed: int) -> bool:
    """The default stop test: never."""
    return False


def _takes_completed(fn: Callable[..., bool]) -> StopTest:
    """`fn` itself, or for a callback written for the old zero-argument form, one that ignores
    `completed` (so engines built against that form keep working)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fn
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    if positional:
        return fn
    return lambda completed: fn()


@dataclass
class WorkerContext:
    """One worker's view of its run.

    rank, world_size: this worker i and the group size M.
    seed: the run seed (injection draws, seeded compressors).
    params: the algorithm's parameters (defaults merged in by `AlgorithmSpec.resolve`).
    lr, milestones, gamma: base learning rate eta and its step decay; milestones count steps.
    compression: the `compression:` block as a dict ({"name": "none"} = dense).
    injection: the ScaDLES injection block ({"alpha", "beta", "mode"}) or None.
    param_names: names of the trainable parameters (keys of per-tensor compressor state); None = "0", "1", ...
    should_stop: the engine's stop test, `should_stop(completed) -> bool` (max steps, time, target
        accuracy); see the module doc for what `completed` is.
    step: steps this worker has completed (local steps for the local-SGD family); the worker advances
        it before the step's `Log`.
    state: the algorithm's explicit state between steps (see the module doc's contract).
    max_steps: the run's step budget (stop.max_steps) or None; the local-SGD family ends its last
        period there so that the run stops after exactly max_steps steps.
    """

    rank: int
    world_size: int
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    lr: float = 0.1
    milestones: tuple[float, ...] = ()
    gamma: float = 0.2
    compression: dict[str, Any] = field(default_factory=lambda: {"name": "none"})
    injection: dict[str, Any] | None = None
    param_names: list[str] | None = None
    should_stop: StopTest = never_stop
    step: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    #: a drift response (`drift.on_detect: reweight`): (factor, until_step): this worker's exchange weight w_i is
    #: multiplied by factor until it completes until_step (edgestream.runner.responses); None: no reweighting
    reweight: tuple[float, int] | None = None
    #: the group's drift responses (edgestream.sync.drift.GroupDrift) when the run agrees on them, else None
    drift: Any = None

    def weight_factor(self) -> float:
        """The factor on this worker's exchange weight now (1.0 unless a drift response reweights it)."""
        rw = self.reweight
        return rw[0] if rw is not None and self.step < rw[1] else 1.0

    def __post_init__(self) -> None:
        self.should_stop = _takes_completed(self.should_stop)
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is out of range 0..{self.world_size - 1}")

    def lr_now(self) -> float:
        """eta at the current step: lr * gamma ** (milestones passed), times a drift response's boost while it
        lasts (`drift.on_detect: lr_boost`, agreed by the group: edgestream.sync.drift)."""
        eta = lr_at(self.step, self.lr, self.milestones, self.gamma)
        return eta if self.drift is None else eta * self.drift.lr_factor(self.step)

    def names(self, count: int) -> list[str]:
        """Per-tensor names for `count` gradients: `param_names` when given, else "0", "1", ..."""
        if self.param_names is not None:
            if len(self.param_names) != count:
                raise ValueError(f"{len(self.param_names)} parameter names for {count} tensors")
            return list(self.param_names)
        return [str(i) for i in range(count)]
