"""adsp — ADaptive Synchronous Parallel (Hu, Wang & Wu, AAAI 2020; paper 000 Alg. 1 and 2; ALGORITHMS.md).

Workers never wait. Each trains mini-batches continuously on its own replica (TakeBatch, Compute,
Apply(g, eta_local), Ack) and, on a timer, commits its accumulated update U_i to the PS, pulls the
global model and goes on. Time is cut into check periods of Gamma seconds; at each checkpoint k*Gamma
the scheduler (this module's coordinator) sets C_target, the total number of commits every worker
should have made by the next checkpoint, so worker i makes dC_i = C_target - c_i commits in the
period: faster workers do more local steps per commit, and at every checkpoint all workers have (about)
the same commit count.

Worker (Alg. 2), choices where the paper is silent:

* U_i is the parameter displacement since the last pull, w_pulled - w_now (GetParams): with the run's
  momentum 0 and no weight decay this is exactly sum eta_local * g; with momentum / weight decay in the
  local optimizer it is the update the local optimizer actually made, which is what should reach W.
* eta_local = local_lr (null: the run's lr schedule, optim.lr, default 0.1, as the paper's 0.1) times
  lr_decay ** (t / lr_decay_s): "decays exponentially over time" (000 section 5.1) read as a factor
  lr_decay (0.99) per lr_decay_s (60 s, the paper's check period) of elapsed time t. It has its own
  time base: Gamma follows the workload's step time (below), and a decay per Gamma would make the same
  0.99 decay orders of magnitude faster on a fast workload.
* The timer. The paper restarts a timer of Gamma / dC_i - O_i after each commit (O_i: the last commit's
  push + pull time, measured with Now). Commits can only happen between mini-batches, so a plain
  timer drifts late; we instead pace the commits still due in the period (n = C_target - c_i) evenly
  over what is left of it: the next commit starts at now + left / (n + 1/2) - O_i. On schedule this
  is exactly the paper's Gamma / dC_i - O_i, with commits at the midpoints of Gamma / dC_i slots
  (none lands on a checkpoint); late commits are caught up within the period. When the period's
  target is met (n <= 0) the worker cannot know the next target before it pulls again, so its next
  commit is at half a slot into the next period at the current rate (Gamma / (2 D) - O_i), where it
  learns the new target. Timers are Now comparisons against an absolute deadline kept in ctx.state
  (so a checkpointed worker resumes exactly); the deadline is polled after every mini-batch.
* The coordinator's clock and the worker's need not share an origin: the pull reply says how long the
  period has left (`period_left`) and the worker adds that to its own Now taken when it asked for the
  model (the PS answers a pull that does not wait at once, so the reply's download time is not
  counted twice).
* A commit is a blocking Push(commit=True) then Pull (O_i is their time); the push carries the mean
  training loss of the commit's local steps (`Push.loss`) and their loss trace (below). The run's
  `compression:` block applies to commits through `ps_worker.encode` (error feedback, then the
  compressor; the wire bytes are the compressed payload's), as for the other PS workers. A worker whose stop test fires
  commits at once with the stop vote and leaves after that pull; the others leave at their next pull.

PS (Alg. 2): W <- W - eta_g U_i on every commit, eta_g = global_lr (null: 1/M, the paper's), through a
server SGD with momentum optim.server.momentum (default 0) and no weight decay (the local optimizers
apply it; optim.server.weight_decay is not used).

Scheduler (Alg. 1), driven by checkpoint timers and the losses of the commits:

* Reading of C_target. Alg. 1 sets C_target = max_i c_i + 1 at an epoch's start and then compares
  C_target with C_target + 1, each run for one evaluation window; as each window ends with every
  worker at about C_target commits, the quantity compared is the per-period increment. We therefore
  search D (the "+1"): at every checkpoint C_target = max_i c_i + D, D = 1 at each epoch's start
  (= Alg. 1 line 3), and the hill-climb evaluates D then D + 1, keeps D + 1 and evaluates D + 2 while
  the reward improves, else settles on D for the rest of the epoch. The reward of D + 1 is reused as
  the base reward of the next comparison (Alg. 1 recurses on C_target + 1; re-running it would spend
  a window on a configuration just measured).
* An evaluation window is eval_s rounded to whole check periods (at least one) starting at a
  checkpoint, so each window runs a single D.
* Loss samples. The scheduler needs (t, l) pairs during each window (the paper collects "a few",
  e.g. at the start, middle and end of it). One loss per commit is too few: with D = 1 and workers
  on the same schedule a window holds M samples at nearly one time, and a 3-parameter fit through
  them is meaningless. So each commit also carries its local steps' training losses with their ages
  (seconds before the send), `Push.losses`, which the coordinator dates now - age on its own clock
  (their bytes count on the wire). A push without them contributes its `Push.loss` at the middle of
  the worker's interval since its last commit.
* Reward and search: edgestream.sync.adsp_search (the loss-curve fit, the reward of a window,
  `CommitRateSearch`: the hill-climb over D).
* Re-search: when a period's mean training loss (its loss samples) is >= 1.3 x the previous period's, a new epoch starts
  at that checkpoint (D = 1, search again).
* The coordinator records each checkpoint's commit counts (`checkpoints`): the invariant is that
  they are within one of each other.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from edgestream.compression import wire_floats
from edgestream.sync.adsp_search import CommitRateSearch, window_reward
from edgestream.sync.context import WorkerContext
from edgestream.sync.coordinator import Coordinator, ServerContext
from edgestream.sync.exchange import Codec
from edgestream.sync.hyperparams import Param, coerce
from edgestream.sync.ps_worker import BATCH, encode
from edgestream.sync.requests import (
    Ack,
    Apply,
    Compute,
    ComputeResult,
    GetParams,
    Log,
    Now,
    Pull,
    Pulled,
    Push,
    SetParams,
    TakeBatch,
)

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor

PARAMS = (
    Param("gamma_s", None, "float", gt=0, optional=True,
          doc="check period Gamma (seconds); null = GAMMA_STEPS (15) steps of the slowest device"),
    Param("epoch_s", None, "float", gt=0, optional=True,
          doc="epoch of the commit-rate search (Alg. 1); null = 20 Gamma (the paper's 20 min : 60 s)"),
    Param("eval_s", None, "float", gt=0, optional=True,
          doc="evaluation window of one candidate (rounded to whole periods); null = Gamma"),
    Param("target_loss", None, "float", gt=0, optional=True,
          doc="l* of the reward; null = 0.8 x the mean loss of the epoch's first window"),
    Param("local_lr", None, "float", gt=0, optional=True, doc="eta_local at t = 0; null = the run's optim.lr"),
    Param("lr_decay", 0.99, "float", gt=0, le=1, doc="eta_local factor per lr_decay_s of elapsed time"),
    Param("lr_decay_s", 60.0, "float", gt=0, doc="seconds per lr_decay factor (the paper's 60 s check period)"),
    Param("global_lr", None, "float", gt=0, optional=True, doc="eta_g of the PS; null = 1/M"),
    BATCH,
)

#: the loss rise between periods that restarts the search (000 section 4.2)
RESEARCH_RISE = 1.3
#: l* = this x the mean loss of the epoch's first evaluation window when target_loss is null
TARGET_FRACTION = 0.8
#: Gamma in steps of the slowest device when gamma_s is null (the paper's ratios Gamma : epoch : window
#: = 60 s : 20 min : 60 s = 1 : 20 : 1 are kept)
GAMMA_STEPS = 15
EPOCH_PERIODS = 20
#: Gamma when neither gamma_s nor the engine's step time is known: the paper's 60 s
PAPER_GAMMA_S = 60.0
#: the shortest derived Gamma: a period must hold a commit's round trip with room to spare
MIN_GAMMA_S = 0.5


def time_scales(params: Mapping[str, Any], step_s: float | None) -> tuple[float, float, float, bool]:
    """(Gamma, epoch, evaluation window) in seconds, and whether they were derived: explicit seconds are
    kept; null ones follow the slowest device's step time step_s (Gamma = GAMMA_STEPS steps, at least
    MIN_GAMMA_S, epoch =
    EPOCH_PERIODS Gamma, window = Gamma), so ADSP adapts on a workload that converges in a minute as on
    one that takes hours (the paper's absolute 60 s : 20 min : 60 s never adapted on the former)."""
    derived = params.get("gamma_s") is None and step_s is not None and step_s > 0
    if params.get("gamma_s") is not None:
        gamma = float(params["gamma_s"])
    elif derived:
        gamma = max(MIN_GAMMA_S, GAMMA_STEPS * float(step_s))  # type: ignore[arg-type]
    else:
        gamma = PAPER_GAMMA_S
    epoch = float(params["epoch_s"]) if params.get("epoch_s") is not None else EPOCH_PERIODS * gamma
    window = float(params["eval_s"]) if params.get("eval_s") is not None else gamma
    return gamma, epoch, window, derived


# ---------------------------------------------------------------- the PS and scheduler


class ADSPCoordinator(Coordinator):
    """W -= eta_g U_i per commit; checkpoints every Gamma set C_target = max_i c_i + D, with D from
    `CommitRateSearch` (module doc). `checkpoints` holds (time, commit counts) of every checkpoint."""

    server_weight_decay = 0.0  # the local optimizers apply it; the server momentum is optim.server's
    uses_step_time = True      # ServerContext.step_s sets Gamma when gamma_s is null (engines time it then)

    def __init__(self, ctx: ServerContext, model: Sequence[Tensor]) -> None:
        super().__init__(ctx, model)
        p = coerce(PARAMS, ctx.params)
        self.gamma_s, self.epoch_s, eval_s, self.scales_derived = time_scales(p, ctx.step_s)
        self.window_periods = max(1, math.ceil(eval_s / self.gamma_s - 1e-9))
        self.target_param: float | None = p["target_loss"]
        self.global_lr = float(p["global_lr"]) if p["global_lr"] is not None else 1.0 / self.world
        self.search = CommitRateSearch()
        self.d = self.search.start()
        self.period = 0                      # the current check period [k Gamma, (k+1) Gamma)
        self.c_target = self.d               # C_target for the end of the current period
        self.epoch_start = 0.0
        self.window_start = 0.0              # time the running evaluation window began
        self.target: float | None = self.target_param
        self.samples: list[list[float]] = []  # (t since epoch start, loss) of the running window
        self.last_commit = [0.0] * self.world
        self.period_loss = [0.0, 0]           # sum, count of commit losses this period
        self.prev_period_loss: float | None = None
        self.checkpoints: list[list[Any]] = []  # [time, [c_0, ..., c_{M-1}], C_target next, D]
        self.searches = 1                     # epochs (searches) started, re-searches included
        self.researches = 0
        self.rewards: list[list[float]] = []  # [time, D, reward] of every evaluated window

    # ------------------------------------------------------------------ hooks
    def on_push(self, worker: int, push: Push, now: float) -> dict[str, Any] | None:
        self._advance(now, pending=worker)
        update = list(push.update)
        if push.losses:  # the commit's loss trace: (age at send, loss)
            points = [(now - float(age), float(loss)) for age, loss in push.losses]
        elif push.loss is not None:          # a plain push: its loss at the middle of its interval
            points = [(0.5 * (self.last_commit[worker] + now), float(push.loss))]
        else:
            points = []
        self.apply(update, self.global_lr)
        period_start = self.period * self.gamma_s
        for t, loss in points:
            if not math.isfinite(loss):
                continue
            # a commit right after a checkpoint carries losses trained before it, under the previous
            # window's commit rate: only the current window's (period's) samples count for its reward
            # (its loss-rise check)
            if t >= self.window_start - 1e-12:
                self.samples.append([t - self.epoch_start, float(loss)])
            if t >= period_start - 1e-12:
                self.period_loss[0] += float(loss)
                self.period_loss[1] += 1
        self.last_commit[worker] = now
        return {"c_target": self.c_target}

    def on_pull_info(self, worker: int, now: float) -> dict[str, Any]:
        self._advance(now)
        end = (self.period + 1) * self.gamma_s
        return {"c_target": self.c_target, "commits": self.pushes[worker], "d": self.d, "gamma": self.gamma_s,
                "period_end": end, "period_left": end - now}

    def next_timer(self) -> float | None:
        return None if self.stopping else (self.period + 1) * self.gamma_s

    def on_timer(self, now: float) -> None:
        self._advance(now)

    # ------------------------------------------------------------------ the scheduler
    def _advance(self, now: float, pending: int | None = None) -> None:
        """Run every checkpoint up to `now` (timers may fire late; pushes and pulls catch up first).
        pending: a worker whose push is counted in `pushes` but arrived after the checkpoints."""
        while now >= (self.period + 1) * self.gamma_s - 1e-12:
            counts = list(self.pushes)
            if pending is not None:
                counts[pending] -= 1
            self._checkpoint((self.period + 1) * self.gamma_s, counts)

    def _checkpoint(self, at: float, counts: list[int]) -> None:
        self.period += 1
        # the period's loss against the previous period's: a rise of 30 % starts a new search
        s, n = self.period_loss
        loss = s / n if n else None
        self.period_loss = [0.0, 0]
        rose = loss is not None and self.prev_period_loss is not None and loss >= RESEARCH_RISE * self.prev_period_loss
        if loss is not None:
            self.prev_period_loss = loss
        if rose:
            self.researches += 1
            self._new_epoch(at)
        elif at >= self.epoch_start + self.epoch_s - 1e-9:
            self._new_epoch(at)
        elif at >= self.window_start + self.window_periods * self.gamma_s - 1e-9:
            self._window_done(at)
        self.c_target = max(counts) + self.d
        self.checkpoints.append([at, counts, self.c_target, self.d])

    def _new_epoch(self, at: float) -> None:
        self.searches += 1
        self.d = self.search.start()
        self.epoch_start = self.window_start = at
        self.target = self.target_param
        self.samples = []

    def _window_done(self, at: float) -> None:
        ts = [x[0] for x in self.samples]
        ls = [x[1] for x in self.samples]
        if self.target is None and ls:  # l* of this epoch: below where its first window ended up
            self.target = TARGET_FRACTION * sum(ls) / len(ls)
        r = window_reward(ts, ls, self.target, at - self.epoch_start) if self.target is not None else -math.inf
        if self.search.searching:
            self.rewards.append([at, self.d, r])
        self.d = self.search.window_done(r)
        self.window_start = at
        self.samples = []

    # ------------------------------------------------------------------ state
    def extra_state(self) -> dict[str, Any]:
        return {"gamma_s": self.gamma_s, "epoch_s": self.epoch_s, "window_periods": self.window_periods,
                "search": self.search.state(), "d": self.d, "period": self.period, "c_target": self.c_target,
                "epoch_start": self.epoch_start, "window_start": self.window_start, "target": self.target,
                "samples": [list(x) for x in self.samples], "last_commit": list(self.last_commit),
                "period_loss": list(self.period_loss), "prev_period_loss": self.prev_period_loss,
                "checkpoints": [[a, list(c), t, d] for a, c, t, d in self.checkpoints],
                "searches": self.searches, "researches": self.researches,
                "rewards": [list(x) for x in self.rewards]}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        if not state:
            return
        # the time scales the saved periods were counted in (a re-derived Gamma would move every checkpoint);
        # state saved before they were kept ran on the params' values, the old defaults 60 / 1200 / 1 period
        p = coerce(PARAMS, self.ctx.params)
        gamma, epoch, window, _ = time_scales(p, None)
        self.gamma_s = float(state.get("gamma_s", gamma))
        self.epoch_s = float(state.get("epoch_s", epoch))
        self.window_periods = int(state.get("window_periods", max(1, math.ceil(window / self.gamma_s - 1e-9))))
        self.search.load(state["search"])
        self.d, self.period, self.c_target = int(state["d"]), int(state["period"]), int(state["c_target"])
        self.epoch_start, self.window_start = float(state["epoch_start"]), float(state["window_start"])
        self.target = None if state["target"] is None else float(state["target"])
        self.samples = [[float(a), float(b)] for a, b in state["samples"]]
        self.last_commit = [float(x) for x in state["last_commit"]]
        self.period_loss = [float(state["period_loss"][0]), int(state["period_loss"][1])]
        self.prev_period_loss = None if state["prev_period_loss"] is None else float(state["prev_period_loss"])
        self.checkpoints = [[float(a), [int(x) for x in c], int(t), int(d)] for a, c, t, d in state["checkpoints"]]
        self.searches, self.researches = int(state["searches"]), int(state["researches"])
        self.rewards = [[float(a), int(d), float(r)] for a, d, r in state["rewards"]]

    def commit_spread(self) -> int:
        """The largest max_i c_i - min_i c_i over all checkpoints (the invariant: <= 1)."""
        return max((max(c) - min(c) for _, c, _, _ in self.checkpoints), default=0)

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "adsp": {
            "gamma_s": self.gamma_s, "epoch_s": self.epoch_s, "window_periods": self.window_periods,
            "time_scales": "derived from the step time" if self.scales_derived else "given",
            "checkpoints": len(self.checkpoints), "commit_spread_max": self.commit_spread(),
            "c_target": self.c_target, "d": self.d, "searches": self.searches, "researches": self.researches,
            "d_trace": [[round(a, 3), d] for a, _, _, d in self.checkpoints][-50:],
            "rewards": [[round(a, 3), d, r if math.isfinite(r) else str(r)] for a, d, r in self.rewards][-50:]}}


# ---------------------------------------------------------------- the worker (Alg. 2)


def next_commit_at(now: float, period_end: float, c_target: int, commits: int, d: int, gamma: float,
                   overhead: float) -> float:
    """When the next commit starts (module doc, "The timer"): the n = c_target - commits commits still
    due spread evenly over what is left of the period, else half a slot of Gamma / D into the next."""
    n = c_target - commits
    left = period_end - now
    if n > 0 and left > 0:
        at = now + left / (n + 0.5)
    else:
        at = max(now, period_end) + 0.5 * gamma / max(d, 1)
    return max(now, at - overhead)


def worker(ctx: WorkerContext) -> Generator[Any, Any, None]:
    """One ADSP worker (module doc). State (complete at each Log): version, w_ref (the model at the
    last pull), the schedule (c_target, commits, d, gamma, period_end, next_at), overhead O_i, and the
    running commit's loss_sum / local_steps."""
    p = coerce(PARAMS, ctx.params)
    st = ctx.state
    codec = Codec.from_spec(ctx.compression)
    codec.load_state_dict(st.get("codec", {}))
    if not st:  # a fresh start: pull the model and the schedule
        asked = float((yield Now()))
        pulled: Pulled = yield Pull()
        yield SetParams(pulled.params)
        t1 = yield Now()
        st.update(_schedule_from(pulled, t1, 0.0, asked))
        st.update(version=pulled.version, w_ref=[t.clone() for t in pulled.params], loss_sum=0.0, local_steps=0,
                  samples=0, trace=[])
        if pulled.stop:
            return
    while True:
        batch = yield TakeBatch(p["batch"])
        res: ComputeResult = yield Compute(batch)
        now = float((yield Now()))
        base = p["local_lr"] if p["local_lr"] is not None else ctx.lr_now()
        lr = float(base) * float(p["lr_decay"]) ** (now / float(p["lr_decay_s"]))
        yield Apply(res.grads, lr)
        yield Ack(batch)
        ctx.step += 1
        st["loss_sum"] += float(res.loss)
        st["local_steps"] += 1
        st["samples"] += int(res.n)
        st["trace"].append([now, float(res.loss)])
        now = float((yield Now()))
        stop = bool(ctx.should_stop(ctx.step))
        fields: dict[str, Any] = {"commit": False}
        sent, compressed = 0, False
        if stop or now >= st["next_at"]:
            w = yield GetParams()
            update, wire, compressed = encode([r - x for r, x in zip(st["w_ref"], w, strict=True)], codec,
                                              ctx.names(len(w)))
            steps = st["local_steps"]
            loss = st["loss_sum"] / steps
            losses = [(now - t, x) for t, x in st["trace"]]
            sent = wire + 16 * len(losses)
            push = Push(update, version=st["version"], n=st["samples"], loss=loss, lr=lr, stop=stop,
                        commit=True, losses=losses, nbytes=sent)
            yield push
            asked = float((yield Now()))
            pulled = yield Pull()
            yield SetParams(pulled.params)
            t1 = float((yield Now()))
            st.update(_schedule_from(pulled, t1, t1 - now, asked))
            st.update(version=pulled.version, w_ref=[t.clone() for t in pulled.params], loss_sum=0.0,
                      local_steps=0, samples=0, trace=[], codec=codec.state_dict())
            fields = {"commit": True, "local_steps": steps, "commit_loss": loss, "commits": st["commits"],
                      "c_target": st["c_target"], "overhead_s": st["overhead"]}
            if pulled.stop:
                stop = True
        yield Log(step=ctx.step - 1, batch=res.n, loss=res.loss, lr=lr, floats_sent=wire_floats(sent), bytes_sent=sent,
                  compressed=compressed, version=st["version"], **fields)
        if stop and fields["commit"]:
            return


def _schedule_from(pulled: Pulled, now: float, overhead: float, asked: float | None = None) -> dict[str, Any]:
    """The worker's schedule after a pull answered at its time `now`; overhead: the commit's O_i;
    asked: when the worker asked for the model (the period's end is dated from it)."""
    info = pulled.info
    period_end = (now if asked is None else asked) + float(info["period_left"])
    c_target, commits, d = int(info["c_target"]), int(info["commits"]), int(info["d"])
    gamma = float(info["gamma"])
    return {"c_target": c_target, "commits": commits, "d": d, "gamma": gamma, "period_end": period_end,
            "overhead": overhead,
            "next_at": next_commit_at(now, period_end, c_target, commits, d, gamma, overhead)}
