"""The collectives of sync/ performed over torch.distributed (gloo on CPU, NCCL on CUDA).

AllReduce is exact: every worker's tensors, and its weight as a separate float64 tensor, are
all-gathered and combined locally with `edgestream.sync.reduction.reduce_all` in rank order, so every
rank gets bit-for-bit the same result, and the same result as the simulator and the lockstep engine (a
ring all-reduce would sum in an order that depends on the group size). AllGather handles payloads whose
sizes differ between workers (sparse Top-k values and indices): sizes are exchanged first, then each
tensor is gathered padded to the largest and trimmed. No pickle: only tensors travel.

`Start` launches the data transfers with async_op=True and returns a `Pending`; `Poll` checks it
without blocking, `Wait` blocks. Results are fresh tensors on the gradients' device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from edgestream.sync.reduction import reduce_all
from edgestream.sync.requests import AllGather, AllReduce


@dataclass
class Pending:
    """A collective in flight: its works, and how to turn the received buffers into the result."""

    works: list[Any]
    finish: Any
    result: Any = None
    done: bool = False
    nbytes: int = 0
    extra: dict = field(default_factory=dict)

    def completed(self) -> bool:
        return self.done or all(w is None or w.is_completed() for w in self.works)

    def get(self) -> Any:
        if not self.done:
            for w in self.works:
                if w is not None:
                    w.wait()
            self.result, self.done = self.finish(), True
        return self.result


def _flat(tensors: list[Tensor]) -> Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors]) if tensors else torch.zeros(0)


def _split(flat: Tensor, like: list[Tensor]) -> list[Tensor]:
    out, pos = [], 0
    for t in like:
        n = t.numel()
        out.append(flat[pos:pos + n].view(t.shape).clone())
        pos += n
    return out


class DistCollectives:
    """Performs AllReduce / AllGather (blocking or started) for this process's rank."""

    def __init__(self, rank: int, world: int, group: Any = None) -> None:
        self.rank, self.world, self.group = rank, world, group

    # ------------------------------------------------------------------ all-reduce
    def start_all_reduce(self, req: AllReduce) -> Pending:
        tensors = [t.detach() for t in req.tensors]
        if self.world == 1:  # nothing to exchange: the same arithmetic, no transfer
            return Pending([], lambda: reduce_all([req]), nbytes=0)
        device = tensors[0].device if tensors else torch.device("cpu")
        dtypes = {t.dtype for t in tensors}
        groups = [tensors] if len(dtypes) == 1 else [[t] for t in tensors]  # one buffer per dtype run
        # the weight travels as its own float64 tensor (exact for every data dtype), never inside a data buffer
        weight = torch.tensor([float(req.weight)], dtype=torch.float64, device=device)
        works: list[Any] = []

        def gather(flat: Tensor) -> list[Tensor]:
            bufs = [torch.empty_like(flat) for _ in range(self.world)]
            works.append(dist.all_gather(bufs, flat, group=self.group, async_op=True))
            return bufs

        gathered = [gather(_flat(part).contiguous()) for part in groups]
        wbufs = gather(weight)

        def finish() -> list[Tensor]:
            per_rank: list[AllReduce] = []
            for r in range(self.world):
                parts: list[Tensor] = []
                for part, bufs in zip(groups, gathered, strict=True):
                    parts += _split(bufs[r], part)
                w = float(wbufs[r][0])
                per_rank.append(AllReduce(parts, weight=w if req.op == "weighted_mean" else 1.0, op=req.op))
            return reduce_all(per_rank)

        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        return Pending(works, finish, nbytes=nbytes)

    # ------------------------------------------------------------------ all-gather
    def start_all_gather(self, req: AllGather) -> Pending:
        payload = [t.detach().contiguous() for t in req.payload]
        if self.world == 1:
            return Pending([], lambda: [[t.clone() for t in payload]], nbytes=0)
        device = payload[0].device if payload else torch.device("cpu")
        k = len(payload)
        # sizes first (blocking, tiny): numel and shape (ndim <= 4) of every payload tensor
        shapes = torch.zeros((k, 5), dtype=torch.int64, device=device)
        for j, t in enumerate(payload):
            if t.dim() > 4:
                raise ValueError(f"AllGather: payload tensor {j} has {t.dim()} dims (at most 4)")
            shapes[j, 0] = t.dim()
            shapes[j, 1:1 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
        all_shapes = [torch.empty_like(shapes) for _ in range(self.world)]
        dist.all_gather(all_shapes, shapes, group=self.group)
        sizes = [[tuple(int(d) for d in s[j, 1:1 + int(s[j, 0])]) for j in range(k)] for s in all_shapes]
        works, gathered = [], []
        for j, t in enumerate(payload):
            longest = max(_numel(sizes[r][j]) for r in range(self.world))
            flat = torch.zeros(longest, dtype=t.dtype, device=device)
            flat[:t.numel()] = t.reshape(-1)
            bufs = [torch.empty_like(flat) for _ in range(self.world)]
            works.append(dist.all_gather(bufs, flat, group=self.group, async_op=True))
            gathered.append(bufs)

        def finish() -> list[list[Tensor]]:
            return [[gathered[j][r][:_numel(sizes[r][j])].reshape(sizes[r][j]).clone() for j in range(k)]
                    for r in range(self.world)]

        nbytes = sum(t.numel() * t.element_size() for t in payload)
        return Pending(works, finish, nbytes=nbytes)

    def start(self, req: AllReduce | AllGather) -> Pending:
        if isinstance(req, AllReduce):
            return self.start_all_reduce(req)
        if isinstance(req, AllGather):
            return self.start_all_gather(req)
        raise TypeError(f"not a collective: {type(req).__name__}")

    def run(self, req: AllReduce | AllGather) -> Any:
        return self.start(req).get()


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
