"""local-sgd, fixed-adacomm, adacomm: tau local SGD steps, then model averaging (000 section 5.1).

Each worker runs tau local steps (take, compute, apply its own gradient, ack), then all models are
averaged in one collective: AllReduce(weighted_mean, weight 1) of [params..., [F_i, stop]], where
F_i is worker i's training loss averaged over the period, so the group's mean loss F and the stop
decision come back with the average and no extra round is needed.

* local-sgd, fixed-adacomm: tau fixed (defaults 8 and 40, the ADSP reference code's 40).
* adacomm: every `check_every` averaging rounds, tau = `adacomm_tau(F, F_0, tau_0, tau)`, where F_0
  is the group loss of the first period (Wang & Joshi use F(x_0); the first period's mean is what
  workers can measure without an extra evaluation). The check counts rounds, not seconds, because
  every worker must pick the same tau and rounds are the one clock they share.

A period never runs past the run's step budget (`ctx.max_steps`): the last one is shortened to end
there, and its averaging stops the group, so a run stops after exactly max_steps local steps.

State (`ctx.state`, complete at each Log): "tau", "f_0", "rounds", and the current period's progress
"period_steps" and "loss_sum"; a worker restored from a Log in mid-period finishes that period.
"""

from __future__ import annotations

import math
from collections.abc import Generator
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
    SetParams,
    TakeBatch,
)

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    pass

_BATCH = Param("batch", None, "int", ge=1, optional=True, doc="batch size; null = the run's batch policy")
LOCAL_SGD_PARAMS = (Param("tau", 8, "int", ge=1, doc="local steps between averagings"), _BATCH)
FIXED_ADACOMM_PARAMS = (Param("tau", 40, "int", ge=1, doc="local steps between averagings"), _BATCH)
ADACOMM_PARAMS = (
    Param("tau", 40, "int", ge=1, doc="tau_0, the initial local steps between averagings"),
    Param("check_every", 10, "int", ge=1, doc="averaging rounds between tau updates"),
    _BATCH,
)


def adacomm_tau(f_now: float, f_0: float, tau_0: int, tau: int) -> int:
    """AdaComm's next tau: ceil(sqrt(F_now / F_0) * tau_0), at least 1; when that does not reduce tau,
    tau is halved instead (max(1, tau // 2), the ADSP reference code). F_0 <= 0 counts as ratio 0."""
    if tau_0 < 1 or tau < 1:
        raise ValueError(f"tau_0 and tau must be >= 1, got {tau_0}, {tau}")
    ratio = f_now / f_0 if f_0 > 0 else 0.0
    new = max(1, math.ceil(math.sqrt(max(ratio, 0.0)) * tau_0))
    return new if new < tau else max(1, tau // 2)


def period_length(ctx: WorkerContext, tau: int, done: int) -> int:
    """Local steps of the current period: tau, the last period shortened to end at `ctx.max_steps`
    (`done` steps of the period are already behind)."""
    if ctx.max_steps is None:
        return tau
    return min(tau, max(1, ctx.max_steps - (ctx.step - done)))


def local_step(ctx: WorkerContext, batch: int | None) -> Generator[Any, Any, tuple[ComputeResult, float]]:
    """One local SGD step on the worker's own replica: take, compute, apply at the run's eta, ack;
    advances ctx.step. Returns (the compute result, the lr applied); the caller updates its state and
    logs the step."""
    taken = yield TakeBatch(batch)
    res: ComputeResult = yield Compute(taken)
    lr = ctx.lr_now()
    yield Apply(res.grads, lr)
    yield Ack(taken)
    ctx.step += 1
    return res, lr


def _periodic_averaging(
    ctx: WorkerContext, params: dict[str, Any], adaptive: bool
) -> Generator[Any, Any, None]:
    """tau local steps, then one averaging all-reduce; adacomm re-picks tau (see module doc)."""
    import torch

    st = ctx.state
    tau_0 = params["tau"]
    tau = int(st.get("tau", tau_0))
    f_0: float | None = st.get("f_0")
    rounds = int(st.get("rounds", 0))
    done, loss_sum = int(st.get("period_steps", 0)), float(st.get("loss_sum", 0.0))
    while True:
        length = period_length(ctx, tau, done)
        while done < length:
            res, lr = yield from local_step(ctx, params["batch"])
            loss_sum += res.loss
            done += 1
            ctx.state.update(tau=tau, f_0=f_0, rounds=rounds, period_steps=done, loss_sum=loss_sum)
            yield Log(step=ctx.step - 1, batch=res.n, loss=res.loss, lr=lr, floats_sent=0, bytes_sent=0,
                      compressed=False)
        w = yield GetParams()
        stop_flag = 1.0 if ctx.should_stop(ctx.step) else 0.0
        meta = torch.tensor([loss_sum / done, stop_flag], dtype=w[0].dtype, device=w[0].device)
        sent = [*w, meta]
        avg = yield AllReduce(sent, weight=1.0, op="weighted_mean")
        yield SetParams(avg[:-1])
        f_group, stop = float(avg[-1][0]), float(avg[-1][1]) > 0
        rounds += 1
        if adaptive:
            if f_0 is None:
                f_0 = f_group
            elif rounds % params["check_every"] == 0:
                tau = adacomm_tau(f_group, f_0, tau_0, tau)
        done, loss_sum = 0, 0.0
        ctx.state.update(tau=tau, f_0=f_0, rounds=rounds, period_steps=done, loss_sum=loss_sum)
        nbytes = payload_nbytes(sent)
        yield Log(step=ctx.step, round=rounds, tau=tau, group_loss=f_group, floats_sent=wire_floats(nbytes),
                  bytes_sent=nbytes, compressed=False)
        if stop:
            return


def local_sgd_worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """local-sgd: tau (default 8) local steps, then model averaging."""
    return _periodic_averaging(ctx, coerce(LOCAL_SGD_PARAMS, ctx.params), adaptive=False)


def fixed_adacomm_worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """fixed-adacomm: tau (default 40) local steps, then model averaging."""
    return _periodic_averaging(ctx, coerce(FIXED_ADACOMM_PARAMS, ctx.params), adaptive=False)


def adacomm_worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """adacomm: tau_0 (default 40) local steps per period, tau shrinking by `adacomm_tau`."""
    return _periodic_averaging(ctx, coerce(ADACOMM_PARAMS, ctx.params), adaptive=True)
