"""scadles: ScaDLES (004 section IV) — rate-proportional batches, weighted aggregation, linear LR
scaling, optional data injection and adaptive Top-k compression (ALGORITHMS.md).

Per step, worker i:
1. takes b_i = clip(S_i(t), min, max) samples (`TakeBatch()`: the run's rate batch policy; samples
   injected by peers are included and count in b_i);
2. with injection (alpha, beta) on, sends floor(beta b_i) of them to ceil(alpha M) random peers, the
   draw deterministic per (seed, device, step) (edgestream.streams.Injection);
3. computes g_i and exchanges with weight b_i: g = sum_i b_i g_i / sum_j b_j, which is the gradient
   of the mean loss over the concatenated global batch; sum_j b_j arrives with the same collective;
4. applies g at eta_t = eta * sum_j b_j / B, B = base_batch * M (linear LR scaling).
Adaptive Top-k (compression name "adaptive-topk") votes per step inside `exchange`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from edgestream.streams import build_injection
from edgestream.sync.context import WorkerContext
from edgestream.sync.exchange import Codec, synchronous_step
from edgestream.sync.hyperparams import Param, coerce
from edgestream.sync.requests import Compute, ComputeResult, Inject, Log, TakeBatch

PARAMS = (
    Param("base_batch", 64, "int", ge=1, doc="per-worker base batch; B = base_batch * M"),
    Param("epoch_steps", 0, "int", ge=0,
          doc="steps per epoch for the 'reference' adaptive statistic's reset; 0 = never reset"),
)


def scaled_lr(eta: float, batch_sum: float, base_global_batch: float) -> float:
    """Linear LR scaling: eta_t = eta * sum_j b_j / B."""
    if base_global_batch <= 0:
        raise ValueError(f"base global batch B must be > 0, got {base_global_batch}")
    return eta * batch_sum / base_global_batch


def worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """One ScaDLES worker (see module doc); stops after the step at which any worker asked to.

    State (`ctx.state`): {"codec": the compressor's, memory's and adaptive statistic's state}; the
    injection draws depend on (seed, rank, step) only."""
    p = coerce(PARAMS, ctx.params)
    B = p["base_batch"] * ctx.world_size
    codec = Codec.from_spec(ctx.compression)
    codec.load_state_dict(ctx.state.get("codec", {}))
    injection = build_injection(ctx.injection)
    while True:
        if codec.adaptive is not None and p["epoch_steps"] and ctx.step % p["epoch_steps"] == 0:
            codec.adaptive.new_epoch()
        batch = yield TakeBatch()
        b_i = int(batch.n)
        injected = 0
        if injection is not None and ctx.world_size > 1:
            plan = injection.plan(ctx.seed, ctx.rank, ctx.step, ctx.world_size, b_i)
            if plan.targets and plan.indices:
                yield Inject(batch, plan.targets, len(plan.indices), plan.indices)
                injected = plan.samples_sent
        res: ComputeResult = yield Compute(batch)
        ex, lr = yield from synchronous_step(ctx, codec, res.grads, float(b_i), batch,
                                             lr_of=lambda ex: scaled_lr(ctx.lr_now(), ex.total_weight, B))
        ctx.state["codec"] = codec.state_dict()
        yield Log(step=ctx.step - 1, batch=b_i, global_batch=ex.total_weight, loss=res.loss, lr=lr,
                  floats_sent=ex.floats, bytes_sent=ex.nbytes, compressed=ex.compressed,
                  injected_sent=injected, compress_votes=ex.votes,
                  statistic=codec.adaptive.value if codec.adaptive is not None else None)
        if ex.stop:
            return
