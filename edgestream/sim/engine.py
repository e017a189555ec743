"""The virtual-time engine: one SimPy process per worker drives that worker's unchanged `sync` generator.

Each request an algorithm yields is performed in virtual time (see edgestream.sync.requests):

* TakeBatch: the device's `DeviceStream` truncates (buffer policy), sizes the batch (batch policy with
  the rate measured over the last window, or the request's size), waits until the samples are due,
  and hands out real tensors of the shard samples in producer order plus injected samples.
* Compute: lasts t_i(b) = (a + c b) static_i (1 + U(0, dynamic)) virtual seconds (`ComputeModel`; a, c
  from the config or `calibrate`); the real forward/backward on the worker's replica runs when that
  time is up (the replica cannot change meanwhile, and peers sharing it have applied by then).
* AllReduce / AllGather / Start / Poll / Wait: `Collectives` (matched by order, network-timed).
* Apply / GetParams / SetParams: the worker's replica and SGD optimizer (`Replicas`: one shared
  replica while synchronous workers stay in lockstep, per-worker replicas otherwise).
* Inject: the chosen samples reach the targets' queues one network transfer later; bytes counted.
* Ack (counted), Now (virtual time), Sleep (a timeout), Log (one events.jsonl line, merged with what
  the engine measured since the worker's previous Log: wait_s, compute_s, comm_s, buffer, ...).

Evaluation scores the global model (rank 0's replica for synchronous algorithms, the average of the
replicas otherwise; `Replicas.global_model`) on the test split at t = 0 and every eval.every_s
virtual seconds, and once more at the end. Stopping: each worker's `should_stop` turns true once the
virtual time reaches stop.max_time_s, its step count reaches stop.max_steps, or an evaluation reached
stop.target_accuracy; the algorithms agree through their next collective and return. A run that does
not end by 1.5 max_time_s + 60 s of virtual time is cut there (stop_reason "hard_limit").

Determinism: everything is seeded and SimPy orders simultaneous events by scheduling order, so a
config with devices.compute.base_s and per_sample_s set gives the same events.jsonl every time (a
calibrated compute model depends on this machine's speed).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy
import torch

from edgestream.metrics import EventLog
from edgestream.sim.collectives import CollectiveOp, Collectives
from edgestream.sim.data import SimBatch, SimData
from edgestream.sim.models import ComputeModel, NetworkModel, calibrate
from edgestream.sim.progress import SimProgress
from edgestream.sim.replicas import Replicas
from edgestream.sim.stream import DeviceStream
from edgestream.streams import build_batch_policy, build_buffer_policy, build_rate_model
from edgestream.sync import ALGORITHMS, WorkerContext
from edgestream.sync.requests import (
    Ack,
    AllGather,
    AllReduce,
    Apply,
    Compute,
    GetParams,
    Handle,
    Inject,
    Log,
    Now,
    Poll,
    SetParams,
    Sleep,
    Start,
    TakeBatch,
    Wait,
)

#: events.jsonl step-line keys in DESIGN.md order; other keys follow.
LINE_ORDER = ("time", "device", "step", "batch", "wait_s", "compute_s", "comm_s", "buffer_samples",
              "buffer_bytes", "dropped", "injected", "bytes_sent", "floats_sent", "compressed", "loss")
HARD_LIMIT_FACTOR, HARD_LIMIT_EXTRA_S = 1.5, 60.0


class SimConfigError(ValueError):
    """A config the simulator cannot run (bad algorithm params, rates, dataset sizes...); `problems`
    holds one line per problem, as `ConfigError` does."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class _Pending:
    """What the engine measured for one worker since its last Log."""

    takes: int = 0
    batch: int = 0
    wait_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    sync_wait_s: float = 0.0
    dropped: int = 0
    injected: int = 0
    inject_sent: int = 0
    inject_bytes: int = 0
    buffer_samples: int = 0
    held_samples: int = 0
    rate: float = 0.0

    def fields(self, sample_bytes: int) -> dict[str, Any]:
        out: dict[str, Any] = {"wait_s": self.wait_s, "compute_s": self.compute_s, "comm_s": self.comm_s}
        if self.takes:
            out.update(batch=self.batch, buffer_samples=self.buffer_samples,
                       buffer_bytes=self.buffer_samples * sample_bytes, dropped=self.dropped,
                       injected=self.injected, held_samples=self.held_samples, rate=self.rate)
        out["sync_wait_s"] = self.sync_wait_s
        if self.inject_sent:
            out.update(inject_sent=self.inject_sent, inject_bytes=self.inject_bytes)
        return out


@dataclass
class SimStats:
    """Run-level counters and the wall-time profile."""

    device_steps: int = 0
    requests: int = 0
    acked_samples: int = 0
    inject_bytes: int = 0
    lines: int = 0
    wall: dict[str, float] = field(default_factory=lambda: {"algorithm": 0.0, "data": 0.0})


class SimEngine:
    """One simulated run of `cfg` (an ExperimentConfig); `run()` fills `events` and returns the stats.

    events: the run's EventLog (None: an in-memory one). progress: show a rich bar on a terminal.
    base_dir: folder that relative paths in the config (rate traces) are relative to.
    share_replicas: one shared replica while workers stay in lockstep (default: for synchronous
    algorithms); False forces per-worker replicas (the results are the same, see replicas.py).
    """

    def __init__(self, cfg: Any, events: EventLog | None = None, *, progress: bool = False,
                 base_dir: str | None = None, share_replicas: bool | None = None) -> None:
        self.cfg = cfg
        self.spec = ALGORITHMS.get(cfg.algorithm.name)
        if self.spec is None:
            raise SimConfigError([f"algorithm.name: {cfg.algorithm.name!r} is not implemented in "
                                  f"edgestream.sync; available: {', '.join(ALGORITHMS)}"])
        self.world = m = cfg.devices.count
        self.events = events if events is not None else EventLog(None)
        self.env = simpy.Environment()
        try:
            self.data = SimData.from_config(cfg)
            dev = cfg.devices
            self.rate_model = build_rate_model(dev.rates.spec(), dev.variation.spec(), m, cfg.seed,
                                               min_rate=dev.rates.min_rate, base_dir=base_dir)
            batch_policy = build_batch_policy(cfg.algorithm.batch.spec() if cfg.algorithm.batch else None)
            buffer_policy = build_buffer_policy(cfg.algorithm.buffer)
            self.contexts = [WorkerContext.from_config(cfg, r, should_stop=self._stop_test(r))
                             for r in range(m)]
        except ValueError as exc:
            raise SimConfigError(str(exc).splitlines()) from None
        self.streams = [DeviceStream(d, self.rate_model, buffer_policy, batch_policy) for d in range(m)]
        o = cfg.optim
        self.replicas = Replicas(cfg.model.name, self.data.shape, self.data.num_classes, m, o.lr, o.momentum,
                                 o.weight_decay, cfg.seed,
                                 shared=self.spec.synchronous if share_replicas is None else share_replicas)
        for ctx in self.contexts:
            ctx.param_names = list(self.replicas.names)
        self.compute_model, self.calibrated = self._compute_model()
        self.network = NetworkModel.from_config(cfg.devices.network)
        self.collectives = Collectives(m, self.network, self._schedule, self.env.event)
        self.pending = [_Pending() for _ in range(m)]
        self.handles: dict[int, tuple[CollectiveOp, int, bool]] = {}
        self.stats = SimStats()
        self.stop_reason: str | None = None
        self.finished = 0
        self.last_eval_time: float | None = None
        self.last_accuracy: float | None = None
        self.last_backlog = [0] * m
        self.last_held = [0] * m
        self.progress = SimProgress(f"{cfg.name} ({cfg.algorithm.name}, {m} devices)", cfg.stop.max_time_s,
                                    enabled=progress)
        self._instant: dict[type, Callable[[int, Any], Any]] = {
            Ack: self._ack, Inject: self._inject, Start: self._start, Poll: self._poll, Apply: self._apply,
            GetParams: self._get_params, SetParams: self._set_params, Now: self._now, Log: self._log,
        }
        self._timed: dict[type, Callable[[int, Any], Generator[Any, Any, Any]]] = {
            TakeBatch: self._take_batch, Compute: self._compute, AllReduce: self._collective,
            AllGather: self._collective, Wait: self._wait, Sleep: self._sleep,
        }

    # ------------------------------------------------------------------ setup helpers
    def _compute_model(self) -> tuple[ComputeModel, bool]:
        c = self.cfg.devices.compute
        a, per = c.base_s, c.per_sample_s
        calibrated = a is None or per is None
        if calibrated:
            with torch.random.fork_rng(devices=[]):
                probe = copy.deepcopy(self.replicas.base)
                fit_a, fit_c = calibrate(probe, self.data.shape, self.data.num_classes)
            a = fit_a if a is None else a
            per = fit_c if per is None else per
        return ComputeModel(float(a), float(per), list(c.static), float(c.dynamic), self.cfg.seed), calibrated

    def _schedule(self, delay: float, callback: Callable[[], None]) -> None:
        ev = self.env.timeout(max(0.0, delay))
        ev.callbacks.append(lambda _ev: callback())

    def _stop_test(self, rank: int) -> Callable[[], bool]:
        stop = self.cfg.stop

        def should_stop() -> bool:
            if self.stop_reason is not None:
                return True
            if stop.max_time_s is not None and self.env.now >= stop.max_time_s:
                self.stop_reason = "max_time_s"
            elif stop.max_steps is not None and self.contexts[rank].step + 1 >= stop.max_steps:
                self.stop_reason = "max_steps"
            return self.stop_reason is not None

        return should_stop

    # ------------------------------------------------------------------ processes
    def _worker(self, rank: int) -> Generator[Any, Any, None]:
        gen = self.spec.worker(self.contexts[rank])
        instant, timed, wall, stats = self._instant, self._timed, self.stats.wall, self.stats
        send: Any = None
        perf = time.perf_counter
        while True:
            t0 = perf()
            try:
                req = gen.send(send)
            except StopIteration:
                wall["algorithm"] += perf() - t0
                break
            wall["algorithm"] += perf() - t0
            stats.requests += 1
            kind = type(req)
            handler = instant.get(kind)
            if handler is not None:
                send = handler(rank, req)
                continue
            timed_handler = timed.get(kind)
            if timed_handler is None:
                raise TypeError(f"the simulator cannot perform {kind.__name__} (worker {rank}, algorithm "
                                f"{self.spec.name})")
            send = yield from timed_handler(rank, req)
        self.finished += 1
        self.collectives.worker_finished(rank)

    def _evaluator(self) -> Generator[Any, Any, None]:
        every = float(self.cfg.eval.every_s)
        self._evaluate()
        while self.finished < self.world:
            yield self.env.timeout(every)
            if self.finished < self.world:
                self._evaluate()

    def _evaluate(self) -> None:
        model = self.replicas.global_model(self.spec.synchronous)
        acc, loss = self.replicas.evaluate(model, self.data.x_test, self.data.y_test)
        now = float(self.env.now)
        step = min(c.step for c in self.contexts)
        self.events.evaluation(now, step, acc, loss)
        self.last_eval_time, self.last_accuracy = now, acc
        target = self.cfg.stop.target_accuracy
        if target is not None and acc >= target and self.stop_reason is None:
            self.stop_reason = "target_accuracy"
        self.progress.update(now, self.stats.device_steps, acc)

    def run(self) -> SimStats:
        """Simulate until every worker returned (or the hard limit); returns the run's stats."""
        env = self.env
        try:
            procs = [env.process(self._worker(r)) for r in range(self.world)]
            env.process(self._evaluator())
            until: simpy.Event = simpy.AllOf(env, procs)
            max_time = self.cfg.stop.max_time_s
            if max_time is not None:
                hard = env.timeout(max_time * HARD_LIMIT_FACTOR + HARD_LIMIT_EXTRA_S)
                until = simpy.AnyOf(env, [until, hard])
            env.run(until=until)
            if self.finished < self.world:
                self.stop_reason = "hard_limit"
            self.collectives.check_gathers()
            if self.last_eval_time is None or self.last_eval_time < env.now:
                self._evaluate()
        finally:
            self.progress.close()
        return self.stats

    # ------------------------------------------------------------------ timed requests
    def _take_batch(self, rank: int, req: TakeBatch) -> Generator[Any, Any, SimBatch]:
        env, perf = self.env, time.perf_counter
        t_req = env.now
        c0 = perf()
        stream = self.streams[rank]
        plan = stream.plan(t_req, req.size)
        wall = perf() - c0
        if plan.ready_at > t_req:
            yield env.timeout(plan.ready_at - t_req)
        c0 = perf()
        taken = stream.take(env.now, plan.target)
        indices = self.data.stream_indices(rank, taken.start, taken.stop)
        if len(taken.injected):
            indices = np.concatenate([indices, taken.injected])
        batch = self.data.batch(rank, indices, plan.target)
        p = self.pending[rank]
        p.takes += 1
        p.batch += batch.n
        p.wait_s += env.now - t_req
        p.dropped += plan.dropped
        p.injected += batch.injected
        p.buffer_samples = taken.backlog
        p.held_samples = taken.held
        p.rate = plan.rate
        self.last_backlog[rank], self.last_held[rank] = taken.backlog, taken.held
        self.stats.wall["data"] += wall + perf() - c0
        return batch

    def _compute(self, rank: int, req: Compute) -> Generator[Any, Any, Any]:
        """The forward/backward runs when its virtual duration ends: the worker's replica cannot change
        meanwhile, and by then every peer has applied the update that preceded it (shared replicas)."""
        batch = req.batch
        dt = self.compute_model.step_time(rank, int(batch.n))
        self.pending[rank].compute_s += dt
        self.stats.device_steps += 1
        yield self.env.timeout(dt)
        return self.replicas.compute(rank, batch.x, batch.y)

    def _collective(self, rank: int, req: AllReduce | AllGather) -> Generator[Any, Any, Any]:
        op = self.collectives.post(rank, req, self.env.now)
        if not op.done:
            yield op.event
        return self._collect(op, rank)

    def _wait(self, rank: int, req: Wait) -> Generator[Any, Any, Any]:
        op = self._op_of(rank, req.handle)
        if not op.done:
            yield op.event
        return self._collect(op, rank, req.handle.id)

    def _sleep(self, rank: int, req: Sleep) -> Generator[Any, Any, None]:
        if req.seconds < 0 or not math.isfinite(req.seconds):
            raise ValueError(f"Sleep: seconds must be finite and >= 0, got {req.seconds}")
        yield self.env.timeout(req.seconds)
        return None

    # ------------------------------------------------------------------ collectives
    def _op_of(self, rank: int, handle: Handle) -> CollectiveOp:
        entry = self.handles.get(handle.id)
        if entry is None or entry[1] != rank:
            raise RuntimeError(f"worker {rank} used handle {handle.id}, which it did not start")
        return entry[0]

    def _collect(self, op: CollectiveOp, rank: int, handle_id: int | None = None) -> Any:
        """Worker `rank`'s result; comm time and the wait for the last worker are counted once."""
        if handle_id is not None:
            entry = self.handles[handle_id]
            if entry[2]:
                return self.collectives.result(op, rank)
            self.handles[handle_id] = (op, rank, True)
        p = self.pending[rank]
        p.comm_s += op.comm_s
        arrived = op.arrived_at[rank] or 0.0
        p.sync_wait_s += max(0.0, (op.complete_at or 0.0) - op.comm_s - arrived)
        result = self.collectives.result(op, rank)
        self.collectives.release(op, rank)
        return result

    def _start(self, rank: int, req: Start) -> Handle:
        op = self.collectives.post(rank, req.request, self.env.now)
        handle = Handle(len(self.handles))
        self.handles[handle.id] = (op, rank, False)
        return handle

    def _poll(self, rank: int, req: Poll) -> tuple[bool, Any]:
        op = self._op_of(rank, req.handle)
        if not op.done:
            return False, None
        return True, self._collect(op, rank, req.handle.id)

    # ------------------------------------------------------------------ instant requests
    def _apply(self, rank: int, req: Apply) -> None:
        self.replicas.apply(rank, req.update, req.lr)

    def _get_params(self, rank: int, req: GetParams) -> list[torch.Tensor]:
        return self.replicas.get_params(rank)

    def _set_params(self, rank: int, req: SetParams) -> None:
        self.replicas.set_params(rank, req.tensors)

    def _now(self, rank: int, req: Now) -> float:
        return float(self.env.now)

    def _ack(self, rank: int, req: Ack) -> None:
        self.stats.acked_samples += int(getattr(req.batch, "own", getattr(req.batch, "n", 0)))

    def _inject(self, rank: int, req: Inject) -> None:
        batch = req.batch
        positions = req.indices if req.indices is not None else list(range(req.count))
        chosen = np.asarray(batch.indices)[np.asarray(positions, dtype=np.int64)]
        nbytes_each = len(chosen) * self.data.sample_bytes
        arrive = self.env.now + self.network.transfer(nbytes_each)
        for target in req.targets:
            if not 0 <= target < self.world or target == rank:
                raise ValueError(f"Inject: worker {rank} cannot inject into device {target}")
            self.streams[target].deliver(arrive, chosen)
        p = self.pending[rank]
        p.inject_sent += len(chosen) * len(req.targets)
        p.inject_bytes += nbytes_each * len(req.targets)
        self.stats.inject_bytes += nbytes_each * len(req.targets)

    def _log(self, rank: int, req: Log) -> None:
        p = self.pending[rank]
        measured = p.fields(self.data.sample_bytes)
        given = req.fields
        line: dict[str, Any] = {"time": float(self.env.now), "device": rank}
        for key in LINE_ORDER[2:]:
            if key in given:
                line[key] = given[key]
            elif key in measured:
                line[key] = measured[key]
        for key, value in given.items():
            line.setdefault(key, value)
        for key, value in measured.items():
            line.setdefault(key, value)
        self.events.step(**line)
        self.pending[rank] = _Pending()
        self.stats.lines += 1
        if self.progress.active and self.stats.lines % 64 == 0:
            self.progress.update(float(self.env.now), self.stats.device_steps)

    # ------------------------------------------------------------------ results
    def profile(self, wall_s: float) -> dict[str, float]:
        """Wall seconds by category; `engine` is the rest (SimPy, dispatch, bookkeeping, logging)."""
        prof = {**self.replicas.wall, "reduce": self.collectives.reduce_s, **self.stats.wall}
        prof["engine"] = max(0.0, wall_s - sum(prof.values()))
        return {k: round(v, 4) for k, v in prof.items()}

    def extra_summary(self, wall_s: float) -> dict[str, Any]:
        """Simulator-specific summary fields (merged into summary.json)."""
        prof = self.profile(wall_s)
        cm = self.compute_model
        torch_s = prof["forward_backward"] + prof["optimizer"] + prof["eval"] + prof["reduce"]
        outside = max(0.0, wall_s - torch_s - prof["algorithm"])
        return {
            "algorithm": self.spec.name,
            "devices": self.world,
            "stop_reason": self.stop_reason or "finished",
            "virtual_time_s": round(float(self.env.now), 6),
            "device_steps": self.stats.device_steps,
            "buffer_final_samples": int(sum(self.last_backlog)),
            "buffer_final_max_samples": int(max(self.last_backlog)),
            "held_final_samples": int(sum(self.last_held)),
            "held_final_max_samples": int(max(self.last_held)),
            "acked_samples": self.stats.acked_samples,
            "injected_bytes_total": self.stats.inject_bytes,
            "compute_model": {"a_s": cm.a, "c_s": cm.c, "static": list(cm.static), "dynamic": cm.dynamic,
                              "calibrated": self.calibrated},
            "num_params": self.replicas.num_params,
            **self.replicas.layout(),
            "replicas_identical": self.replicas.identical(),
            "wall_profile_s": prof,
            "overhead_share": round(outside / wall_s, 4) if wall_s > 0 else None,
            "device_steps_per_wall_s": round(self.stats.device_steps / wall_s, 2) if wall_s > 0 else None,
        }
