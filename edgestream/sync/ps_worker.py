"""The worker side of the parameter-server family, shared by its algorithms.

`gradient_worker` is the worker of every algorithm whose workers push one gradient per step (asp,
ssp, dssp, consgd, dynsgd, bsp, elastic-bsp); what differs between them is the coordinator, which
decides how an update applies and when a pull returns. Each step:

    batch = TakeBatch; res = Compute(batch); ctx.step += 1
    Push(encoded gradient, version, n, loss, lr = eta at the step, stop = ctx.should_stop(ctx.step))
    Ack(batch)        # the update is with the PS: the batch's offsets may be committed
    pulled = Pull()   # blocks as the coordinator says; SetParams(pulled.params)
    Log(...)          # leave when pulled.stop

The worker never applies its gradient itself: the optimizer runs at the coordinator, and the worker
trains on the model it pulled. Stopping: `stop.max_steps` counts a worker's own steps; the first vote
stops the run, and every worker leaves after its next pull.

`encode` applies the run's compression to a push (error feedback, then the compressor) and returns
the dense update the PS applies together with the bytes the compressed payload costs on the wire. An
adaptive Top-k worker decides by its own statistic (there is no group vote on a PS).

State (`ctx.state`, complete at each Log): "version" (of the model last pulled) and "codec".
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from edgestream.compression import NoneCompressor, payload_nbytes, wire_floats
from edgestream.sync.context import WorkerContext
from edgestream.sync.exchange import Codec, _compression_loss
from edgestream.sync.hyperparams import Param, coerce
from edgestream.sync.requests import Ack, Compute, ComputeResult, Log, Pull, Pulled, Push, SetParams, TakeBatch

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor

#: the batch parameter every PS worker takes
BATCH = Param("batch", None, "int", ge=1, optional=True,
              doc="fixed batch b; null = the run's batch policy (config default: fixed 64)")

_IDENTITY = NoneCompressor()


def encode(grads: Sequence[Tensor], codec: Codec, names: Sequence[str]) -> tuple[list[Tensor], int, bool]:
    """(dense update the PS receives, bytes on the wire, compressed?) for one push of `grads`."""
    grads = list(grads)
    compressor, memory = codec.compressor, codec.memory
    if compressor is None or compressor.name == "none":
        return grads, payload_nbytes(grads), False
    compress = True
    if codec.adaptive is not None:
        codec.adaptive.observe(_compression_loss(compressor, memory, grads, names))
        compress = bool(codec.adaptive.vote())
    if not compress:  # dense step: fold the residual in once and reset it (as the collective exchange)
        ts = [g if memory is None else memory.compensate(g, n) for g, n in zip(grads, names, strict=True)]
        if memory is not None:
            for t, n in zip(ts, names, strict=True):
                memory.update(t, n, _IDENTITY, _IDENTITY.compress(t, n))
        return ts, payload_nbytes(ts), False
    out, sent = [], 0
    for g, n in zip(grads, names, strict=True):
        t = g if memory is None else memory.compensate(g, n)
        c = compressor.compress(t, n)
        if memory is not None:
            memory.update(t, n, compressor, c)
        sent += c.nbytes
        out.append(compressor.decompress(c).reshape(g.shape).to(g.dtype))
    return out, sent, True


def gradient_worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """One PS worker pushing a gradient per step and training on the model it pulls (module doc)."""
    p = coerce((BATCH,), {k: v for k, v in ctx.params.items() if k == "batch"})
    codec = Codec.from_spec(ctx.compression)
    codec.load_state_dict(ctx.state.get("codec", {}))
    version = int(ctx.state.get("version", 0))
    while True:
        batch = yield TakeBatch(p["batch"])
        res: ComputeResult = yield Compute(batch)
        lr = ctx.lr_now()
        update, sent, compressed = encode(res.grads, codec, ctx.names(len(res.grads)))
        ctx.step += 1
        yield Push(update, version=version, n=res.n, loss=res.loss, lr=lr, stop=ctx.should_stop(ctx.step),
                   nbytes=sent)
        yield Ack(batch)
        pulled: Pulled = yield Pull()
        yield SetParams(pulled.params)
        version = pulled.version
        ctx.state["version"] = version
        ctx.state["codec"] = codec.state_dict()
        yield Log(step=ctx.step - 1, batch=res.n, loss=res.loss, lr=lr, floats_sent=wire_floats(sent),
                  bytes_sent=sent, compressed=compressed, version=version)
        if pulled.stop:
            return
