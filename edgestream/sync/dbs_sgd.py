"""dbs-sgd: dynamic batch sizing (DBS), a baseline of ABS-SGD (001, ALGORITHMS.md).

The global batch B = base_batch * M stays constant; every `every` steps the workers share their
measured speeds (samples per second of Compute, timed with `Now()`) in one small all-reduce and
re-assign b_i proportional to speed (`reassign_batches`, a pure function, so all workers agree).
Gradients are averaged sample-weighted (weight n_i) through the shared `exchange`; the LR is eta.

State (`ctx.state`, complete at each Log): "batches" (the current assignment b), "busy_s" and
"samples" (the speed measured since the last re-assignment) and "codec". The re-assignment due after
a step runs at the top of the next one, so a restored worker performs it first.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from edgestream.sync.context import WorkerContext
from edgestream.sync.exchange import Codec, synchronous_step
from edgestream.sync.hyperparams import Param, coerce
from edgestream.sync.requests import AllReduce, Compute, ComputeResult, GetParams, Log, Now, TakeBatch

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    pass

PARAMS = (
    Param("base_batch", 64, "int", ge=1, doc="per-worker base batch; global batch B = base_batch * M"),
    Param("every", 50, "int", ge=1, doc="re-assign batch sizes every this many steps (an 'epoch')"),
    Param("min_batch", 1, "int", ge=1, doc="smallest batch a worker is assigned"),
)


def reassign_batches(speeds: Sequence[float], total: int, min_batch: int = 1) -> list[int]:
    """Integer b_i proportional to speeds with sum exactly `total` and every b_i >= min_batch.

    Ideal shares x_i = total * s_i / sum s are floored (then raised to min_batch); the remainder is
    handed out one sample at a time by largest fractional part (ties: lower rank), and any excess
    from the min_batch floor is taken back, one at a time, from the worker furthest above its share.
    Non-positive or non-finite speeds count as 0; all zero means equal shares.
    """
    m = len(speeds)
    if m == 0:
        raise ValueError("reassign_batches needs at least one speed")
    if min_batch < 1 or total < m * min_batch:
        raise ValueError(f"total {total} cannot give {m} workers at least {min_batch} each")
    s = [float(v) if math.isfinite(v) and v > 0 else 0.0 for v in speeds]
    if sum(s) == 0.0:
        s = [1.0] * m
    ideal = [total * v / sum(s) for v in s]
    b = [max(min_batch, math.floor(x)) for x in ideal]
    by_remainder = sorted(range(m), key=lambda i: (-(ideal[i] - math.floor(ideal[i])), i))
    k = 0
    while sum(b) < total:
        b[by_remainder[k % m]] += 1
        k += 1
    while sum(b) > total:  # only after raising shares to min_batch; take from those above it
        i = max((j for j in range(m) if b[j] > min_batch), key=lambda j: (b[j] - ideal[j], -j))
        b[i] -= 1
    return b


def worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """One dbs-sgd worker (see module doc)."""
    import torch

    p = coerce(PARAMS, ctx.params)
    m = ctx.world_size
    total = p["base_batch"] * m
    st = ctx.state
    b = [int(v) for v in st["batches"]] if "batches" in st else reassign_batches([1.0] * m, total, p["min_batch"])
    busy_s, samples = float(st.get("busy_s", 0.0)), int(st.get("samples", 0))
    codec = Codec.from_spec(ctx.compression)
    codec.load_state_dict(st.get("codec", {}))
    device = None  # the gradients' device, where the speeds all-reduce lives
    while True:
        if ctx.step > 0 and ctx.step % p["every"] == 0:
            if device is None:  # restored right before a re-assignment: no gradients seen yet
                device = (yield GetParams())[0].device
            mine = torch.zeros(m, dtype=torch.float64, device=device)
            mine[ctx.rank] = samples / busy_s if busy_s > 0 else 0.0
            (speeds,) = yield AllReduce([mine], op="sum")
            b = reassign_batches([float(v) for v in speeds], total, p["min_batch"])
            busy_s, samples = 0.0, 0
        batch = yield TakeBatch(b[ctx.rank])
        t0 = yield Now()
        res: ComputeResult = yield Compute(batch)
        t1 = yield Now()
        device = res.grads[0].device
        busy_s, samples = busy_s + (t1 - t0), samples + res.n
        ex, lr = yield from synchronous_step(ctx, codec, res.grads, float(res.n), batch)
        ctx.state.update(batches=list(b), busy_s=busy_s, samples=samples, codec=codec.state_dict())
        yield Log(step=ctx.step - 1, batch=res.n, assigned_batch=b[ctx.rank], global_batch=ex.total_weight,
                  loss=res.loss, lr=lr, floats_sent=ex.floats, bytes_sent=ex.nbytes, compressed=ex.compressed)
        if ex.stop:
            return
