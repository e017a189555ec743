"""The gradient exchange shared by ddl, scadles and dbs-sgd: weighted aggregation, any compressor.

    result = yield from exchange(grads, weight, compressor, memory, adaptive=..., stop=...)

returns the weighted mean  sum_i w_i t_i / sum_i w_i  of every worker's (compensated, compressed)
gradients t_i, together with W = sum_i w_i, so no extra round is needed for ScaDLES' LR scaling. The
stop flags of all workers travel with the data (one float), so the group agrees on stopping.

Paths (one collective each, plus one tiny all-reduce of votes for adaptive Top-k):
* dense (compressor None or "none", or an adaptive step voted dense): AllReduce(op="sum") of
  [w t_l ...] + [[w, stop]], then divide by W. Any error-feedback residual is folded into t and the
  memory is reset through the identity codec (ScaDLES' dense step; the residual is counted once).
* compressed: each layer t = memory.compensate(g); c = compress(t); memory.update(t, c); AllGather of
  all payloads + [[w, stop]]; sparse payloads are scatter-added with weights w_j, others decompressed
  and summed with weights w_j; then divided by W (GRACE's all-gather communicator).
* adaptive Top-k (004 section IV): each worker computes its compression loss c, folds it into its
  statistic and votes; AllReduce(op="sum") of [[vote, 1, w, stop]] gives the group decision
  (compress when 2 * votes >= M, ties compress), then one of the two paths above.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgestream.compression import (
    AdaptiveTopKState,
    Compressed,
    Compressor,
    Memory,
    NoneCompressor,
    build_compressor,
    compression_loss,
    payload_nbytes,
    scatter_add_sparse,
    wire_floats,
)
from edgestream.sync.requests import Ack, AllGather, AllReduce, Apply

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    import torch
    from torch import Tensor

_IDENTITY = NoneCompressor()


@dataclass
class ExchangeResult:
    """update: the weighted mean of the workers' gradients; total_weight: W = sum_i w_i;
    compressed: whether this step sent compressed payloads; floats, nbytes: what this worker sent;
    stop: whether any worker asked to stop; votes: compress votes (adaptive Top-k only)."""

    update: list[Tensor]
    total_weight: float
    compressed: bool
    floats: int
    nbytes: int
    stop: bool
    votes: int | None = None
    #: workers that voted drift at this step (`exchange(drift=...)`: the run agrees on drift responses), else 0
    drift_votes: int = 0


@dataclass
class Codec:
    """A worker's compression state: compressor (None = dense), error-feedback memory, and the
    adaptive Top-k statistic (None unless the compressor is adaptive-topk)."""

    compressor: Compressor | None = None
    memory: Memory | None = None
    adaptive: AdaptiveTopKState | None = None

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> Codec:
        """From a `compression:` block. Memory default: residual (error feedback) for sparse
        compressors, none otherwise."""
        spec = dict(spec or {"name": "none"})
        compressor = build_compressor(spec)
        if compressor.name == "none":
            return cls()
        memory_name = spec.get("memory") or ("residual" if compressor.sparse else "none")
        adaptive = compressor.new_state() if hasattr(compressor, "new_state") else None
        # here, not at the top: memories import torch (~2.5 s, 600 MB), and the orchestrator and the producer
        # import sync/ without it (tests/unit/test_lazy_imports.py)
        from edgestream.compression.error_feedback import build_memory

        return cls(compressor, build_memory(memory_name), adaptive)

    def state_dict(self) -> dict[str, Any]:
        """The compressor's, memory's and adaptive statistic's state (tensors and plain values; {}
        for dense), for `WorkerContext.state`. Valid until the next exchange: copy it to keep it."""
        out: dict[str, Any] = {}
        for key, part in (("compressor", self.compressor), ("memory", self.memory), ("adaptive", self.adaptive)):
            if part is not None:
                out[key] = part.state_dict()
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned (into a codec built from the same spec)."""
        for key, part in (("compressor", self.compressor), ("memory", self.memory), ("adaptive", self.adaptive)):
            if key in state:
                if part is None:
                    raise ValueError(f"codec state has {key!r} state, but this codec has no {key}")
                part.load_state_dict(state[key])


def _meta(weight: float, flag: float, dtype: torch.dtype, device: Any, drift: float | None = None) -> Tensor:
    """The [w, stop] tensor that rides along with the dense payload (see `_meta_pair`)."""
    return _meta_pair(weight, flag, dtype, device, drift)[0]


@functools.lru_cache(maxsize=1024)
def _meta_pair(weight: float, flag: float, dtype: torch.dtype, device: Any,
               drift: float | None = None) -> tuple[Tensor, tuple[float, ...]]:
    """The [w, stop] tensor that rides along with the dense payload, and its values as read back on the host
    (`tolist()` of it: the dtype's rounding). Cached: every worker sends one per step and there are few
    distinct values (building a tensor costs more than the step's other bookkeeping); safe to share because
    no engine's collective modifies its inputs (all-gathers copy them: the simulator snapshots, the real
    runtime packs into its own buffers). The host values spare a world of one, whose sum is the tensor it
    sent, reading a GPU tensor back: a wait for everything queued on the device, once per step."""
    import torch

    # [w, stop], and this worker's drift vote when the run agrees on drift responses (`exchange(drift=...)`)
    host = torch.tensor([weight, flag] if drift is None else [weight, flag, drift], dtype=dtype, device="cpu")
    return (host if device is None else host.to(device)), tuple(host.tolist())


def _divide(sums: Sequence[Tensor], total: float, *, in_place: bool = False) -> list[Tensor]:
    """s / total for every tensor, in one call (a foreach op: one Python call, not one per tensor; on the
    CPU the same division per tensor as `s / total`). A total of 1 divides nothing: s / 1.0 == s bit for bit.
    in_place: divide the tensors themselves (they must be the caller's own), bit for bit the same values
    without allocating new ones."""
    import torch

    sums = list(sums)
    if not sums or total == 1.0:
        return sums
    if in_place:
        torch._foreach_div_(sums, total)
        return sums
    return list(torch._foreach_div(sums, total))


def _scale(tensors: Sequence[Tensor], weight: float) -> list[Tensor]:
    """weight * t for every tensor, in one foreach call on the CPU (per tensor the same product as
    `weight * t`, tests/unit/test_sync_exchange.py); integer tensors (type promotion, as `weight * t` does it)
    and other devices' tensors (not checked there) are multiplied one by one."""
    import torch

    tensors = list(tensors)
    if tensors and all(t.is_floating_point() and t.device.type == "cpu" for t in tensors):
        return list(torch._foreach_mul(tensors, float(weight)))
    return [weight * t for t in tensors]


def _compression_loss(compressor: Compressor, memory: Memory | None, grads: Sequence[Tensor],
                      names: Sequence[str]) -> float:
    """This worker's compression loss c (by the compressor's statistic when it defines one)."""
    if hasattr(compressor, "loss"):
        residual = getattr(memory, "residual", None)
        residuals = [residual(n) for n in names] if residual is not None else None
        return float(compressor.loss(grads, residuals))
    return compression_loss(grads, float(getattr(compressor, "ratio", 0.1)))


def exchange(
    grads: Sequence[Tensor],
    weight: float,
    compressor: Compressor | None = None,
    memory: Memory | None = None,
    *,
    names: Sequence[str] | None = None,
    adaptive: AdaptiveTopKState | None = None,
    stop: bool = False,
    drift: bool | None = None,
) -> Generator[AllReduce | AllGather, Any, ExchangeResult]:
    """Aggregate this worker's gradients with the group's: sum_i w_i t_i / sum_i w_i (see module doc).

    grads: mean-loss gradients of this worker; weight: w_i (b_i for ScaDLES, 1.0 for a plain mean);
    compressor/memory: None for dense; names: per-tensor keys for the memory (default "0", "1", ...);
    adaptive: this worker's adaptive Top-k statistic (then `compressor` must be Top-k-like).
    drift: this worker's drift vote, summed with the group's like the stop flag (`ExchangeResult.drift_votes`), so
    that every worker performs a drift response at the same step (edgestream.runner.responses); None (runs without
    such responses): nothing extra is sent.
    """
    import torch

    if weight < 0:
        raise ValueError(f"exchange weight must be >= 0, got {weight}")
    grads = list(grads)
    names = list(names) if names is not None else [str(i) for i in range(len(grads))]
    dtype = grads[0].dtype if grads else torch.float32
    device = grads[0].device if grads else None  # metadata travels with the gradients (NCCL on CUDA)
    flag = 1.0 if stop else 0.0
    sent = 0
    votes: int | None = None
    compress = compressor is not None and compressor.name != "none"
    meta_known: tuple[float, bool, int] | None = None  # (W, any stop, drift votes) once reduced
    dv = None if drift is None else (1.0 if drift else 0.0)
    extra = [] if dv is None else [dv]

    if compress and adaptive is not None:
        adaptive.observe(_compression_loss(compressor, memory, grads, names))
        meta = torch.tensor([float(adaptive.vote()), 1.0, float(weight), flag, *extra], dtype=torch.float64,
                            device=device)
        sent += payload_nbytes([meta])
        (reduced,) = yield AllReduce([meta], op="sum")
        votes, m = int(round(float(reduced[0]))), int(round(float(reduced[1])))
        compress = 2 * votes >= m
        meta_known = (float(reduced[2]), bool(float(reduced[3]) > 0),
                      int(round(float(reduced[4]))) if dv is not None else 0)

    if not compress:
        ts = [g if memory is None else memory.compensate(g, n) for g, n in zip(grads, names, strict=True)]
        if memory is not None:  # fold the residual in once, then reset it through the identity codec
            for t, n in zip(ts, names, strict=True):
                memory.update(t, n, _IDENTITY, _IDENTITY.compress(t, n))
        # w t_i. With w = 1 the tensors travel as they are: 1.0 * t == t bit for bit, and no engine's
        # all-reduce modifies its inputs (the simulator and the lockstep engine sum into fresh tensors,
        # the real runtime copies into its own bucket buffers), so this saves one op per tensor per step.
        if weight == 1.0 and all(map(torch.is_floating_point, ts)):
            out = list(ts)
        else:  # one foreach call for all tensors: per tensor the same product as `weight * t`
            out = _scale(ts, weight)
        meta = None
        if meta_known is None:
            meta, meta_host = _meta_pair(float(weight), flag, dtype, device, dv)
            out.append(meta)
        reduced = yield AllReduce(out, op="sum")
        derive = getattr(reduced, "derive", None)
        # every worker of one all-reduce sends tensors of the same shapes (the engines check), so the
        # simulator counts the payload's bytes once per operation
        sent += payload_nbytes(out) if derive is None else derive(("nbytes", len(out)), lambda: payload_nbytes(out))
        if meta_known is None:
            if derive is not None:  # the simulator's result: read once per operation, never copied per worker
                values = derive(("meta",), lambda: tuple(reduced[-1].tolist()))
            else:
                back = reduced[-1]
                if back.data_ptr() == meta.data_ptr() and back.dtype == meta.dtype and back.numel() == meta.numel():
                    # a sum of one is (a view of) what it sent, which nothing writes into: its values are known
                    values = meta_host
                else:
                    values = reduced[-1].tolist()
            meta_known = (float(values[0]), bool(values[1] > 0), int(round(values[2])) if dv is not None else 0)
        total, any_stop, drift_votes = meta_known
        n = len(ts)
        if derive is not None:
            # the simulator's all-reduce result (edgestream.sim.collectives.ReduceResult): every worker
            # would divide the same sum by the same W, so the first does it and the others share the
            # (read-only) tensors; the real runtime returns a plain list and divides here
            update = list(derive(("mean", n, total), lambda: _divide(reduced[:n], total)))
        else:
            # a result is this worker's own (edgestream.sync.requests): divided where it is (the real
            # runtime's bucket buffers), unless it is what this worker sent (a world of one sums to its inputs)
            sums = reduced[:n]
            shared = any(r.data_ptr() == o.data_ptr() and r.numel()  # (empty: no memory)
                         for r, o in zip(sums, out, strict=False))
            update = _divide(sums, total, in_place=not shared)
        return ExchangeResult(update, total, False, wire_floats(sent), sent, any_stop, votes, drift_votes)

    assert compressor is not None
    sent_compressed: list[Compressed] = []
    payload: list[Tensor] = []
    for g, n in zip(grads, names, strict=True):
        t = g if memory is None else memory.compensate(g, n)
        c = compressor.compress(t, n)
        if memory is not None:
            memory.update(t, n, compressor, c)
        sent_compressed.append(c)
        payload.extend(c.payload)
    payload.append(_meta(float(weight), flag, dtype, device, dv))
    sent += payload_nbytes(payload)
    gathered = yield AllGather(payload)
    weights = [float(p[-1][0]) for p in gathered]
    total = sum(weights)
    any_stop = any(float(p[-1][1]) > 0 for p in gathered)
    drift_votes = sum(int(round(float(p[-1][2]))) for p in gathered) if dv is not None else 0
    if meta_known is not None:
        total = meta_known[0]
    update = []
    offset = 0
    for g, c in zip(grads, sent_compressed, strict=True):
        k = len(c.payload)
        parts = [p[offset : offset + k] for p in gathered]
        offset += k
        if compressor.sparse:
            acc = scatter_add_sparse(g.numel(), [(v, i) for v, i in parts], weights, g.dtype, g.device)
        else:
            acc = torch.zeros(g.numel(), dtype=g.dtype, device=g.device)
            for w_j, part in zip(weights, parts, strict=True):
                dense = compressor.decompress(Compressed(list(part), c.ctx, 0, 0))
                acc += w_j * dense.reshape(-1).to(g.dtype)
        update.append((acc / total).reshape(g.shape))
    return ExchangeResult(update, total, True, wire_floats(sent), sent, any_stop, votes, drift_votes)


def synchronous_step(ctx: Any, codec: Any, grads: Sequence[Tensor], weight: float, batch: Any,
                     lr_of: Callable[[Any], float] | None = None) -> Generator[Any, Any, tuple[Any, float]]:
    """The end of a synchronous data-parallel step (ddl, scadles, dbs-sgd): exchange the gradients with
    weight w_i (the step's stop flag rides along), apply the aggregate at the step's learning rate
    (`lr_of(exchange result)`, default the context's schedule), ack the batch, count the step; returns
    (the exchange result, lr). `codec` holds the worker's compressor, memory and adaptive state."""
    weight = weight * ctx.weight_factor()  # a drift response's reweighting (1.0 without one)
    group = ctx.drift  # the group's drift responses (edgestream.sync.drift), when the run agrees on them
    ex = yield from exchange(grads, weight, codec.compressor, codec.memory, names=ctx.names(len(grads)),
                             adaptive=codec.adaptive, stop=ctx.should_stop(ctx.step + 1),
                             drift=None if group is None else group.take_vote())
    if group is not None:
        yield from group.agreed(ex.drift_votes, ctx.step)
    lr = ctx.lr_now() if lr_of is None else lr_of(ex)
    yield Apply(ex.update, lr)
    yield Ack(batch)
    ctx.step += 1
    return ex, lr
