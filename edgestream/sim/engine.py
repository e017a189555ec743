"""The virtual-time performer: the simulator performs the requests of the unchanged `sync` workers in
virtual time; `edgestream.runner` runs them.

Each worker is one SimPy process running the run core's one request loop (`runner.drive`, through a
`runner.WorkerGroup` that also holds the run's contexts, stop rule and event sink); `SimEngine` is
that loop's performer (runner.performer: `now(rank)` and one `do_<kind>` method per request kind of
edgestream.sync.requests; the communication kinds are in sim/comm.py, the checks before a run in sim/checks.py,
the event loop's helpers in sim/loop.py, the summary it adds in sim/summary.py):

* TakeBatch: the device's `VirtualStream` truncates (buffer policy), sizes the batch (batch policy with
  the rate measured over the last window, or the request's size), waits until the samples are due,
  and hands out real tensors of the shard samples in producer order plus injected samples.
* Compute: lasts t_i(b) = (a + c b) static_i (1 + U(0, dynamic)) virtual seconds (`ComputeModel`; a, c
  from the config or `calibrate`); the real forward/backward on the worker's replica runs when that
  time is up (the replica cannot change meanwhile, and peers sharing it have applied by then). Batched
  (edgestream.sim.batched, the default (`auto`) for every algorithm on per-sample models, except those
  measured slower batched, `AUTO_PER_DEVICE`): when the
  first pending compute's time is up, ONE vectorised forward/backward serves it and every other
  pending device whose model is settled, each getting its own gradients and loss at its own end time; the
  per-device path stays (`batch_compute=False`, or EDGESTREAM_SIM_COMPUTE=per-device) as the reference.
  A user's model (by import path) takes the batched path when torch.func runs it per sample (a probe,
  `sim/batchable.batch_check`); otherwise the run falls back to the per-device path, with the reason in the summary
  (`compute_reason`) and logged once. The loss is the run's task's (edgestream.tasks). A non-finite loss
  stops the run (`Diverged`, stop_reason "diverged"); a loss grown 100x over its start warns once
  (edgestream.runner.divergence, shared with the real trainer).
* AllReduce / AllGather / Start / Poll / Wait: `Collectives` (matched by order, network-timed).
* Apply / GetParams / SetParams: the worker's replica and SGD optimizer (`Replicas`: one shared
  replica while synchronous workers stay in lockstep and the model has no buffers, per-worker
  replicas otherwise).
* Inject: the chosen samples reach the targets' queues one network transfer later; bytes counted.
* Push / Pull (parameter-server algorithms): the run's coordinator runs as a PS node (`PSNode`,
  edgestream.sim.ps): each push and pull costs latency + bytes / bandwidth on the device's link, pulls
  block as the coordinator says; `Start(Pull())` runs a pull in the background and `Start(Sleep(s))`
  is a timer, both polled or waited on through their `Handle`.
* Ack (counted), Now (virtual time), Sleep (a timeout), Log (nothing: the driver writes the step line,
  merged with what this performer noted on the worker's `StepMeter`: batch, buffer, dropped,
  injected, injection bytes, and per collective the network time `net_s` and the wait for the last
  peer `sync_wait_s`; the driver measures wait_s, compute_s and comm_s, waiting for peers included).

Evaluation (`runner.Evaluation`, hosted as a SimPy process) scores the global model (the PS's W for
parameter-server algorithms, rank 0's replica for synchronous ones, the average of the replicas
otherwise; `Replicas.global_model`) on the
test split at t = 0 and every eval.every_s virtual seconds, and once more at the end. Stopping: the
run's `runner.StopRule` at virtual time (stop.max_time_s, stop.max_steps, the target metric); the
algorithms agree through their next collective and return. A run that does not end by
1.5 max_time_s + 60 s of virtual time is cut there (stop_reason "hard_limit").

Determinism: everything is seeded and SimPy orders simultaneous events by scheduling order, so a
config with devices.compute.base_s and per_sample_s set gives the same events.jsonl every time (a
calibrated compute model depends on this machine's speed).
"""

from __future__ import annotations

import copy
import itertools
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simpy
import torch

from edgestream import settings
from edgestream.metrics import EventLog
from edgestream.runner.divergence import Diverged, LossGrowth, check_loss
from edgestream.runner.engines import EngineError
from edgestream.runner.evaluate import Evaluation, evaluate
from edgestream.runner.group import WorkerGroup
from edgestream.runner.performer import Performer
from edgestream.runner.plan import RunPlan
from edgestream.runner.progress import RunProgress
from edgestream.runner.rundir import write_run
from edgestream.sim.batchable import batch_check
from edgestream.sim.batched import BatchedCompute
from edgestream.sim.checks import SimConfigError, fits_problem, unbounded_problem
from edgestream.sim.collectives import CollectiveOp, Collectives
from edgestream.sim.comm import SimComm
from edgestream.sim.costs import ComputeModel, NetworkModel, calibrate
from edgestream.sim.data import SimBatch, SimData
from edgestream.sim.loop import fewer_gc_passes, run_until
from edgestream.sim.ps import PSNode
from edgestream.sim.replicas import Replicas
from edgestream.sim.stream import VirtualStream
from edgestream.sim.summary import sim_summary, wall_profile
from edgestream.streams.source import take_batch
from edgestream.sync.requests import (
    Ack,
    Apply,
    Compute,
    GetParams,
    Inject,
    ResetOptimizer,
    SetParams,
    TakeBatch,
)

log = logging.getLogger(__name__)
HARD_LIMIT_FACTOR, HARD_LIMIT_EXTRA_S = 1.5, 60.0
#: (model, reason) pairs already logged: a user's model that falls back to the per-device path is named once
_LOGGED_FALLBACKS: set[tuple[str, str]] = set()
#: environment switch for how Compute requests are served: auto (default), batched, per-device
COMPUTE_ENV = settings.SIM_COMPUTE.name
COMPUTE_MODES = ("auto", "batched", "per-device")
#: algorithms that `auto` keeps on the per-device path although batching them is correct, because their
#: batched runs were measurably slower: {name: the measurement}. Every other algorithm (a user's own
#: included: the batched path gives each worker its own gradients, whatever the algorithm does next) is
#: batched by `auto` wherever the model allows (`batch_check`). Measured with
#: `benchmarks/bench_sim_speed.py --algorithms all --batch 8 --devices 64,256 --repeat 2` (digits, mlp,
#: dense, 1 torch thread; docs/BENCHMARKS.md, "auto batches every algorithm").
AUTO_PER_DEVICE: dict[str, str] = {}


@dataclass
class SimStats:
    """Run-level counters and the wall-time profile."""

    device_steps: int = 0
    acked_samples: int = 0
    inject_bytes: int = 0
    wall: dict[str, float] = field(default_factory=lambda: {"algorithm": 0.0, "data": 0.0})
    driver: dict[str, float] = field(default_factory=dict)  # drive's profile: algorithm seconds, requests

    @property
    def requests(self) -> int:
        return int(self.driver.get("requests", 0))


class SimEngine(SimComm, Performer):
    """One simulated run of `plan` (a RunPlan, or an ExperimentConfig resolved here); `run()` fills
    `events` and returns the stats.

    events: the run's EventLog (None: an in-memory one). progress: show a rich bar on a terminal.
    base_dir: folder that relative paths in the config (rate traces) are relative to.
    share_replicas: one shared replica while workers stay in lockstep (default: for synchronous
    algorithms on models without buffers); False forces per-worker replicas (the results are the
    same, see replicas.py).
    batch_compute: serve the workers' Compute requests in batched passes (edgestream.sim.batched).
    None (default) reads EDGESTREAM_SIM_COMPUTE (auto | batched | per-device; unset = auto): auto
    batches every algorithm but those measured slower batched (`AUTO_PER_DEVICE`), batched any
    algorithm; both only on models whose forward treats
    samples independently (no batch norm, no dropout), else per-device. False: per-device (the
    reference path); True: batched where the model allows. `compute_mode` says which path runs and
    `compute_reason` why.
    """

    engine = "simulator"

    def __init__(self, plan: Any, events: EventLog | None = None, *, progress: bool = False,
                 base_dir: str | None = None, share_replicas: bool | None = None,
                 batch_compute: bool | None = None) -> None:
        try:
            if not isinstance(plan, RunPlan):  # an ExperimentConfig: resolve it here
                plan = RunPlan.resolve(plan, base_dir=base_dir)
            unbounded_problem(plan.cfg)
            self.plan = plan
            self.spec = plan.algorithm
            batch_policy, buffer_policy = plan.batch_policy(), plan.buffer_policy()
            model = plan.build_model()
            fits_problem(plan, model, batch_policy)  # before anything per device is built
            self.data = SimData(plan.dataset, plan.shards, plan.seed, plan.drift_scenario)
            self.rate_model = plan.rate_model
        except EngineError as exc:
            raise SimConfigError(exc.problems) from None
        self.world = m = plan.world
        self.events = events if events is not None else EventLog(None)
        self.env = simpy.Environment()
        self.streams = [VirtualStream(d, self.rate_model, buffer_policy, batch_policy, plan.max_lag_s,
                                      clock=self.env, data=self.data) for d in range(m)]
        self.task = plan.task
        self.replicas = Replicas(model, self.data.shape, plan.num_outputs, m, **plan.optim, seed=plan.seed,
                                 shared=self.spec.synchronous if share_replicas is None else share_replicas,
                                 task=self.task)
        self.replicas.scoring = plan.prequential is not None  # prequential evaluation: Compute scores its batch
        self.batcher, self.compute_reason = self._batcher(batch_compute)
        self.group = WorkerGroup(plan, self, self.events, param_names=list(self.replicas.names), on_line=self._on_line)
        self.contexts = self.group.contexts
        self.meters = self.group.meters
        self.compute_model, self.calibrated = self._compute_model()
        self.network = NetworkModel(plan.network.latency_s, plan.network.bandwidth_Bps)
        self.collectives = Collectives(m, self.network, self._schedule, self.env.event)
        self.handles: dict[int, tuple[CollectiveOp, int]] = {}  # started collectives not yet handed over
        self.ps_handles: dict[int, tuple[int, Any]] = {}  # handle -> (rank, pull process | timer deadline)
        self._handle_ids = itertools.count()
        self.ps: PSNode | None = None
        if self.spec.coordinator is not None:
            initial = [p for p in self.replicas.base.parameters() if p.requires_grad]
            cm = self.compute_model
            step_s = (plan.slowest_step_s(lambda b: cm.curve(b) if cm.curve is not None else cm.a + cm.c * b)
                      if getattr(self.spec.coordinator, "uses_step_time", False) else None)
            coordinator = self.spec.coordinator(plan.server_context(step_s), initial)
            self.ps = PSNode(self.env, coordinator, self.network, m, self.meters, self.replicas)
        self.stats = SimStats()
        self.hard_limited = False
        self.diverged: Diverged | None = None  # a non-finite loss stopped the run (check_loss)
        self.loss_growth = LossGrowth()
        self.last_backlog = [0] * m
        self.last_held = [0] * m
        self.progress = RunProgress(f"{plan.name} ({self.spec.name}, {m} devices)", plan.max_time_s,
                                    enabled=progress, metric=self.task.primary)
        self.evaluation = Evaluation(self._score, self.events, self.group.stop, plan.eval_every_s,
                                     on_eval=self._on_eval, extra=self.group.stream_fields)

    # ------------------------------------------------------------------ run state
    @property
    def stop_reason(self) -> str | None:
        """Why the run stopped: the StopRule's reason, "hard_limit", "diverged", or None while it runs."""
        if self.diverged is not None:
            return "diverged"
        return "hard_limit" if self.hard_limited else self.group.stop.reason

    @property
    def finished(self) -> int:
        """Workers whose program has returned."""
        return self.group.finished

    @property
    def last_accuracy(self) -> float | None:
        return self.evaluation.last_accuracy

    # ------------------------------------------------------------------ setup helpers
    def _compute_model(self) -> tuple[ComputeModel, bool]:
        c = self.plan.compute
        if c.curve is not None:  # a compute profile: its measured t(b), repeatable
            return ComputeModel(0.0, 0.0, list(c.static), float(c.dynamic), self.plan.seed, curve=c.curve), False
        a, per = c.base_s, c.per_sample_s
        calibrated = a is None or per is None
        if calibrated:
            with torch.random.fork_rng(devices=[]):
                probe = copy.deepcopy(self.replicas.base)
                fit_a, fit_c = calibrate(probe, self.data.shape, self.data.num_classes)  # 0 classes: regression
            a = fit_a if a is None else a
            per = fit_c if per is None else per
        return ComputeModel(float(a), float(per), list(c.static), float(c.dynamic), self.plan.seed), calibrated

    def _batcher(self, batch_compute: bool | None) -> tuple[BatchedCompute | None, str]:
        """The batched compute server, or None for the per-device path; and why (module doc)."""
        if batch_compute is None:
            told = settings.sim_compute()
            mode = "auto" if told is None else told
            if mode not in COMPUTE_MODES:
                raise SimConfigError([f"{COMPUTE_ENV}={mode!r}: expected one of {', '.join(COMPUTE_MODES)}"])
            if mode == "per-device":
                return None, f"per-device: {COMPUTE_ENV}=per-device"
            slower = AUTO_PER_DEVICE.get(self.spec.name) if mode == "auto" else None
            if slower is not None:
                return None, f"per-device: {self.spec.name} is slower batched ({slower}; auto)"
            source = f"{COMPUTE_ENV}={mode}" if told is not None else "auto"
        elif not batch_compute:
            return None, "per-device: batch_compute=False"
        else:
            source = "batch_compute=True"
        if self.world < 2:
            return None, "per-device: one device"
        data = self.data
        why_not = batch_check(self.replicas.base, data.x_test[:8], data.y_test[:8], self.task)
        if why_not is not None:
            self._log_fallback(why_not)
            return None, f"per-device: {why_not}"
        return BatchedCompute(self.replicas), f"batched ({source})"

    def _log_fallback(self, why: str) -> None:
        """Log once why a user's model (not a built-in) cannot take the batched path."""
        from edgestream.plugins import MODELS

        name = self.plan.model_name
        if name in MODELS.builtins or (name, why) in _LOGGED_FALLBACKS:
            return
        _LOGGED_FALLBACKS.add((name, why))
        log.warning("simulator: model %s runs on the per-device compute path (slower): %s", name, why)

    @property
    def compute_mode(self) -> str:
        """"batched" or "per-device": how this run serves Compute requests."""
        return "per-device" if self.batcher is None else "batched"

    def _schedule(self, delay: float, callback: Callable[[], None]) -> None:
        ev = self.env.timeout(max(0.0, delay))
        ev.callbacks.append(lambda _ev: callback())

    # ------------------------------------------------------------------ evaluation and progress
    def _score(self) -> dict[str, float]:
        t0 = time.perf_counter()
        if self.ps is not None:
            model = self.ps.eval_model()  # W with the PS's floating buffers
        else:
            model = self.replicas.global_model(self.spec.synchronous)
        out = evaluate(model, self.data.x_test, self.data.y_test, task=self.task)
        self.replicas.wall["eval"] += time.perf_counter() - t0
        return out

    def _on_eval(self, now: float, step: int, value: float) -> None:
        self.progress.update(now, self.stats.device_steps, value, note=self.group.stream_note(self.task.primary))

    def _on_line(self, line: dict[str, Any]) -> None:
        if self.progress.active and self.group.lines % 64 == 0:
            self.progress.update(float(self.env.now), self.stats.device_steps,
                                 note=self.group.stream_note(self.task.primary))

    def _waits(self, schedule: Generator[float, None, None]) -> Generator[Any, Any, None]:
        """Host a schedule of waits (runner.Evaluation.periodic) as a SimPy process."""
        for seconds in schedule:
            yield self.env.timeout(seconds)

    # ------------------------------------------------------------------ the run
    def run(self) -> SimStats:
        """Simulate until every worker returned (or the hard limit); returns the run's stats."""
        env, group = self.env, self.group
        with fewer_gc_passes():
            return self._run(env, group)

    def _run(self, env: simpy.Environment, group: WorkerGroup) -> SimStats:
        self.data.warm({d: stream.pos for d, stream in enumerate(self.streams)})  # after a resume's positions
        try:
            procs = [env.process(d) for d in group.drivers(on_finish=self.collectives.worker_finished,
                                                           profile=self.stats.driver)]
            env.process(self._waits(self.evaluation.periodic(lambda: env.now, group.min_step,
                                                             lambda: group.running)))
            until: simpy.Event = simpy.AllOf(env, procs)
            max_time = self.plan.max_time_s
            if max_time is not None:
                hard = env.timeout(max_time * HARD_LIMIT_FACTOR + HARD_LIMIT_EXTRA_S)
                until = simpy.AnyOf(env, [until, hard])
            try:
                run_until(env, until)
            except Diverged as exc:  # a non-finite loss: the run stops there, as a real trainer does
                self.diverged = exc
                return self.stats
            if group.running:
                self.hard_limited = True
            self.collectives.check_gathers()
            self.evaluation.final(env.now, group.min_step())
        finally:
            self.progress.close()
        return self.stats

    # ------------------------------------------------------------------ the performer
    def now(self, rank: int) -> float:
        """Virtual time (the same for every worker)."""
        return self.env.now

    # ------------------------------------------------------------------ timed requests
    def do_take_batch(self, rank: int, req: TakeBatch) -> Generator[Any, Any, SimBatch]:
        """The shared take-a-batch sequence on the device's stream (`take_batch`); the wall time outside
        the virtual wait counts as "data"."""
        stream, c0 = self.streams[rank], time.perf_counter()
        suspended = stream.suspended_s
        batch = yield from take_batch(stream, req.size)
        self.stats.wall["data"] += time.perf_counter() - c0 - (stream.suspended_s - suspended)
        facts = batch.facts
        self.last_backlog[rank], self.last_held[rank] = facts.buffer_samples, facts.held_samples
        return batch

    def do_compute(self, rank: int, req: Compute) -> Generator[Any, Any, Any]:
        """The forward/backward runs when its virtual duration ends: the worker's replica cannot change
        meanwhile, and by then every peer has applied the update that preceded it (shared replicas)."""
        batch = req.batch
        dt = self.compute_model.step_time(rank, int(batch.n))
        self.stats.device_steps += 1
        batcher = self.batcher
        if batcher is not None:
            batcher.post(rank, batch)
            yield self.env.timeout(dt)
            result = batcher.result(rank)
        else:
            yield self.env.timeout(dt)
            result = self.replicas.compute(rank, batch.x, batch.y)
        step = self.contexts[rank].step
        check_loss(rank, result.loss, step)  # Diverged, as in the real trainer
        warning = self.loss_growth.check(rank, result.loss, step)
        if warning is not None:
            log.warning("simulator: %s", warning)
        return result

    # ------------------------------------------------------------------ instant requests
    def do_apply(self, rank: int, req: Apply) -> None:
        self.replicas.apply(rank, req.update, req.lr)

    def do_reset_optimizer(self, rank: int, req: ResetOptimizer) -> None:
        self.replicas.reset_optimizer(rank)

    def do_get_params(self, rank: int, req: GetParams) -> list[torch.Tensor]:
        return self.replicas.get_params(rank)

    def do_set_params(self, rank: int, req: SetParams) -> None:
        self.replicas.set_params(rank, req.tensors)

    def do_ack(self, rank: int, req: Ack) -> None:
        self.stats.acked_samples += int(getattr(req.batch, "own", getattr(req.batch, "n", 0)))

    def do_inject(self, rank: int, req: Inject) -> None:
        batch = req.batch
        positions = req.indices if req.indices is not None else list(range(req.count))
        chosen = np.asarray(batch.indices)[np.asarray(positions, dtype=np.int64)]
        nbytes_each = len(chosen) * self.data.sample_bytes
        arrive = self.env.now + self.network.transfer(nbytes_each)
        for target in req.targets:
            if not 0 <= target < self.world or target == rank:
                raise ValueError(f"Inject: worker {rank} cannot inject into device {target}")
            self.streams[target].deliver(arrive, chosen)
        self.meters[rank].count(inject_sent=len(chosen) * len(req.targets),
                                inject_bytes=nbytes_each * len(req.targets))
        self.stats.inject_bytes += nbytes_each * len(req.targets)

    # ------------------------------------------------------------------ results
    def profile(self, wall_s: float) -> dict[str, float]:
        """Wall seconds by category; `engine` is the rest (SimPy, dispatch, bookkeeping, logging)."""
        return wall_profile(self, wall_s)

    def extra_summary(self, wall_s: float) -> dict[str, Any]:
        """The run's time and stop reason, then the simulator's own summary keys (edgestream.sim.summary)."""
        return sim_summary(self, wall_s)


def run_sim(cfg: Any, *, out: str | Path | None = None, run_id: str | None = None, progress: bool = True,
            base_dir: str | Path | None = None) -> tuple[Path, dict]:
    """The "sim" engine's run function (edgestream.runner.engines): simulate `cfg` and write its run
    directory with `runner.write_run`; returns (path, summary). base_dir: folder that relative paths in
    the config (rate traces) are relative to. A run stopped by a non-finite loss raises `Diverged` (one
    line naming the device, the step and the run directory, which is written: stop_reason "diverged")."""
    try:
        plan = RunPlan.resolve(cfg, base_dir=base_dir)
    except EngineError as exc:
        raise SimConfigError(exc.problems) from None
    unbounded_problem(plan.cfg)  # before the run directory is written
    from edgestream.runner.responses import check as responses_problems

    problems = responses_problems(plan, "sim")  # a drift response the simulator cannot perform (checkpoint)
    if problems:
        raise SimConfigError(problems)
    path, summary = write_run(plan, "sim", lambda events: SimEngine(plan, events, progress=progress), out=out,
                              run_id=run_id, clock="virtual")
    if summary.get("stop_reason") == "diverged":  # the run directory is written; the run failed
        raise Diverged(f"{summary['error']}; run directory {path}")
    return path, summary
