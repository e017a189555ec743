"""fixed-adacomm-ps, adacomm-ps — Fixed ADACOMM and ADACOMM on the parameter server (the ADSP paper's
baselines, 000 section 5.1; ALGORITHMS.md "local-sgd, adacomm, fixed-adacomm" and "Parameter-server
family").

Every worker runs tau local SGD steps on its replica (`Apply` at the run's lr, the worker's own
momentum and weight decay), then commits its accumulated update U_i = W_pulled - W_now (its parameter
displacement since its last pull) with `Push(commit=True)` and pulls. The PS waits for all M commits
of the round (BSP's round barrier, `bsp.BSPCoordinator`), then applies W <- W - (1/M) sum_i U_i once
(version + 1) and releases every pull: since
all workers started the round from the same W, that is exactly the average of the M local models
(W - mean U_i = mean_i (W - U_i)), the collective `local-sgd` family's averaging done at the PS. The
average is therefore a plain step at lr 1 with no server momentum and no weight decay (either would
change the average; the run's momentum and weight decay already act in the workers' local steps).

* fixed-adacomm-ps: tau fixed (default 40, the ADSP reference code's).
* adacomm-ps: the PS re-picks tau every `check_every` rounds with local_sgd's `adacomm_tau` from the
  group's mean loss F, the mean of the commits' `Push.loss` (each worker's mean training loss over its
  period); F_0 is the first round's F, as in the collective `adacomm`. The new tau reaches the workers
  in the pull reply (`Pulled.info["tau"]`), so every worker runs the same tau in every round.

Parameters and `adacomm_tau` are local_sgd's (imported, not copied). Compression (the run's
`compression:` block) applies to the commits through `ps_worker.encode`; the PS averages the
decompressed updates.

Like local_sgd, a period never runs past `ctx.max_steps` (the last one is shortened to end there) and
the stop vote (`ctx.should_stop(ctx.step)`) travels with the commit: once any commit votes stop, every
pull returns at once with stop (the base coordinator), so no worker waits at the barrier for a peer
that has left. Each worker leaves after its next commit; with stop.max_steps every worker has then
run exactly max_steps local steps.

State (`ctx.state`, complete at each Log): "tau", "rounds", "version", the period's progress
"period_steps", "loss_sum", "samples", the model of the last pull "w_pulled" (tensors) and "codec"; a
worker restored from a Log in mid-period finishes that period.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from edgestream.compression import wire_floats
from edgestream.models.optim import lr_at
from edgestream.sync.bsp import BSPCoordinator
from edgestream.sync.context import WorkerContext
from edgestream.sync.coordinator import ServerContext
from edgestream.sync.exchange import Codec
from edgestream.sync.hyperparams import coerce
from edgestream.sync.local_sgd import ADACOMM_PARAMS, FIXED_ADACOMM_PARAMS, adacomm_tau, local_step, period_length
from edgestream.sync.ps_worker import encode
from edgestream.sync.requests import (
    GetParams,
    Log,
    Pull,
    Pulled,
    Push,
    SetParams,
)

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor

FIXED_PARAMS = FIXED_ADACOMM_PARAMS
ADAPTIVE_PARAMS = ADACOMM_PARAMS


def _commit_worker(ctx: WorkerContext, params: dict[str, Any]) -> Generator[Any, Any, None]:
    """tau local steps, commit the displacement, pull the average; tau comes back with the pull."""
    import torch

    st = ctx.state
    codec = Codec.from_spec(ctx.compression)
    codec.load_state_dict(st.get("codec", {}))
    tau = int(st.get("tau", params["tau"]))
    rounds, version = int(st.get("rounds", 0)), int(st.get("version", 0))
    done, loss_sum, samples = int(st.get("period_steps", 0)), float(st.get("loss_sum", 0.0)), int(st.get("samples", 0))
    w_pulled: list[Tensor] | None = st.get("w_pulled")
    if w_pulled is None:  # the model this worker starts from (the PS's W_0: engines build both alike)
        w_pulled = yield GetParams()

    def save() -> None:
        st.update(tau=tau, rounds=rounds, version=version, period_steps=done, loss_sum=loss_sum,
                  samples=samples, w_pulled=w_pulled, codec=codec.state_dict())

    while True:
        length = period_length(ctx, tau, done)
        while done < length:
            res, lr = yield from local_step(ctx, params["batch"])
            loss_sum += res.loss
            samples += res.n
            done += 1
            save()
            yield Log(step=ctx.step - 1, batch=res.n, loss=res.loss, lr=lr, floats_sent=0, bytes_sent=0,
                      compressed=False)
        w = yield GetParams()
        update, sent, compressed = encode(torch._foreach_sub(w_pulled, w), codec, ctx.names(len(w)))
        yield Push(update, version=version, n=samples, loss=loss_sum / done,
                   lr=lr_at(max(ctx.step - 1, 0), ctx.lr, ctx.milestones, ctx.gamma),
                   stop=ctx.should_stop(ctx.step), commit=True, nbytes=sent)
        pulled: Pulled = yield Pull()
        yield SetParams(pulled.params)
        w_pulled, version = pulled.params, pulled.version
        tau = int(pulled.info.get("tau", tau))
        rounds += 1
        done, loss_sum, samples = 0, 0.0, 0
        save()
        yield Log(step=ctx.step, round=rounds, tau=tau, group_loss=pulled.info.get("group_loss"),
                  floats_sent=wire_floats(sent), bytes_sent=sent, compressed=compressed, version=version)
        if pulled.stop:
            return


def fixed_adacomm_ps_worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """fixed-adacomm-ps: tau (default 40) local steps per commit."""
    return _commit_worker(ctx, coerce(FIXED_PARAMS, ctx.params))


def adacomm_ps_worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """adacomm-ps: tau_0 (default 40) local steps per commit; the PS shrinks tau with the loss."""
    return _commit_worker(ctx, coerce(ADAPTIVE_PARAMS, ctx.params))


class FixedAdaCommPSCoordinator(BSPCoordinator):
    """BSP's round barrier over commits: at the M-th commit of a round, W -= mean U (the model average:
    lr 1, no momentum or weight decay), version + 1, and every pull returns. Pulls return once the
    round their worker committed to is applied (version >= the worker's commits)."""

    server_momentum = 0.0
    server_weight_decay = 0.0
    adaptive = False

    def __init__(self, ctx: ServerContext, model: Sequence[Tensor]) -> None:
        super().__init__(ctx, model)
        self.tau_0 = int(ctx.params.get("tau", 40))
        self.tau = self.tau_0
        self.f_0: float | None = None
        self.group_loss: float | None = None
        self.loss_sum = 0.0
        self.loss_count = 0

    def round_lr(self) -> float:
        return 1.0

    def on_round_push(self, push: Push) -> None:
        if push.loss is not None:
            self.loss_sum += float(push.loss)
            self.loss_count += 1

    def on_round(self) -> None:
        f = self.loss_sum / self.loss_count if self.loss_count else None
        self.group_loss = f
        self.loss_sum, self.loss_count = 0.0, 0
        if self.adaptive and f is not None:
            self.retune(f)

    def retune(self, f: float) -> None:
        """AdaComm (as the collective adacomm): F_0 = the first round's F; every check_every rounds
        tau = adacomm_tau(F, F_0, tau_0, tau)."""
        if self.f_0 is None:
            self.f_0 = f
        elif self.version % int(self.ctx.params.get("check_every", 10)) == 0:
            self.tau = adacomm_tau(f, self.f_0, self.tau_0, self.tau)

    def on_pull_info(self, worker: int, now: float) -> dict[str, Any]:
        return {"tau": self.tau, "round": self.version, "group_loss": self.group_loss}

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "tau": self.tau, "f_0": self.f_0, "group_loss": self.group_loss,
                "loss_sum": self.loss_sum, "loss_count": self.loss_count}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        super().load_extra_state(state)
        self.tau = int(state.get("tau", self.tau_0))
        self.f_0 = state.get("f_0")
        self.group_loss = state.get("group_loss")
        self.loss_sum = float(state.get("loss_sum", 0.0))
        self.loss_count = int(state.get("loss_count", 0))

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "rounds": self.version, "tau": self.tau}


class AdaCommPSCoordinator(FixedAdaCommPSCoordinator):
    """FixedAdaCommPSCoordinator that re-picks tau every check_every rounds (`retune`)."""

    adaptive = True
