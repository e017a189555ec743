"""A minimal second engine: M worker generators run round-robin in one process, requests performed at once.

It exists to prove the algorithms are engine-free (tests drive the unchanged `sync` workers with it)
and to give unit tests a cheap way to execute collectives. No SimPy, no virtual network, no Kafka.

* `run_lockstep(programs, perform)` advances each generator ONE request per turn, round-robin.
  Collectives are matched by order: the k-th collective of every worker forms slot k, completed
  (`resolve_collective`) as soon as all workers have posted it. `Start` posts without blocking,
  `Poll` reports whether the slot completed (handing the result over once), `Wait` and blocking
  collectives park the worker until it did. Every other request goes to `perform(rank, request)`.
  A round without progress raises (deadlock).
* `LocalDriver` performs the data/model requests: M model replicas (deep copies, so identical) with
  SGD optimizers, one in-memory `ArraySource` per worker with a constant rate S_i for the batch
  policy, injection queues, and a per-worker clock that `Compute` advances by n / speed_i.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgestream.models import build_optimizer, grads_of, set_grads, set_lr
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
    Log,
    Now,
    Poll,
    SetParams,
    Sleep,
    Start,
    TakeBatch,
    Wait,
)


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


def run_lockstep(
    programs: Sequence[Generator[Any, Any, Any]],
    perform: Callable[[int, Any], Any],
    max_requests: int = 10_000_000,
) -> list[Any]:
    """Drive the generators to completion (see module doc); returns their return values by rank."""
    m = len(programs)
    posted: dict[int, list[Any]] = {}   # slot -> requests by rank (None until posted)
    done: dict[int, list[Any]] = {}     # slot -> results by rank
    taken: dict[int, int] = {}          # slot -> results handed out
    next_slot = [0] * m
    blocked: list[int | None] = [None] * m
    send: list[Any] = [None] * m
    started = [False] * m
    finished = [False] * m
    returns: list[Any] = [None] * m

    def post(rank: int, req: AllReduce | AllGather) -> int:
        slot = next_slot[rank]
        next_slot[rank] += 1
        row = posted.setdefault(slot, [None] * m)
        row[rank] = req
        if all(r is not None for r in row):
            done[slot] = resolve_collective(posted.pop(slot))
            taken[slot] = 0
        return slot

    def collect(rank: int, slot: int) -> Any:
        result = done[slot][rank]
        done[slot][rank] = None
        taken[slot] += 1
        if taken[slot] == m:
            del done[slot], taken[slot]
        return result

    count = 0
    while not all(finished):
        progressed = False
        for rank in range(m):
            if finished[rank]:
                continue
            if blocked[rank] is not None:
                if blocked[rank] not in done:
                    continue
                send[rank] = collect(rank, blocked[rank])
                blocked[rank] = None
            try:
                req = programs[rank].send(send[rank]) if started[rank] else next(programs[rank])
            except StopIteration as stop:
                finished[rank], returns[rank] = True, stop.value
                progressed = True
                continue
            started[rank], progressed, send[rank] = True, True, None
            count += 1
            if count > max_requests:
                raise RuntimeError(f"run_lockstep: more than {max_requests} requests")
            if isinstance(req, (AllReduce, AllGather)):
                blocked[rank] = post(rank, req)
            elif isinstance(req, Start):
                send[rank] = Handle(post(rank, req.request))
            elif isinstance(req, Poll):
                slot = req.handle.id
                send[rank] = (True, collect(rank, slot)) if slot in done else (False, None)
            elif isinstance(req, Wait):
                blocked[rank] = req.handle.id
            else:
                send[rank] = perform(rank, req)
        if not progressed:
            state = {r: "finished" if finished[r] else f"waits on collective {blocked[r]}" for r in range(m)}
            raise RuntimeError(f"deadlock: {state}")
    return returns


# ---------------------------------------------------------------- data


@dataclass
class LocalBatch:
    """A batch of the local driver: inputs, labels, sample count, and (worker, count) for Ack."""

    x: Tensor
    y: Tensor
    n: int
    own: int  # samples taken from the worker's own stream (the rest were injected)


class ArraySource:
    """One worker's endless stream over arrays (reshuffled each pass, seeded), at a constant rate S_i."""

    def __init__(self, x: Tensor, y: Tensor, rate: float, seed: int = 0) -> None:
        if len(x) != len(y) or len(x) == 0:
            raise ValueError("ArraySource needs equally long, non-empty x and y")
        self.x, self.y, self.rate = x, y, float(rate)
        self._gen = torch.Generator().manual_seed(seed)
        self._order = torch.randperm(len(x), generator=self._gen)
        self._pos = 0

    def take(self, k: int) -> tuple[Tensor, Tensor]:
        """The next k samples."""
        idx = []
        while len(idx) < k:
            if self._pos == len(self._order):
                self._order, self._pos = torch.randperm(len(self.x), generator=self._gen), 0
            step = min(k - len(idx), len(self._order) - self._pos)
            idx.extend(self._order[self._pos : self._pos + step].tolist())
            self._pos += step
        index = torch.tensor(idx, dtype=torch.long)
        return self.x[index], self.y[index]


# ---------------------------------------------------------------- the driver


@dataclass
class LocalDriver:
    """Performs requests for M workers in one process (see module doc).

    model: replicated M times (deep copies); sources: one per worker; batch_policy: an object with
    `.target(rate, available)` (edgestream.streams), used when TakeBatch.size is None with
    available = the worker's rate; speeds: samples per clock unit of each worker's Compute.
    """

    model: nn.Module
    sources: Sequence[ArraySource]
    batch_policy: Any = None
    momentum: float = 0.0
    weight_decay: float = 0.0
    speeds: Sequence[float] | None = None
    models: list[nn.Module] = field(init=False)
    optimizers: list[torch.optim.Optimizer] = field(init=False)
    clocks: list[float] = field(init=False)
    events: list[dict[str, Any]] = field(init=False, default_factory=list)
    acked: list[int] = field(init=False)
    taken: list[int] = field(init=False)
    inbox: list[list[tuple[Tensor, Tensor]]] = field(init=False)

    def __post_init__(self) -> None:
        m = len(self.sources)
        self.models = [copy.deepcopy(self.model) for _ in range(m)]
        self.optimizers = [build_optimizer(md, 0.1, self.momentum, self.weight_decay) for md in self.models]
        self.clocks = [0.0] * m
        self.acked, self.taken = [0] * m, [0] * m
        self.inbox = [[] for _ in range(m)]

    def run(self, workers: Sequence[Generator[Any, Any, Any]]) -> list[Any]:
        """Run one generator per worker (rank = position) to completion."""
        if len(workers) != len(self.sources):
            raise ValueError(f"{len(workers)} workers for {len(self.sources)} sources")
        return run_lockstep(workers, self.perform)

    def params(self, rank: int) -> list[Tensor]:
        """Detached copies of a replica's trainable parameters."""
        return [p.detach().clone() for p in self.models[rank].parameters() if p.requires_grad]

    def perform(self, rank: int, req: Any) -> Any:
        """Perform one non-collective request of worker `rank` and return its result."""
        if isinstance(req, TakeBatch):
            return self._take(rank, req)
        if isinstance(req, Compute):
            return self._compute(rank, req.batch)
        if isinstance(req, Apply):
            set_grads(self.models[rank], req.update)
            set_lr(self.optimizers[rank], req.lr)
            self.optimizers[rank].step()
            return None
        if isinstance(req, GetParams):
            return self.params(rank)
        if isinstance(req, SetParams):
            with torch.no_grad():
                params = [p for p in self.models[rank].parameters() if p.requires_grad]
                for p, t in zip(params, req.tensors, strict=True):
                    p.copy_(t.reshape(p.shape))
            return None
        if isinstance(req, Ack):
            self.acked[rank] += req.batch.own
            return None
        if isinstance(req, Inject):
            idx = req.indices if req.indices is not None else list(range(req.count))
            index = torch.tensor(idx, dtype=torch.long)
            for target in req.targets:
                self.inbox[target].append((req.batch.x[index], req.batch.y[index]))
            return None
        if isinstance(req, Now):
            return self.clocks[rank]
        if isinstance(req, Sleep):
            self.clocks[rank] += req.seconds
            return None
        if isinstance(req, Log):
            self.events.append({"device": rank, "time": self.clocks[rank], **req.fields})
            return None
        raise TypeError(f"LocalDriver cannot perform {type(req).__name__}")

    def _take(self, rank: int, req: TakeBatch) -> LocalBatch:
        src = self.sources[rank]
        if req.size is not None:
            k = req.size
        elif self.batch_policy is not None:
            k = int(self.batch_policy.target(src.rate, int(src.rate)))
        else:
            raise ValueError("TakeBatch() without size needs a batch_policy")
        x, y = src.take(k)
        self.taken[rank] += k
        if self.inbox[rank]:
            xs, ys = zip(*self.inbox[rank], strict=True)
            x, y = torch.cat([x, *xs]), torch.cat([y, *ys])
            self.inbox[rank] = []
        return LocalBatch(x, y, len(y), k)

    def _compute(self, rank: int, batch: LocalBatch) -> ComputeResult:
        model = self.models[rank]
        model.train()
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(batch.x), batch.y)
        loss.backward()
        speed = self.speeds[rank] if self.speeds is not None else 1.0
        self.clocks[rank] += batch.n / speed
        return ComputeResult(grads_of(model), float(loss.detach()), batch.n)
