"""The parameter-server side of an algorithm: a coordinator, a plain object with explicit state.

An engine hosts one coordinator per run (the simulator as a PS node with network delay, `ps/` behind
Kafka topics) and calls it with time passed in; it never reads a clock and does no I/O, so it is
unit-testable without any engine:

    facts = coord.push(worker, push, now)    # a `Push` arrived; returns facts to record (staleness...)
    coord.ready(worker, now)                 # may this worker's pending pull return now?
    reply = coord.pull(worker, now)          # answer it: a `Pulled` (model copy, version, stop, info)
    coord.next_timer()                       # the time the coordinator wants `timer(now)` called, or None
    coord.timer(now)                         # ... and the call

After every push and timer the engine re-asks `ready` for the workers whose pulls are pending.

The optimizer of a PS algorithm runs here: the coordinator owns the global model W (`model()`) and a
`ServerSGD` (the run's optim.server momentum and weight decay, plain SGD by default, unless the algorithm
says otherwise). Stopping reaches
workers through pull replies: once any worker's push carries a stop vote (or the engine calls
`stop()`), every pending and later pull may return and says `stop=True`.

The model's floating buffers (BatchNorm running statistics) travel beside W, attached by the host, not
the algorithm (edgestream.sync.buffers): the host calls `init_buffers(initial)` once, `push_buffers(worker,
tensors)` with each push, and hands `buffers()` out with each reply; by default the PS's buffers are the
mean of the workers' latest (`on_buffers` may read them otherwise).

Subclasses (one per algorithm, next to its worker) override the hooks `on_push`, `may_pull`,
`on_pull_info`, `on_timer`/`next_timer`, `on_buffers` and `extra_state`/`load_extra_state`. Their state
is tensors and plain values, so `state_dict()` round-trips through `torch.save` / `torch.load(weights_only=True)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgestream.models.optim import lr_at
from edgestream.sync.buffers import BufferMean
from edgestream.sync.requests import Pulled, Push

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor


@dataclass
class ServerContext:
    """What a coordinator knows about its run: world_size M, the algorithm's resolved params, the
    optimizer settings (lr, milestones, gamma, momentum, weight_decay), the seed and the expected step
    time of the slowest device (`step_s`)."""

    world_size: int
    params: dict[str, Any] = field(default_factory=dict)
    lr: float = 0.1
    milestones: tuple[float, ...] = ()
    gamma: float = 0.2
    momentum: float = 0.0
    weight_decay: float = 0.0
    seed: int = 0
    #: the slowest device's expected step time (seconds) at the algorithm's batch, as the engine knows it
    #: (its compute model); None = unknown. Coordinators that scale time with the workload use it (ADSP).
    step_s: float | None = None

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")

    def lr_at(self, step: int) -> float:
        """eta after `step` steps (the run's step decay)."""
        return lr_at(step, self.lr, self.milestones, self.gamma)


class ServerSGD:
    """SGD on the coordinator's tensors, as torch.optim.SGD (dampening 0, no Nesterov):
    d = direction + weight_decay * w; buf = momentum * buf + d; w -= lr * buf."""

    def __init__(self, params: list[Tensor], momentum: float = 0.0, weight_decay: float = 0.0) -> None:
        self.params = params
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.buf: list[Tensor] | None = None

    def step(self, direction: Sequence[Tensor], lr: float) -> None:
        import torch

        with torch.no_grad():
            d = [t.detach().reshape(p.shape).to(p.dtype) for t, p in zip(direction, self.params, strict=True)]
            if self.weight_decay:
                d = torch._foreach_add(d, self.params, alpha=self.weight_decay)
            if self.momentum:
                if self.buf is None:
                    self.buf = [t.clone() for t in d]
                else:
                    torch._foreach_mul_(self.buf, self.momentum)
                    torch._foreach_add_(self.buf, d)
                d = self.buf
            torch._foreach_add_(self.params, d, alpha=-float(lr))

    def state_dict(self) -> dict[str, Any]:
        return {"buf": None if self.buf is None else [t.clone() for t in self.buf]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        buf = state.get("buf")
        self.buf = None if buf is None else [t.clone() for t in buf]


class Coordinator:
    """The base coordinator: W, its `ServerSGD`, the version (updates applied to W), per-worker push
    and pull counts and the versions each worker last pulled, the stop flag. By default it applies
    every push on arrival at the push's lr (ASP) and lets every pull return at once."""

    #: the momentum / weight decay of the server optimizer; None = the run's optim.server (ctx.momentum,
    #: ctx.weight_decay); a number = the algorithm's own (then optim.server's value is not used)
    server_momentum: float | None = None
    server_weight_decay: float | None = None

    def __init__(self, ctx: ServerContext, model: Sequence[Tensor]) -> None:
        self.ctx = ctx
        self.world = ctx.world_size
        self.w = [t.detach().clone() for t in model]
        mu = ctx.momentum if self.server_momentum is None else self.server_momentum
        wd = ctx.weight_decay if self.server_weight_decay is None else self.server_weight_decay
        self.opt = ServerSGD(self.w, mu, wd)
        self.version = 0
        self.stopping = False
        self.pushes = [0] * self.world
        self.pulls = [0] * self.world
        self.pulled_version = [0] * self.world
        self.bufs = BufferMean((), self.world)  # the model's floating buffers (init_buffers)

    # ------------------------------------------------------------------ what engines call
    def push(self, worker: int, push: Push, now: float) -> dict[str, Any]:
        """A push from `worker` arrived at `now`: count it, note a stop vote, run `on_push`. Returns
        facts for the engine to record: staleness (versions applied since the update's version) and
        whatever `on_push` adds."""
        self._check(worker)
        if push.stop:
            self.stopping = True
        staleness = self.version - int(push.version)
        self.pushes[worker] += 1
        facts = {"staleness": staleness}
        facts.update(self.on_push(worker, push, now) or {})
        return facts

    def ready(self, worker: int, now: float) -> bool:
        """Whether `worker`'s pending pull may return now (always once the run is stopping)."""
        self._check(worker)
        return self.stopping or bool(self.may_pull(worker, now))

    def pull(self, worker: int, now: float, *, copy: bool = True) -> Pulled:
        """Answer `worker`'s pull (call when `ready`): a copy of W, the version, stop, info. `copy=False`
        hands out W itself, for a host that serialises it before W changes again (the Kafka PS)."""
        self._check(worker)
        self.pulls[worker] += 1
        self.pulled_version[worker] = self.version
        params = [t.clone() for t in self.w] if copy else list(self.w)
        return Pulled(params, self.version, self.stopping, self.on_pull_info(worker, now))

    def timer(self, now: float) -> None:
        """The engine's call at (or after) `next_timer()`."""
        self.on_timer(now)

    def stop(self) -> None:
        """The engine ends the run (a hard limit): every pull may return and says stop."""
        self.stopping = True

    def model(self) -> list[Tensor]:
        """The global model W (the coordinator's own tensors: read, do not modify)."""
        return self.w

    def init_buffers(self, initial: Sequence[Tensor]) -> None:
        """The model's initial floating buffers (the host calls this once, before any push; none: a model
        without floating buffers)."""
        self.bufs = BufferMean(initial, self.world)

    def push_buffers(self, worker: int, tensors: Sequence[Tensor]) -> None:
        """`worker`'s current floating buffers, sent with its push (the host calls this beside `push`)."""
        self._check(worker)
        if len(self.bufs):
            self.on_buffers(worker, tensors)

    def buffers(self) -> list[Tensor]:
        """The global floating buffers, in `floating_buffers(model)` order: tensors that are never changed
        afterwards (read, do not modify); [] for a model without them."""
        return self.bufs.value()

    # ------------------------------------------------------------------ algorithm hooks
    def on_push(self, worker: int, push: Push, now: float) -> dict[str, Any] | None:
        """Apply or buffer the update; default: apply at once (ASP)."""
        self.apply(push.update, push.lr)
        return None

    def may_pull(self, worker: int, now: float) -> bool:
        """Whether `worker`'s pull may return (not stopping); default: always."""
        return True

    def on_pull_info(self, worker: int, now: float) -> dict[str, Any]:
        """Plain values the reply carries to `worker` (`Pulled.info`)."""
        return {}

    def next_timer(self) -> float | None:
        """When the coordinator wants `timer(now)`; None: no timer."""
        return None

    def on_timer(self, now: float) -> None:
        """Timer hook (barriers, schedulers)."""

    def on_buffers(self, worker: int, tensors: Sequence[Tensor]) -> None:
        """`worker`'s floating buffers arrived; default: they replace its previous ones and the global
        buffers are the mean of every worker's latest (edgestream.sync.buffers)."""
        self.bufs.update(worker, tensors)

    # ------------------------------------------------------------------ helpers for subclasses
    def apply(self, direction: Sequence[Tensor], lr: float) -> None:
        """One server optimizer step W -= lr * (direction, with momentum / weight decay); version + 1."""
        self.opt.step(direction, lr)
        self.version += 1

    def _check(self, worker: int) -> None:
        if not 0 <= worker < self.world:
            raise ValueError(f"worker {worker} is out of range 0..{self.world - 1}")

    # ------------------------------------------------------------------ state
    def extra_state(self) -> dict[str, Any]:
        """The subclass's own state (tensors and plain values)."""
        return {}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `extra_state` returned."""

    def state_dict(self) -> dict[str, Any]:
        """Everything the coordinator carries (copies): W, optimizer, counters, stop, the subclass's, and the
        floating buffers (only for a model that has them)."""
        state = {"w": [t.clone() for t in self.w], "opt": self.opt.state_dict(), "version": self.version,
                 "stopping": self.stopping, "pushes": list(self.pushes), "pulls": list(self.pulls),
                 "pulled_version": list(self.pulled_version), "extra": self.extra_state()}
        if len(self.bufs):
            state["buffers"] = self.bufs.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        import torch

        with torch.no_grad():
            torch._foreach_copy_(self.w, list(state["w"]))
        self.opt.load_state_dict(state["opt"])
        self.version = int(state["version"])
        self.stopping = bool(state["stopping"])
        self.pushes = [int(x) for x in state["pushes"]]
        self.pulls = [int(x) for x in state["pulls"]]
        self.pulled_version = [int(x) for x in state["pulled_version"]]
        if len(self.bufs) and state.get("buffers") is not None:
            self.bufs.load_state_dict(state["buffers"])
        # a state without buffers (saved before they reached the PS): they stay the initial ones until
        # each worker's next push brings its own again
        self.load_extra_state(state.get("extra", {}))

    def summary(self) -> dict[str, Any]:
        """Run-level figures for the engine's summary."""
        return {"version": self.version, "pushes": list(self.pushes), "pulls": list(self.pulls)}


#: coordinator factory registered beside an algorithm's worker: (server context, initial model) -> coordinator
CoordinatorFactory = Callable[[ServerContext, Sequence["Tensor"]], Coordinator]
