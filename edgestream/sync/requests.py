"""The requests an algorithm's worker generator yields, and what an engine sends back.

An algorithm never performs I/O, never reads a clock and never talks to another worker: it yields one
of these plain dataclasses and receives the result (``result = yield Request(...)``). The simulator
turns a request into virtual-time events, the real runtime performs it (Kafka poll, torch
forward/backward, torch.distributed collective), and the lockstep engine (edgestream.runner.lockstep)
performs it in one process. Every engine runs a worker through the one request loop,
`edgestream.runner.drive`.

Contract every engine keeps (see each class for its result):

* Collectives (`AllReduce`, `AllGather`, and `Start` of one) are matched by ORDER: every worker of
  the group issues the same sequence of collectives, and the k-th of each worker form one operation.
* `TakeBatch` blocks until the worker's stream holds the batch; `Wait` blocks until what it started
  has completed; `Poll` never blocks.
* Parameter-server requests (`Push`, `Pull`) go to the run's coordinator (edgestream.sync.coordinator),
  which the engine hosts (a PS node in the simulator). A worker's pushes arrive in the order sent, and
  each before the worker's next request is performed.
  `Start(Pull())` is a non-blocking pull and `Start(Sleep(s))` a timer: both return a `Handle` for
  `Poll` / `Wait` (a timer's result is None).
* Results handed to different workers are independent tensors (a worker may modify its own).
* Every tensor a worker hands a collective lives on its gradients' device (metadata such as weights
  and stop flags included), so a CUDA engine can reduce them with NCCL.
* `Log` ends a step (or an averaging round): at a Log the worker's `ctx.step` and `ctx.state` are
  complete and consistent, so an engine may checkpoint there (edgestream.sync.context, "State
  contract").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from edgestream.compression.base import payload_nbytes

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor

ReduceOp = Literal["weighted_mean", "sum"]


class Batch(Protocol):
    """What `TakeBatch` returns; engine-defined. `n` counts the samples, injected ones included;
    x, y are the inputs and labels; anything else (offsets to commit) is opaque to algorithms."""

    n: int
    x: Any
    y: Any


# ---------------------------------------------------------------- data and compute


@dataclass(frozen=True)
class TakeBatch:
    """Take the worker's next batch from its stream (result: a `Batch`).

    size None: the engine applies the run's buffer policy and batch policy (e.g. ScaDLES
    b_i = clip(S_i(t), min, max)) and waits until the policy is ready. An explicit size overrides the
    batch policy (dbs-sgd assignments, abs-sgd reference batches). Samples injected by other workers
    since the last batch are added (and counted in `Batch.n`).
    """

    size: int | None = None

    def __post_init__(self) -> None:
        if self.size is not None and self.size < 1:
            raise ValueError(f"TakeBatch.size must be >= 1 or None, got {self.size}")


@dataclass(frozen=True)
class Compute:
    """Forward/backward of the worker's model replica on `batch` (result: `ComputeResult`)."""

    batch: Any


@dataclass
class ComputeResult:
    """grads: mean-loss gradients, one per trainable parameter in `parameters()` order; loss: the mean
    loss of the batch; n: its sample count."""

    grads: list[Tensor]
    loss: float
    n: int
    #: the batch's per-sample prequential scores (`Task.sample_sums` of the forward pass these gradients
    #: come from, taken before the step that trains on it), when the run evaluates prequentially; else None
    scores: Any = None


@dataclass(frozen=True)
class Ack:
    """The step that used `batch` is applied: commit its offsets (at-least-once). Result: None."""

    batch: Any


@dataclass(frozen=True)
class Inject:
    """ScaDLES data injection: send `count` samples of `batch` to each of the `targets` devices'
    injection queues; they join those devices' next batch. `indices` picks which batch positions
    (None: the first `count`). The engine counts the bytes. Result: None."""

    batch: Any
    targets: list[int]
    count: int
    indices: list[int] | None = None


# ---------------------------------------------------------------- collectives


@dataclass
class AllReduce:
    """A collective over all workers of the group (result: list[Tensor], same shapes).

    op "weighted_mean": sum_i w_i t_i / sum_i w_i, with w_i this worker's `weight` (weight = b_i gives
    ScaDLES aggregation, 1.0 a plain average). op "sum": sum_i t_i (weight must stay 1.0).
    """

    tensors: list[Tensor]
    weight: float = 1.0
    op: ReduceOp = "weighted_mean"

    def __post_init__(self) -> None:
        if self.op not in ("weighted_mean", "sum"):
            raise ValueError(f"AllReduce.op must be 'weighted_mean' or 'sum', got {self.op!r}")
        if self.op == "sum" and self.weight != 1.0:
            raise ValueError("AllReduce.weight applies to op 'weighted_mean' only")


@dataclass
class AllGather:
    """Every worker contributes `payload`; result: list over workers (rank order) of payloads.

    Used for sparse compressed exchange (values, indices): receivers scatter-add locally. The bytes
    of `payload` count for the engine's network model.
    """

    payload: list[Tensor]


@dataclass(frozen=True)
class Handle:
    """Names a collective started with `Start`; engine-assigned."""

    id: int


@dataclass(frozen=True)
class Start:
    """Start a collective, a pull (`Pull`) or a timer (`Sleep`) without waiting (result: `Handle`)."""

    request: AllReduce | AllGather | Pull | Sleep

    def __post_init__(self) -> None:
        if not isinstance(self.request, (AllReduce, AllGather, Pull, Sleep)):
            raise TypeError(f"Start takes an AllReduce, AllGather, Pull or Sleep, got {type(self.request).__name__}")


@dataclass(frozen=True)
class Poll:
    """Never blocks; result: (done, result of what was started or None while in flight). The Poll that
    reports done hands the result over and spends the handle: do not Poll or Wait on it again."""

    handle: Handle


@dataclass(frozen=True)
class Wait:
    """Block until what was started (collective, pull, timer) completes; result: its result."""

    handle: Handle


# ---------------------------------------------------------------- parameter server


@dataclass
class Push:
    """Send `update` to the parameter server: a gradient, or an accumulated update (a commit, ADSP
    and the local-update baselines). Result: None once the coordinator has received it
    (`Coordinator.push`; the worker is busy while the bytes cross its link). Engines keep a worker's
    order: its later `Pull` is judged only after its earlier pushes were received (BSP's and SSP's
    pull rules count the worker's own push).

    version: the model version the update was computed on (from the last `Pulled`); staleness at apply
    time is measured against it. n, loss: samples behind the update and the worker's training loss
    (coordinators that fit loss curves). lr: the worker's learning rate for this update (eta at its
    step). stop: the worker's stop vote (`ctx.should_stop`); once any worker votes, every pull reply
    says stop. commit: an accumulated update rather than one step's gradient. losses: (age_s, loss) of
    the local steps behind a commit, age_s measured back from the send, for coordinators that fit loss
    curves (ADSP's scheduler; 16 bytes each on the wire). nbytes: what the update costs on the wire
    (compressed updates count their real bytes); None = the dense size of `update` plus `losses`.
    """

    update: list[Tensor]
    version: int = 0
    n: int = 0
    loss: float | None = None
    lr: float = 0.0
    stop: bool = False
    commit: bool = False
    losses: list[tuple[float, float]] | None = None
    nbytes: int | None = None

    def wire_bytes(self) -> int:
        """Bytes this push costs on the wire."""
        if self.nbytes is not None:
            return int(self.nbytes)
        return payload_nbytes(self.update) + 16 * len(self.losses or ())


@dataclass(frozen=True)
class Pull:
    """Pull the global model from the parameter server (result: `Pulled`). Blocks until the
    coordinator lets this worker's pull return (SSP's staleness bound, an ElasticBSP barrier; at once
    for ASP), then for the model's transfer. `Start(Pull())` is the non-blocking form."""


@dataclass
class Pulled:
    """A pull's reply: params (the global model, `parameters()` order, the worker's own copy), version
    (updates the PS has applied), stop (the run is stopping: the worker leaves after this step) and
    info (plain values from the coordinator to the worker, e.g. ADSP's commit target)."""

    params: list[Tensor]
    version: int
    stop: bool = False
    info: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- model and optimizer


@dataclass
class Apply:
    """One step of the worker's optimizer (SGD with the run's momentum and weight decay) using
    `update` as the gradient, at learning rate `lr`. Result: None."""

    update: list[Tensor]
    lr: float


@dataclass(frozen=True)
class ResetOptimizer:
    """Forget the worker's optimizer state (SGD's momentum buffers): a drift response that every worker of a
    synchronous group performs at the same step (edgestream.sync.drift). Result: None."""


@dataclass(frozen=True)
class GetParams:
    """Result: detached copies of the trainable parameters, in `parameters()` order."""


@dataclass
class SetParams:
    """Overwrite the trainable parameters (model averaging). Optimizer state is kept. Result: None."""

    tensors: list[Tensor]


# ---------------------------------------------------------------- time and metrics


@dataclass(frozen=True)
class Now:
    """Result: the engine's time in seconds (virtual in the simulator, monotonic wall time in the
    runtime, a per-worker work counter in the lockstep engine). Only differences are meaningful."""


@dataclass(frozen=True)
class Sleep:
    """Let `seconds` of engine time pass (timers, e.g. ADSP commits). Result: None."""

    seconds: float

    def __post_init__(self) -> None:
        if not math.isfinite(self.seconds) or self.seconds < 0:
            raise ValueError(f"Sleep: seconds must be finite and >= 0, got {self.seconds}")


@dataclass(init=False)
class Log:
    """Per-step metrics the engine writes to events.jsonl (it adds time and device):
    step, batch, loss, lr, floats_sent, bytes_sent, compressed, ... Result: None.

    A worker yields one Log at the end of each step (and of each averaging round); by then it has
    advanced `ctx.step` and brought `ctx.state` up to date, so the Log request is where an engine
    may checkpoint the worker (edgestream.sync.context, "State contract")."""

    fields: dict[str, Any] = field(default_factory=dict)

    def __init__(self, **fields: Any) -> None:
        self.fields = fields


Request = (
    TakeBatch | Compute | Ack | Inject | AllReduce | AllGather | Start | Poll | Wait | Push | Pull | Apply
    | GetParams | SetParams | Now | Sleep | Log | ResetOptimizer
)
COLLECTIVES = (AllReduce, AllGather)

#: request kinds every worker may send, whatever its family
BASE_REQUESTS: frozenset[type] = frozenset({TakeBatch, Compute, Ack, Inject, Start, Poll, Wait, Apply, GetParams,
                                            SetParams, Now, Sleep, Log, ResetOptimizer})
#: what the collective family adds / what the parameter-server family adds
COLLECTIVE_REQUESTS: frozenset[type] = frozenset(COLLECTIVES)
PS_REQUESTS: frozenset[type] = frozenset({Push, Pull})
#: every request kind (what a performer of both families performs: the simulator's, the trainer's)
REQUESTS: frozenset[type] = BASE_REQUESTS | COLLECTIVE_REQUESTS | PS_REQUESTS
