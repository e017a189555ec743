"""abs-sgd: delayed synchronous SGD with adaptive batch size (001 section 5, ALGORITHMS.md).

Iteration t on worker i: start a non-blocking all-reduce (op "sum") of [G_i^{t-1}..., n_i^{t-1}, stop]
— the SUM of per-sample gradients of the previous iteration and its sample count. While it is in
flight, compute reference batches (`ref_batch` samples, at least one) on w_t, accumulating G_i^t and
n_i^t. When it completes: g = sum G / sum n (sample-weighted, so fast workers weigh more),
g~ = g + lambda g g (w_t - w_{t-1}) (DC-ASGD delay compensation), and the optimizer steps with g~.

The update goes through `Apply` (the run's optimizer: with momentum 0 and weight decay 0 it is
exactly w_{t+1} = w_t - eta g~), so every engine keeps one optimizer path; w_t comes from
`GetParams`. Iteration 0 has nothing to reduce: it computes one reference batch and moves on.
Batches are acked after the update that used their gradients (one iteration later).

State (`ctx.state`, complete at each Log): "w_prev" (w_t of the iteration just applied, which is
w_{t-1} of the next), "G" and "n" (the gradient sum and sample count the next all-reduce sends) and
"loss_sum". A worker restored from it starts at the next iteration's all-reduce; the batches behind
"G" are never acked by it (see edgestream.sync.context on batches and checkpoints).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from edgestream.compression import payload_nbytes, wire_floats
from edgestream.sync.context import WorkerContext
from edgestream.sync.hyperparams import Param, coerce
from edgestream.sync.requests import (
    Ack,
    AllReduce,
    Apply,
    Compute,
    ComputeResult,
    GetParams,
    Log,
    Poll,
    Start,
    TakeBatch,
)

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor

PARAMS = (
    Param("ref_batch", 32, "int", ge=1, doc="reference batch size"),
    Param("lambda", 0.5, "float", ge=0, doc="delay-compensation coefficient"),
)


def delay_compensate(g: Sequence[Tensor], w_t: Sequence[Tensor], w_prev: Sequence[Tensor],
                     lam: float) -> list[Tensor]:
    """g~ = g + lambda * g * g * (w_t - w_{t-1}), element-wise per tensor (DC-ASGD, 001 ref. [24])."""
    return [gi + lam * gi * gi * (wt - wp) for gi, wt, wp in zip(g, w_t, w_prev, strict=True)]


def worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """One ABS-SGD worker (see module doc)."""
    import torch

    p = coerce(PARAMS, ctx.params)
    ref, lam = p["ref_batch"], p["lambda"]
    st = ctx.state

    def accumulate() -> Generator[Any, Any, tuple[list[Tensor], int, float, Any]]:
        batch = yield TakeBatch(ref)
        r: ComputeResult = yield Compute(batch)
        return [g * r.n for g in r.grads], r.n, r.loss * r.n, batch

    if "G" in st:  # restored at the end of an iteration
        w_prev, G, n, loss_sum = list(st["w_prev"]), list(st["G"]), int(st["n"]), float(st["loss_sum"])
        pending: list[Any] = []
    else:  # iteration 0: one reference batch on w_0
        w_prev = yield GetParams()
        G, n, loss_sum, b0 = yield from accumulate()
        pending = [b0]
    while True:
        w_t: list[Tensor] = yield GetParams()
        flag = 1.0 if ctx.should_stop(ctx.step + 1) else 0.0
        meta = torch.tensor([float(n), flag], dtype=G[0].dtype, device=G[0].device)
        sent = [*G, meta]
        handle = yield Start(AllReduce(sent, op="sum"))
        G_new = [torch.zeros_like(g) for g in G]
        n_new, loss_new, batches, refs = 0, 0.0, [], 0
        while True:
            g_b, n_b, l_b, batch = yield from accumulate()
            G_new = [a + b for a, b in zip(G_new, g_b, strict=True)]
            n_new, loss_new, refs = n_new + n_b, loss_new + l_b, refs + 1
            batches.append(batch)
            done, reduced = yield Poll(handle)
            if done:
                break
        total_n = float(reduced[-1][0])
        g = [s / total_n for s in reduced[:-1]]
        g_tilde = delay_compensate(g, w_t, w_prev, lam)
        lr = ctx.lr_now()
        yield Apply(g_tilde, lr)
        for b in pending:
            yield Ack(b)
        nbytes = payload_nbytes(sent)
        fields = dict(step=ctx.step, batch=n, global_batch=total_n, loss=loss_sum / max(n, 1), lr=lr,
                      ref_batches=refs, floats_sent=wire_floats(nbytes), bytes_sent=nbytes, compressed=False)
        ctx.step += 1
        w_prev, G, n, loss_sum, pending = w_t, G_new, n_new, loss_new, batches
        ctx.state.update(w_prev=w_prev, G=G, n=n, loss_sum=loss_sum)
        yield Log(**fields)
        if float(reduced[-1][1]) > 0:
            return  # this iteration's batches were never applied: not acked, so they are redelivered
