"""Collectives in virtual time: matched by order across workers, timed by the network model.

The k-th collective (AllReduce or AllGather, blocking or `Start`ed) of every worker forms operation k.
When the last worker posts it, the result is computed at once (rank order, so the floating-point sum
does not depend on arrival order) and the operation completes NetworkModel time for its payload later
(all-reduce: ring/tree cost of the largest contribution; all-gather: the other workers' payloads).
Operations use the network one at a time: one that is ready while another is still transferring
starts when that one ends (as NCCL serialises collectives on one communicator).

Results: an all-reduce hands every worker its own fresh tensors (disjoint memory, so a worker may
modify its own; copied from the sum when first read), in a `ReduceResult`: a sequence that also
carries the operation's `derive` memo, so a value every receiver computes from the result alike (the gradient
exchange's mean, sum / W) is computed once per operation instead of once per worker; derived values
are shared by the receivers and read-only. An all-gather snapshots every contribution once and hands
all receivers the same snapshots (copying them per receiver would cost O(M^2) per step); receivers
must treat them as read-only. `check_gathers` raises if a shared tensor (an all-gather payload or a
derived value) was modified in place (tensor version counters).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from edgestream.compression import payload_nbytes
from edgestream.sim.costs import NetworkModel
from edgestream.sync.reduction import reduce_all
from edgestream.sync.requests import AllGather, AllReduce


class ReduceResult(Sequence):
    """One worker's all-reduce result: a sequence of its own fresh tensors, plus `derive`, the memo of
    the operation it belongs to (one memo shared by all the operation's receivers).

    Its tensors are copied from the operation's sum when the worker first reads them (copy on first
    access, one tensor at a time): the exchange reads only the small [W, stop] tensor and takes the
    mean through `derive`, so at M workers the M full copies an eager result would make (M x the
    model, every step) are never made. A tensor once read is the worker's own (it may modify it)."""

    __slots__ = ("_sum", "_own", "_memo", "_watch")

    def __init__(self, total: list[Tensor], memo: dict[Any, Any], watch: Callable[[Any], None]) -> None:
        self._sum = total                       # the operation's result, never handed out itself
        self._own: list[Tensor | None] = [None] * len(total)
        self._memo, self._watch = memo, watch

    def __len__(self) -> int:
        return len(self._sum)

    def _at(self, i: int) -> Tensor:
        t = self._own[i]
        if t is None:
            t = self._own[i] = self._sum[i].clone()
        return t

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(len(self._sum)))]
        return self._at(range(len(self._sum))[index])

    def __iter__(self) -> Iterator[Tensor]:
        return (self._at(i) for i in range(len(self._sum)))

    def derive(self, key: Any, make: Callable[[], Any]) -> Any:
        """make()'s value for `key`, computed by the first receiver that asks (from its result as handed
        out, which equals every receiver's) and shared with the others: treat it as read-only (its
        tensors are watched like all-gather payloads)."""
        try:
            return self._memo[key]
        except KeyError:
            out = self._memo[key] = make()
            self._watch(out)
            return out


@dataclass
class CollectiveOp:
    """Operation `index`: the posted requests by rank, when each worker arrived, and the outcome."""

    index: int
    world: int
    requests: list[Any] = field(default_factory=list)
    arrived_at: list[float | None] = field(default_factory=list)
    posted: int = 0
    results: list[Any] | None = None
    complete_at: float | None = None
    comm_s: float = 0.0
    done: bool = False
    event: Any = None            # engine event fired at completion
    taken: set[int] = field(default_factory=set)
    kind: type | None = None     # the first request's type (every worker must post the same kind)

    def __post_init__(self) -> None:
        self.requests = [None] * self.world
        self.arrived_at = [None] * self.world


class _Done:
    """Stands for a completed operation that was already freed (see `Collectives._watcher`)."""

    done = True


_DONE = _Done()


class Collectives:
    """Matches, times and resolves the collectives of `world` workers.

    `schedule(delay, callback)` is the engine's timer (SimPy); `new_event()` makes the completion event.
    `reduce_s` accumulates the wall time of the tensor arithmetic (a torch share, for profiling).
    """

    def __init__(self, world: int, network: NetworkModel,
                 schedule: Callable[[float, Callable[[], None]], None], new_event: Callable[[], Any]) -> None:
        self.world = world
        self.network = network
        self._schedule, self._new_event = schedule, new_event
        self.ops: dict[int, CollectiveOp] = {}
        self.next_slot = [0] * world
        self.net_free_at = 0.0
        self.finished: set[int] = set()
        self.completed = 0
        self.bytes_moved = 0
        self.reduce_s = 0.0
        self._shared: list[tuple[Any, Tensor, int, str]] = []  # (op, tensor, version, what) to check

    def post(self, rank: int, request: AllReduce | AllGather, now: float) -> CollectiveOp:
        """Worker `rank` contributes its next collective at virtual time `now`."""
        if not isinstance(request, (AllReduce, AllGather)):
            raise TypeError(f"not a collective: {type(request).__name__}")
        slot = self.next_slot[rank]
        self.next_slot[rank] += 1
        op = self.ops.get(slot)
        if op is None:
            op = self.ops[slot] = CollectiveOp(slot, self.world)
            op.event = self._new_event()
        if op.kind is None:
            op.kind = type(request)
        elif type(request) is not op.kind:
            kinds = sorted({type(r).__name__ for r in op.requests if r is not None}
                           | {type(request).__name__})
            raise RuntimeError(f"collective #{slot} mismatch: workers issued {kinds}")
        if isinstance(request, AllGather):  # snapshot once: the sender may reuse its buffers
            request = AllGather([t.detach().clone() for t in request.payload])
        op.requests[rank] = request
        op.arrived_at[rank] = now
        op.posted += 1
        missing = (self.finished.difference(r for r in range(self.world) if op.requests[r] is not None)
                   if self.finished else None)  # O(M) only once some worker has finished
        if missing:
            raise RuntimeError(f"deadlock: worker(s) {sorted(missing)} finished without joining collective "
                               f"#{slot}, which worker {rank} waits on")
        if op.posted == self.world:
            self._resolve(op, now)
        return op

    def _resolve(self, op: CollectiveOp, now: float) -> None:
        t0 = time.perf_counter()
        reqs = op.requests
        if isinstance(reqs[0], AllReduce):
            memo: dict[Any, Any] = {}
            watch = self._watcher(op, "a value derived from an AllReduce result (shared by the receivers)")
            total = reduce_all(reqs)  # checks that every worker sent the same shapes and dtypes
            op.results = [ReduceResult(total, memo, watch) for _ in range(self.world)]
            nbytes = payload_nbytes(reqs[0].tensors)
            op.comm_s = self.network.allreduce(nbytes, self.world)
            self.bytes_moved += nbytes * self.world
        else:
            payloads = [r.payload for r in reqs]
            self._shared.extend((op, t, t._version, "an AllGather result") for p in payloads for t in p)
            op.results = [list(payloads) for _ in range(self.world)]
            sizes = [payload_nbytes(p) for p in payloads]
            op.comm_s = self.network.allgather(sizes)
            self.bytes_moved += sum(sizes)
        op.requests = [None] * self.world  # free the contributions
        self.reduce_s += time.perf_counter() - t0
        start = max(now, self.net_free_at)
        op.complete_at = start + op.comm_s
        self.net_free_at = op.complete_at
        self._schedule(op.complete_at - now, lambda: self._complete(op))

    def _complete(self, op: CollectiveOp) -> None:
        self.check_gathers()  # payloads handed out by earlier operations have been read by now
        op.done = True
        self.completed += 1
        op.event.succeed()

    def result(self, op: CollectiveOp, rank: int) -> Any:
        """Worker `rank`'s result of a completed operation (the same object on every call)."""
        if not op.done or op.results is None:
            raise RuntimeError(f"collective #{op.index} has not completed")
        return op.results[rank]

    def release(self, op: CollectiveOp, rank: int) -> None:
        """Worker `rank` has its result for good (Wait, a blocking collective, or a done Poll)."""
        op.taken.add(rank)
        if len(op.taken) >= self.world:
            self.ops.pop(op.index, None)

    def worker_finished(self, rank: int) -> None:
        """Raise if a finished worker leaves an operation that others have joined incomplete."""
        self.finished.add(rank)
        for op in self.ops.values():
            if not op.done and op.posted and op.requests[rank] is None and op.results is None:
                waiting = [r for r in range(self.world) if op.requests[r] is not None]
                raise RuntimeError(f"deadlock: worker {rank} finished without joining collective "
                                   f"#{op.index}, which worker(s) {waiting} wait on")

    def _watcher(self, op: CollectiveOp, what: str) -> Callable[[Any], None]:
        """A function that records the tensors of a value shared by `op`'s receivers, to check them.

        It holds `op` weakly: `op.results` hold the function, so a strong reference would make every
        operation a reference cycle (op -> results -> watch -> op) that only the cyclic collector frees,
        with every receiver's copy of the model in it; the simulator raises that collector's thresholds
        (engine.fewer_gc_passes), so memory grew with the steps. A receiver reads a result only once its
        operation is done, so a collected op is a done one."""
        ref = weakref.ref(op)

        def watch(value: Any) -> None:
            owner = ref() or _DONE
            items = value if isinstance(value, (list, tuple)) else [value]
            self._shared.extend((owner, t, t._version, what) for t in items if isinstance(t, Tensor))
        return watch

    def check_gathers(self) -> None:
        """Raise if an algorithm modified a shared tensor (an all-gather payload, a derived all-reduce
        value) in place; then forget those of completed operations (they were checked at least once
        after being read: the next operation completes only once every worker has moved on)."""
        for _, t, version, what in self._shared:
            if t._version != version:
                raise RuntimeError(f"an algorithm modified {what} in place; such tensors are shared between "
                                   "receivers in the simulator and must be read-only")
        self._shared = [entry for entry in self._shared if not entry[0].done]
