"""The collectives of sync/ performed over torch.distributed (gloo on CPU, NCCL on CUDA).

AllReduce has two modes (config `runtime.reduction`, given to `DistCollectives`):

* ``"allreduce"`` (the default): `torch.distributed.all_reduce` (SUM), bucketed like DDP. The tensors
  are flattened in order into buckets of at most `bucket_mb` MiB (default 25, DDP's bucket_cap_mb; a
  tensor bigger than a bucket travels alone, and a bucket never mixes dtypes or devices), and each
  bucket's async all_reduce is launched as soon as it is built, so the backend's ring or tree moves
  about 2 (M-1)/M of the gradient bytes per rank instead of M full copies. op "sum" is the bucket
  sum. op "weighted_mean" computes sum_i w_i t_i / sum_i w_i: each rank multiplies its buckets by its
  own w_i, the products are summed, and the weights are summed in a separate float64 all_reduce
  (launched first) that the result is divided by. An all_reduce's result is the same on every rank, so
  the replicas stay bitwise identical; but the summation order is the backend's (it depends on the
  group size and algorithm), so results equal `reduce_all`'s rank-order sum only up to rounding
  (allclose). Like torch.distributed itself, this mode requires the same tensor shapes and op on every
  rank; a mismatch fails in the backend rather than with a named error.
* ``"exact"``: every worker's tensors, and its weight as a separate float64 tensor, are all-gathered and
  combined locally with `edgestream.sync.reduction.reduce_all` in rank order, so every rank gets
  bit-for-bit the same result as the simulator and the lockstep engine (tests that compare engines
  bitwise use it; mismatched shapes or ops are reported by name). Every rank receives M full copies.

* ``runtime.shared_memory`` (default on, gloo groups only): when every rank of the group shares memory with
  every other (ranks on one host: found out at the first all-reduce, `edgestream.trainer.shm_reduce`), an
  "allreduce" of one floating dtype goes through shared memory instead of loopback TCP: each rank posts its
  tensors in its own slot and sums everyone's in rank order -- one copy in, one sum, no network round trips.
  The result is then bit for bit the rank-order sum of ``"exact"`` for op "sum". Anything else (ranks on
  other hosts or in containers with their own /dev/shm, mixed dtypes, integer tensors, payloads over 256 MiB)
  uses gloo as above, every rank alike.

With one worker nothing travels: both modes return `reduce_all` of the one request. An empty tensor
list reduces to an empty list, in both modes and without a transfer (all ranks have the same shapes).

AllGather handles payloads whose sizes differ between workers (sparse Top-k values and indices): sizes
are exchanged first, then each tensor is gathered padded to the largest and trimmed. No pickle: only
tensors travel.

`Start` launches the data transfers with async_op=True and returns a `Pending`; `Poll` checks it
without blocking, `Wait` blocks. Results are fresh tensors on the gradients' device (in "allreduce"
mode, views into this call's own bucket buffers, which nothing else holds).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from edgestream.compression import payload_nbytes
from edgestream.sync.reduction import reduce_all
from edgestream.sync.requests import AllGather, AllReduce

log = logging.getLogger("edgestream.trainer")

#: the AllReduce modes (config runtime.reduction)
REDUCTIONS = ("allreduce", "exact")
Reduction = Literal["allreduce", "exact"]
#: bucket size in MiB for "allreduce" (config runtime.bucket_mb; DDP's bucket_cap_mb default)
DEFAULT_BUCKET_MB = 25.0


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

    def __init__(self, rank: int, world: int, group: Any = None, *, reduction: Reduction = "allreduce",
                 bucket_mb: float = DEFAULT_BUCKET_MB, host_staging: bool = False, shared_memory: bool = False,
                 timeout_s: float = 1800.0) -> None:
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
        if not (isinstance(bucket_mb, (int, float)) and math.isfinite(bucket_mb) and bucket_mb > 0):
            raise ValueError(f"bucket_mb must be a finite number > 0, got {bucket_mb!r}")
        self.rank, self.world, self.group = rank, world, group
        self.reduction: Reduction = reduction
        self.bucket_bytes = max(1, int(bucket_mb * 2**20))
        # gloo reduces CUDA tensors but cannot all-gather them: a GPU rank in a gloo group (a mixed
        # cluster, edgestream.trainer.backend) stages its all-gathers through host memory
        self.host_staging = bool(host_staging)
        # co-located ranks' all-reduce through shared memory (module doc): joined at the first all-reduce
        self.shared_memory, self.timeout_s = bool(shared_memory), float(timeout_s)
        self._shm: Any = None
        self._shm_joined = False

    def transport(self) -> str:
        """What this rank's all-reduces travel through: "shared memory" once the group joined it, else "backend"."""
        return "shared memory" if self._shm is not None else "backend"

    def close(self) -> None:
        """Remove this rank's shared-memory files, if any (before the process group is destroyed)."""
        if self._shm is not None:
            self._shm.close()
            self._shm = None

    # ------------------------------------------------------------------ all-reduce
    def start_all_reduce(self, req: AllReduce) -> Pending:
        if not req.tensors:  # every rank has the same (no) tensors: nothing to reduce
            return Pending([], list, nbytes=0)
        if self.world == 1:  # nothing to exchange: the same arithmetic, no transfer
            return Pending([], lambda: reduce_all([req]), nbytes=0)
        if self.reduction == "exact":
            return self._start_exact(req)
        return self._start_bucketed(req)

    def _start_bucketed(self, req: AllReduce) -> Pending:
        """torch.distributed.all_reduce per bucket, or through shared memory (see the module doc)."""
        tensors = [t.detach() for t in req.tensors]
        nbytes = payload_nbytes(tensors)
        weighted = req.op == "weighted_mean"
        w = float(req.weight)
        if self.shared_memory:
            pending = self._start_shared(tensors, nbytes, w if weighted else None)
            if pending is not None:
                return pending
        works: list[Any] = []
        wbuf = None
        if weighted:  # the weights first (tiny), float64 whatever the data dtypes
            wbuf = torch.tensor([w], dtype=torch.float64, device=tensors[0].device)
            works.append(dist.all_reduce(wbuf, op=dist.ReduceOp.SUM, group=self.group, async_op=True))
        buckets = _buckets(tensors, self.bucket_bytes)
        flats: list[Tensor] = []
        for idx in buckets:
            # a fresh contiguous buffer (any strides in); torch's flatten of ONE tensor is that tensor's own
            # storage, which the all-reduce would overwrite: copied
            flat = (_flatten_dense_tensors([tensors[i] for i in idx]) if len(idx) > 1
                    else tensors[idx[0]].reshape(-1).clone())
            if weighted and not (flat.is_floating_point() or flat.is_complex()):
                flat = flat * w  # an integer bucket becomes floating, as reduce_all's w_i t_i does
            elif weighted and w != 1.0:
                flat.mul_(w)  # w_i t_i, in this rank's own buffer (x * 1.0 == x: skipped)
            if flat.numel():  # launched now: the transfer runs while the next bucket is built
                works.append(dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group, async_op=True))
            flats.append(flat)

        def finish() -> list[Tensor]:
            total = 0.0
            if wbuf is not None:
                total = float(wbuf[0])
                if total <= 0:
                    raise RuntimeError("weighted_mean all-reduce with total weight <= 0")
            out: list[Tensor | None] = [None] * len(tensors)
            for idx, flat in zip(buckets, flats, strict=True):
                if wbuf is not None:
                    flat.div_(total)
                for i, view in zip(idx, _unflatten_dense_tensors(flat, [tensors[i] for i in idx]), strict=True):
                    out[i] = view
            return out  # type: ignore[return-value]

        return Pending(works, finish, nbytes=nbytes)

    def _start_shared(self, tensors: list[Tensor], nbytes: int, weight: float | None) -> Pending | None:
        """The all-reduce through shared memory, or None where the group does not share memory or the request
        does not fit it (decided alike on every rank: the request's dtypes and sizes are the same on all)."""
        if not self._shm_joined:  # the first all-reduce of every rank: a collective
            from edgestream.trainer.shm_reduce import ShmReducer

            self._shm_joined = True
            self._shm = ShmReducer.join(self.rank, self.world, self.group, self.timeout_s)
            log.info("rank %d: all-reduces %s", self.rank,
                     "through shared memory (every rank of the group is on this host)" if self._shm is not None
                     else "through the backend (not every rank of the group shares this host's memory)")
        shm = self._shm
        dtype = tensors[0].dtype
        if shm is None or not dtype.is_floating_point or any(t.dtype != dtype for t in tensors):
            return None
        if weight is not None and not shm.uniform_threads:  # (shm_reduce.ShmReducer.join)
            return None
        cap = shm.ready_for(nbytes, self.group)
        if cap is None:
            return None
        work = shm.start(tensors, cap, weight)
        home = tensors[0].device

        def finish() -> list[Tensor]:
            flat = work.result if home.type == "cpu" else work.result.to(home)
            return _unflatten_dense_tensors(flat, tensors)

        return Pending([work], finish, nbytes=nbytes)

    def _start_exact(self, req: AllReduce) -> Pending:
        """All-gather + `reduce_all` in rank order (see the module doc)."""
        tensors = [t.detach() for t in req.tensors]
        home = tensors[0].device if tensors else torch.device("cpu")
        if self.host_staging and home.type != "cpu":  # gloo cannot all-gather CUDA tensors (see __init__)
            tensors = [t.cpu() for t in tensors]
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
            out = reduce_all(per_rank)
            return out if home == device else [t.to(home) for t in out]

        nbytes = payload_nbytes(tensors)
        return Pending(works, finish, nbytes=nbytes)

    # ------------------------------------------------------------------ all-gather
    def start_all_gather(self, req: AllGather) -> Pending:
        payload = [t.detach().contiguous() for t in req.payload]
        if self.world == 1:
            return Pending([], lambda: [[t.clone() for t in payload]], nbytes=0)
        home = payload[0].device if payload else torch.device("cpu")
        if self.host_staging and home.type != "cpu":
            payload = [t.cpu() for t in payload]
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
            return [[gathered[j][r][:_numel(sizes[r][j])].reshape(sizes[r][j]).to(home, copy=True) for j in range(k)]
                    for r in range(self.world)]

        nbytes = payload_nbytes(payload)
        return Pending(works, finish, nbytes=nbytes)

    def start(self, req: AllReduce | AllGather) -> Pending:
        if isinstance(req, AllReduce):
            return self.start_all_reduce(req)
        if isinstance(req, AllGather):
            return self.start_all_gather(req)
        raise TypeError(f"not a collective: {type(req).__name__}")

    def run(self, req: AllReduce | AllGather) -> Any:
        return self.start(req).get()


def _buckets(tensors: list[Tensor], cap: int) -> list[list[int]]:
    """Consecutive runs of `tensors`' indices, each of one dtype and device and at most `cap` bytes (a
    tensor bigger than `cap` is a bucket of its own): DDP's bucketing, in the request's order."""
    buckets: list[list[int]] = []
    cur: list[int] = []
    size, key = 0, None
    for i, t in enumerate(tensors):
        nb = t.nbytes
        k = (t.dtype, t.device)
        if cur and (k != key or size + nb > cap):
            buckets.append(cur)
            cur, size = [], 0
        cur.append(i)
        size, key = size + nb, k
    if cur:
        buckets.append(cur)
    return buckets


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
