"""The in-process lockstep engine: M workers in one process, each run by the one request loop
(`runner.drive`), scheduled round robin, one request per turn; requests performed at once.

It exists to prove the algorithms are engine-free (tests drive the unchanged `sync` workers with it),
to give unit tests a cheap way to execute collectives, and to check checkpoint/resume of algorithm
state. No SimPy, no virtual network, no Kafka.

* `Lockstep` is the performer of the collectives and the cooperative scheduler. Collectives are
  matched by order: the k-th collective of every worker forms slot k, completed (`resolve_collective`)
  as soon as all workers have posted it. Every request is performed when the worker yields it, and its
  result is handed over on the worker's next turn: the performer returns a generator that yields one
  token to the scheduler (`TURN`, or the slot number a blocking collective or `Wait` parks on until
  the slot completes). `Start` posts without blocking, `Poll` reports whether the slot completed
  (handing the result over once). Every other request goes to `local(rank, request)`. A round in which
  no worker can move raises (deadlock).
* `run_lockstep(programs, perform)`: bare generators (e.g. `exchange(...)`) against `Lockstep`, the
  non-collective requests performed by `perform`.
* `LockstepEngine` performs the data/model requests: M model replicas (deep copies, so identical) with
  SGD optimizers, one in-memory `ArraySource` per worker with a constant rate S_i, taken from through
  the shared take sequence (`ArrayStream`, edgestream.runner.array_stream; injection queues included),
  and a per-worker clock that `Compute` advances by n / speed_i. Its
  `checkpoint(rank)` / `restore(rank, ...)` save and load a worker's engine side (model, optimizer,
  stream position, injection queue, clock) as tensors and plain values, the counterpart of the
  algorithm's `ctx.step` and `ctx.state` (edgestream.sync.context, "State contract").
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from edgestream.models import build_optimizer, grads_of, set_grads, set_lr
from edgestream.runner.array_stream import STATE_VERSION as STREAM_STATE
from edgestream.runner.array_stream import ArraySource, ArrayStream, LockstepBatch
from edgestream.runner.driver import StepMeter, drive, run_blocking
from edgestream.runner.performer import Performer
from edgestream.streams.source import take_batch
from edgestream.sync.reduction import reduce_all
from edgestream.sync.requests import (
    Ack,
    AllGather,
    AllReduce,
    Apply,
    Compute,
    ComputeResult,
    GetParams,
    Handle,
    Inject,
    Poll,
    ResetOptimizer,
    SetParams,
    Sleep,
    Start,
    TakeBatch,
    Wait,
)
from edgestream.tasks import CLASSIFICATION, Task

#: the token a performed request yields: the worker's turn is over, it continues on its next turn
TURN = None
MAX_REQUESTS = 10_000_000


def resolve_collective(requests: Sequence[AllReduce | AllGather]) -> list[Any]:
    """The per-worker results of one collective slot (rank order in, rank order out, fresh tensors)."""
    kinds = {type(r) for r in requests}
    if len(kinds) != 1:
        raise RuntimeError(f"collective mismatch: workers issued {sorted(k.__name__ for k in kinds)}")
    if isinstance(requests[0], AllGather):
        gathered = [[t.detach().clone() for t in r.payload] for r in requests]
        return [[[t.clone() for t in p] for p in gathered] for _ in requests]
    out = reduce_all(list(requests))
    return [out] + [[t.clone() for t in out] for _ in requests[1:]]


def _unsupported(rank: int, req: Any) -> Any:
    raise TypeError(f"the lockstep engine has no performer for {type(req).__name__} (worker {rank})")


def _zero_clock(rank: int) -> float:
    return 0.0


class Lockstep(Performer):
    """The collectives of `world` workers and their round-robin scheduler (see module doc).

    local(rank, request): performs every non-collective request; now(rank): the engine's clock.
    """

    engine = "lockstep engine"

    def __init__(self, world: int, local: Callable[[int, Any], Any] = _unsupported,
                 now: Callable[[int], float] = _zero_clock) -> None:
        self.world = world
        self.local = local
        self._now = now
        self.posted: dict[int, list[Any]] = {}   # slot -> requests by rank (None until posted)
        self.done: dict[int, list[Any]] = {}     # slot -> results by rank
        self.taken: dict[int, int] = {}          # slot -> results handed out
        self.next_slot = [0] * world

    # ---------------------------------------------------------------- collectives
    def post(self, rank: int, req: AllReduce | AllGather) -> int:
        """Worker `rank` contributes its next collective; returns the slot."""
        slot = self.next_slot[rank]
        self.next_slot[rank] += 1
        row = self.posted.setdefault(slot, [None] * self.world)
        row[rank] = req
        if all(r is not None for r in row):
            self.done[slot] = resolve_collective(self.posted.pop(slot))
            self.taken[slot] = 0
        return slot

    def collect(self, rank: int, slot: int) -> Any:
        """Worker `rank`'s result of completed slot `slot` (handed over once)."""
        result = self.done[slot][rank]
        self.done[slot][rank] = None
        self.taken[slot] += 1
        if self.taken[slot] == self.world:
            del self.done[slot], self.taken[slot]
        return result

    # ---------------------------------------------------------------- the performer
    def now(self, rank: int) -> float:
        return self._now(rank)

    # the collective kinds are performed here (below); every other kind, the clock and the step line are local's
    do_now = do_log = None

    def perform(self, rank: int, req: Any) -> Generator[Any, Any, Any]:
        """Perform `req` now; the generator yields the worker's turn (or parks it) and returns the result."""
        method = self._methods.get(type(req))
        return method(rank, req) if method is not None else self._turn(self.local(rank, req))

    def do_all_reduce(self, rank: int, req: AllReduce | AllGather) -> Generator[Any, Any, Any]:
        return self._park(rank, self.post(rank, req))

    do_all_gather = do_all_reduce

    def do_wait(self, rank: int, req: Wait) -> Generator[Any, Any, Any]:
        return self._park(rank, req.handle.id)

    def do_start(self, rank: int, req: Start) -> Generator[Any, Any, Handle]:
        if not isinstance(req.request, (AllReduce, AllGather)):
            raise TypeError(f"the lockstep engine starts collectives only, not {type(req.request).__name__} "
                            f"(parameter-server algorithms run in the simulator)")
        return self._turn(Handle(self.post(rank, req.request)))

    def do_poll(self, rank: int, req: Poll) -> Generator[Any, Any, tuple[bool, Any]]:
        slot = req.handle.id
        return self._turn((True, self.collect(rank, slot)) if slot in self.done else (False, None))

    @staticmethod
    def _turn(result: Any) -> Generator[Any, Any, Any]:
        yield TURN
        return result

    def _park(self, rank: int, slot: int) -> Generator[Any, Any, Any]:
        yield slot  # the scheduler resumes the worker once the slot completed
        return self.collect(rank, slot)

    # ---------------------------------------------------------------- the scheduler
    def schedule(self, drivers: Sequence[Generator[Any, Any, Any]], max_requests: int = MAX_REQUESTS) -> list[Any]:
        """Run the drivers (one per rank) round robin to completion; their return values by rank."""
        m = len(drivers)
        parked: list[int | None] = [None] * m
        finished = [False] * m
        returns: list[Any] = [None] * m
        count = 0
        while not all(finished):
            progressed = False
            for rank in range(m):
                if finished[rank] or (parked[rank] is not None and parked[rank] not in self.done):
                    continue
                progressed = True
                try:
                    parked[rank] = drivers[rank].send(None)
                except StopIteration as stop:
                    finished[rank], returns[rank] = True, stop.value
                    continue
                count += 1
                if count > max_requests:
                    raise RuntimeError(f"lockstep: more than {max_requests} requests")
            if not progressed:
                state = {r: "finished" if finished[r] else f"waits on collective {parked[r]}" for r in range(m)}
                raise RuntimeError(f"deadlock: {state}")
        return returns

    def run(self, programs: Sequence[Generator[Any, Any, Any]], sink: Callable[[dict[str, Any]], None] | None = None,
            meters: dict[int, StepMeter] | None = None, on_request: Callable[[int, Any], None] | None = None,
            max_requests: int = MAX_REQUESTS) -> list[Any]:
        """Drive one program per rank (`runner.drive`) to completion; their return values by rank."""
        if len(programs) != self.world:
            raise ValueError(f"{len(programs)} programs for {self.world} workers")
        meters = meters if meters is not None else {}
        drivers = [drive(r, p, self, sink or _discard, meters, on_request=on_request) for r, p in enumerate(programs)]
        return self.schedule(drivers, max_requests)


def _discard(line: dict[str, Any]) -> None:
    return None


def run_lockstep(programs: Sequence[Generator[Any, Any, Any]], perform: Callable[[int, Any], Any] = _unsupported,
                 max_requests: int = MAX_REQUESTS) -> list[Any]:
    """Drive the generators to completion in lockstep (see module doc); `perform(rank, request)` performs
    the non-collective requests. Returns their return values by rank."""
    return Lockstep(len(programs), perform).run(programs, max_requests=max_requests)


# ---------------------------------------------------------------- the engine


@dataclass
class LockstepEngine(Performer):
    """Performs the requests of M workers in one process (see module doc).

    model: replicated M times (deep copies); sources: one per worker; batch_policy: an object with
    `.target(rate, available)` (edgestream.streams), used when TakeBatch.size is None with
    available = the worker's rate; speeds: samples per clock unit of each worker's Compute; task: the
    loss a Compute takes the gradients of (edgestream.tasks; default classification).
    events: the step lines of every run (time, device, the Log fields, the measured timings).
    """

    engine = "lockstep engine"

    model: nn.Module
    sources: Sequence[ArraySource]
    batch_policy: Any = None
    momentum: float = 0.0
    weight_decay: float = 0.0
    speeds: Sequence[float] | None = None
    task: Task = CLASSIFICATION
    scoring: bool = False  # prequential evaluation: each Compute scores its batch (ComputeResult.scores)
    models: list[nn.Module] = field(init=False)
    optimizers: list[torch.optim.Optimizer] = field(init=False)
    clocks: list[float] = field(init=False)
    events: list[dict[str, Any]] = field(init=False, default_factory=list)
    acked: list[int] = field(init=False)
    taken: list[int] = field(init=False)
    streams: list[ArrayStream] = field(init=False)
    meters: dict[int, StepMeter] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        m = len(self.sources)
        self.models = [copy.deepcopy(self.model) for _ in range(m)]
        self.optimizers = [build_optimizer(md, 0.1, self.momentum, self.weight_decay) for md in self.models]
        self.clocks = [0.0] * m
        self.acked, self.taken = [0] * m, [0] * m
        self.streams = [ArrayStream(source, self.batch_policy) for source in self.sources]

    @property
    def inbox(self) -> list[list[tuple[Tensor, Tensor]]]:
        """Each worker's queue of injected samples (its stream's `inbox`)."""
        return [stream.inbox for stream in self.streams]

    @classmethod
    def from_plan(cls, plan: Any, speeds: Sequence[float] | None = None) -> LockstepEngine:
        """The lockstep engine of a run plan: the plan's initial model and SGD settings, its batch policy,
        and one source per device over the device's shard (normalised as the dataset is) at the device's
        base rate S_i; run it with the plan's workers (`plan.algorithm.worker(plan.worker_context(r))`)."""
        ds, task = plan.dataset, plan.task
        x = ds.normalize(torch.from_numpy(ds.x_train))
        y = torch.from_numpy(ds.y_train)
        y = y.long() if task.labels else y.float()
        sources = []
        for d, shard in enumerate(plan.shards):
            index = torch.from_numpy(shard).long()
            rate = float(plan.rate_model.base_rate(d))
            sources.append(ArraySource(x[index], y[index], rate=rate, seed=plan.seed + d))
        optim = plan.optim
        return cls(plan.build_model(), sources, plan.batch_policy(), momentum=optim["momentum"],
                   weight_decay=optim["weight_decay"], speeds=speeds, task=task,
                   scoring=plan.prequential is not None)

    def now(self, rank: int) -> float:
        """Worker `rank`'s clock: samples computed / speed, plus Sleep."""
        return self.clocks[rank]

    def run(self, workers: Sequence[Generator[Any, Any, Any]],
            on_request: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Run one worker generator per source (rank = position) to completion through `runner.drive`;
        on_request(rank, request) is called before each request is performed (checkpoint hooks)."""
        if len(workers) != len(self.sources):
            raise ValueError(f"{len(workers)} workers for {len(self.sources)} sources")
        lockstep = Lockstep(len(self.sources), self.perform, self.now)
        return lockstep.run(workers, self.events.append, self.meters, on_request=on_request)

    def params(self, rank: int) -> list[Tensor]:
        """Detached copies of a replica's trainable parameters."""
        return [p.detach().clone() for p in self.models[rank].parameters() if p.requires_grad]

    def do_take_batch(self, rank: int, req: TakeBatch) -> LockstepBatch:
        batch = run_blocking(take_batch(self.streams[rank], req.size))  # the shared take sequence
        self.taken[rank] += batch.own
        return batch

    def do_compute(self, rank: int, req: Compute) -> ComputeResult:
        return self._compute(rank, req.batch)

    def do_apply(self, rank: int, req: Apply) -> None:
        set_grads(self.models[rank], req.update)
        set_lr(self.optimizers[rank], req.lr)
        self.optimizers[rank].step()

    def do_reset_optimizer(self, rank: int, req: ResetOptimizer) -> None:
        self.optimizers[rank].state.clear()

    def do_get_params(self, rank: int, req: GetParams) -> list[Tensor]:
        return self.params(rank)

    def do_set_params(self, rank: int, req: SetParams) -> None:
        with torch.no_grad():
            params = [p for p in self.models[rank].parameters() if p.requires_grad]
            for p, t in zip(params, req.tensors, strict=True):
                p.copy_(t.reshape(p.shape))

    def do_ack(self, rank: int, req: Ack) -> None:
        self.acked[rank] += req.batch.own

    def do_inject(self, rank: int, req: Inject) -> None:
        idx = req.indices if req.indices is not None else list(range(req.count))
        index = torch.tensor(idx, dtype=torch.long)
        for target in req.targets:
            self.streams[target].inbox.append((req.batch.x[index], req.batch.y[index]))
        self._meter(rank).count(inject_sent=len(idx) * len(req.targets))

    def do_sleep(self, rank: int, req: Sleep) -> None:
        self.clocks[rank] += req.seconds

    def _meter(self, rank: int) -> StepMeter:
        return self.meters.setdefault(rank, StepMeter())

    def _compute(self, rank: int, batch: LockstepBatch) -> ComputeResult:
        model = self.models[rank]
        model.train()
        model.zero_grad(set_to_none=True)
        output = model(batch.x)
        loss = self.task.loss(output, batch.y)
        loss.backward()
        speed = self.speeds[rank] if self.speeds is not None else 1.0
        self.clocks[rank] += batch.n / speed
        scores = self.task.sample_sums(output, batch.y) if self.scoring else None
        return ComputeResult(grads_of(model), float(loss.detach()), batch.n, scores)

    # ---------------------------------------------------------------- checkpoints
    def checkpoint(self, rank: int) -> dict[str, Any]:
        """Worker `rank`'s engine side, as tensors and plain values (torch.save it with the worker's
        ctx.step and ctx.state at a Log): model and optimizer state, stream position, injection queue,
        clock and counters. References: torch.save (or copy.deepcopy) before the worker moves on."""
        return {
            "model": self.models[rank].state_dict(),
            "optimizer": self.optimizers[rank].state_dict(),
            **{k: v for k, v in self.streams[rank].state_dict().items() if k != "version"},
            "clock": self.clocks[rank],
            "acked": self.acked[rank],
            "taken": self.taken[rank],
        }

    def restore(self, rank: int, ckpt: dict[str, Any]) -> None:
        """Load what `checkpoint(rank)` returned into worker `rank`'s replica, optimizer and stream."""
        self.models[rank].load_state_dict(ckpt["model"])
        self.optimizers[rank].load_state_dict(ckpt["optimizer"])
        self.streams[rank].load_state_dict({"version": STREAM_STATE, "source": ckpt["source"],
                                            "inbox": ckpt["inbox"]})
        self.clocks[rank] = float(ckpt["clock"])
        self.acked[rank], self.taken[rank] = int(ckpt["acked"]), int(ckpt["taken"])
