"""ddl: conventional distributed SGD (BSP), the baseline of ScaDLES and ABS-SGD (ALGORITHMS.md).

Every worker takes a batch of b samples (param `batch`; None = the run's batch policy, fixed 64 by
default), computes g_i, the group averages g = (1/M) sum_i g_i (plain mean: weight 1 each) and every
worker applies the same update. Compression, when configured, applies to the exchange.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from edgestream.sync.context import WorkerContext
from edgestream.sync.exchange import Codec, synchronous_step
from edgestream.sync.hyperparams import Param, coerce
from edgestream.sync.requests import Compute, ComputeResult, Log, TakeBatch

PARAMS = (Param("batch", None, "int", ge=1, optional=True,
                doc="fixed batch b; null = the run's batch policy (config default: fixed 64)"),)


def worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """One ddl worker: take, compute, average (weight 1), apply, ack; until the group agrees to stop.

    State (`ctx.state`): {"codec": the compressor's, memory's and adaptive statistic's state}."""
    p = coerce(PARAMS, ctx.params)
    codec = Codec.from_spec(ctx.compression)
    codec.load_state_dict(ctx.state.get("codec", {}))
    while True:
        batch = yield TakeBatch(p["batch"])
        res: ComputeResult = yield Compute(batch)
        ex, lr = yield from synchronous_step(ctx, codec, res.grads, 1.0, batch)
        ctx.state["codec"] = codec.state_dict()
        yield Log(step=ctx.step - 1, batch=res.n, loss=res.loss, lr=lr, floats_sent=ex.floats,
                  bytes_sent=ex.nbytes, compressed=ex.compressed)
        if ex.stop:
            return
