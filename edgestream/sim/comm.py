"""The simulator's communication requests, a part of its performer (`SimComm`, mixed into `SimEngine`):
collectives (`Collectives`: matched by order, network-timed), started operations and their handles
(Start / Poll / Wait: collectives, background pulls, `Sleep` timers), the parameter server's Push and Pull
(`PSNode`), and Sleep. The state it uses is the engine's: `env`, `collectives`, `handles`, `ps_handles`,
`_handle_ids`, `meters`, `ps`, `spec`."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from edgestream.sim.collectives import CollectiveOp
from edgestream.sim.ps import PSNode
from edgestream.sync.requests import AllGather, AllReduce, Handle, Poll, Pull, Push, Sleep, Start, Wait


class SimComm:
    """The communication half of the simulator's performer (see module doc)."""

    def do_all_reduce(self, rank: int, req: AllReduce | AllGather) -> Generator[Any, Any, Any]:
        op = self.collectives.post(rank, req, self.env.now)
        if not op.done:
            yield op.event
        return self._collect(op, rank)

    do_all_gather = do_all_reduce

    def do_wait(self, rank: int, req: Wait) -> Generator[Any, Any, Any]:
        if req.handle.id in self.ps_handles:
            owner, what = self._ps_handle(rank, req.handle)
            del self.ps_handles[req.handle.id]
            if isinstance(what, float):  # a timer
                if what > self.env.now:
                    yield self.env.timeout(what - self.env.now)
                return None
            if not what.triggered:
                yield what
            return what.value
        op = self._op_of(rank, req.handle)
        if not op.done:
            yield op.event
        return self._collect(op, rank, req.handle.id)

    def do_sleep(self, rank: int, req: Sleep) -> Generator[Any, Any, None]:
        yield self.env.timeout(req.seconds)
        return None

    # ------------------------------------------------------------------ collectives
    def _op_of(self, rank: int, handle: Handle) -> CollectiveOp:
        entry = self.handles.get(handle.id)
        if entry is None or entry[1] != rank:
            raise RuntimeError(f"worker {rank} used handle {handle.id}, which it did not start (or already spent)")
        return entry[0]

    def _collect(self, op: CollectiveOp, rank: int, handle_id: int | None = None) -> Any:
        """Worker `rank`'s result; the network time and the wait for the last worker are noted once."""
        if handle_id is not None:  # the Wait or done Poll hands the result over and spends the handle
            del self.handles[handle_id]  # (kept, every started operation stayed alive: memory grew per step)
        arrived = op.arrived_at[rank] or 0.0
        self.meters[rank].count(net_s=op.comm_s,
                                sync_wait_s=max(0.0, (op.complete_at or 0.0) - op.comm_s - arrived))
        result = self.collectives.result(op, rank)
        self.collectives.release(op, rank)
        return result

    def do_start(self, rank: int, req: Start) -> Handle:
        handle = Handle(next(self._handle_ids))
        inner = req.request
        if isinstance(inner, Sleep):
            self.ps_handles[handle.id] = (rank, float(self.env.now + inner.seconds))
            return handle
        if isinstance(inner, Pull):
            self.ps_handles[handle.id] = (rank, self.env.process(self.do_pull(rank, inner)))
            return handle
        op = self.collectives.post(rank, inner, self.env.now)
        self.handles[handle.id] = (op, rank)
        return handle

    def _ps_handle(self, rank: int, handle: Handle) -> tuple[int, Any]:
        entry = self.ps_handles.get(handle.id)
        if entry is None or entry[0] != rank:
            raise RuntimeError(f"worker {rank} used handle {handle.id}, which it did not start (or already spent)")
        return entry

    def do_poll(self, rank: int, req: Poll) -> tuple[bool, Any]:
        if req.handle.id in self.ps_handles:
            _, what = self._ps_handle(rank, req.handle)
            if isinstance(what, float):
                done, value = self.env.now >= what, None
            else:
                done = what.triggered
                value = what.value if done else None
            if done:
                del self.ps_handles[req.handle.id]
            return done, value
        op = self._op_of(rank, req.handle)
        if not op.done:
            return False, None
        return True, self._collect(op, rank, req.handle.id)

    # ------------------------------------------------------------------ parameter server
    def _ps_node(self, rank: int, req: Any) -> PSNode:
        if self.ps is None:
            raise TypeError(f"worker {rank} sent {type(req).__name__}, but {self.spec.name} has no parameter "
                            f"server (it is a {self.spec.family} algorithm)")
        return self.ps

    def do_push(self, rank: int, req: Push) -> Generator[Any, Any, None]:
        return self._ps_node(rank, req).push(rank, req)

    def do_pull(self, rank: int, req: Pull) -> Generator[Any, Any, Any]:
        return self._ps_node(rank, req).pull(rank)
