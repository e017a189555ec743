"""`WorkerSession`: one worker's life around the one request loop, the same for every engine.

A session holds what a worker needs besides its performer: its `WorkerContext` (from the run plan),
the run's stop rule at the engine's clock (plus an optional external stop signal: SIGTERM to a trainer),
the events sink its step lines go to, and hooks run at every `Log` -- the moment a step is complete and
`ctx.step` / `ctx.state` are consistent (the sync/ state contract), so evaluation snapshots and
checkpoints are taken there. `drive()` is the worker's driver generator (cooperative hosts schedule
it; `run_blocking()` runs it in a blocking host), `summary()` its per-rank summary.

Hosts: `WorkerGroup` (edgestream.runner.group) holds the M sessions of an in-process run (the
simulator, the lockstep engine) sharing one stop rule and one event log; a trainer process holds one
session of its own (edgestream.trainer.main).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from edgestream.runner.driver import StepMeter, drive, run_blocking
from edgestream.runner.performer import Performer
from edgestream.runner.responses import attach as attach_responses
from edgestream.runner.stop import StopRule
from edgestream.runner.watch import DeviceWatch
from edgestream.streams.drift import drift_watch
from edgestream.sync.requests import Log

#: a hook run at each Log request: hook(session)
LogHook = Callable[["WorkerSession"], None]


class WorkerSession:
    """Worker `rank` of a run (see the module doc).

    plan: the RunPlan; performer: the engine's; stop: the stop rule (shared by an in-process group);
    events: the run's EventLog (anything with `step(**line)`); meters: where the worker's StepMeter lives
    (shared with the performer, which notes batch figures on it); param_names: the model's trainable
    parameter names; signal(): an external stop request (e.g. SIGTERM), recorded as stop reason
    "signal"; on_line(line): after each step line is written; on_log: hooks run at each Log.
    """

    def __init__(self, plan: Any, rank: int, performer: Performer, *, stop: StopRule, events: Any,
                 meters: dict[int, StepMeter] | None = None, param_names: list[str] | None = None,
                 signal: Callable[[], bool] | None = None, on_line: Callable[[dict[str, Any]], None] | None = None,
                 on_log: list[LogHook] | None = None) -> None:
        self.plan, self.rank, self.performer = plan, rank, performer
        self.stop, self.events, self.signal, self.on_line = stop, events, signal, on_line
        self.meters = meters if meters is not None else {}
        self.on_log = list(on_log or [])
        self.ctx = plan.worker_context(rank, should_stop=self.should_stop, param_names=param_names)
        self.lines = 0
        self.finished = False
        #: writes `drift_start` when a drift scenario's change began in this worker's batches (None: none here)
        self.drift_watch = drift_watch(getattr(plan, "drift_scenario", None), rank, events)
        #: prequential counters and drift detector of this device (edgestream.runner.watch), or None: off
        self.watch = DeviceWatch.of(plan, rank)
        #: called with each drift record after it is written (the host's responses: edgestream.runner.responses)
        self.on_drift: list[Callable[[WorkerSession, dict[str, Any]], None]] = []
        attach_responses(plan, self)

    # ------------------------------------------------------------------ the stop test
    def should_stop(self, completed: int) -> bool:
        """Whether to stop once `completed` steps are done, at the engine's time for this worker."""
        if self.signal is not None and self.stop.reason is None and self.signal():
            self.stop.reason = "signal"
        return self.stop.should_stop(completed, self.performer.now(self.rank))

    def resume(self, step: int, state: dict[str, Any]) -> None:
        """Continue from a checkpoint's algorithm step and state."""
        self.ctx.step, self.ctx.state = int(step), state
        if self.drift_watch is not None:
            self.drift_watch.resumed()

    # ------------------------------------------------------------------ the loop
    def sink(self, line: dict[str, Any]) -> None:
        """Write one step line (the driver's sink): with prequential evaluation, the step's scores are added to
        the device's counters first and its detections written as `drift` lines after it."""
        drifts: list[dict] = []
        watch = self.watch
        if watch is not None:
            meter = self.meters.get(self.rank)
            if meter is not None and meter.scores:
                fields, drifts = watch.step(meter.scores, time=line["time"], step=line.get("step", self.ctx.step))
                line.update(fields)
        self.events.step(**line)
        for drift in drifts:
            self.events.record("drift", **drift)
            for respond in self.on_drift:
                respond(self, drift)
        self.lines += 1
        if self.on_line is not None:
            self.on_line(line)

    def drive(self, *, on_request: Callable[[int, Any], None] | None = None,
              profile: dict[str, float] | None = None) -> Generator[Any, Any, Any]:
        """The worker's driver: its algorithm program run by `runner.drive` against the performer;
        on_request(rank, request) runs before each request, the `on_log` hooks at each Log."""
        hooks = self.on_log

        def before(rank: int, req: Any) -> None:
            if on_request is not None:
                on_request(rank, req)
            if isinstance(req, Log):
                for hook in hooks:
                    hook(self)

        stop = self.stop
        if (self.plan.algorithm.family == "collective" and stop.max_steps is not None
                and self.ctx.step >= stop.max_steps):
            # resumed from the run's last checkpoint (killed after its final step, before its end): nothing is
            # left to train. Every rank of a collective run resumes from one step, so all end here alike; a PS
            # worker still runs, since its coordinator waits for the worker's stop
            stop.should_stop(self.ctx.step, self.performer.now(self.rank))
            self.finished = True
            return None
        program = self.plan.algorithm.worker(self.ctx)
        out = yield from drive(self.rank, program, self.performer, self.sink, self.meters,
                               on_request=before if (hooks or on_request is not None) else None, profile=profile,
                               on_batch=self._noted if self.drift_watch is not None else None)
        self.finished = True
        self.write_prequential()
        return out

    def watch_state(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of stream learning: the device's prequential counters and detector, the group's
        drift agreement and a reweighting in progress (plain values), or None when the run has none of it."""
        if self.watch is None:
            return None
        ctx = self.ctx
        return {**self.watch.state_dict(), "group": None if ctx.drift is None else ctx.drift.state_dict(),
                "reweight": None if ctx.reweight is None else list(ctx.reweight)}

    def load_watch_state(self, state: dict[str, Any]) -> None:
        """Continue from `watch_state()` (a resumed trainer): the same later scores and detections."""
        if self.watch is None:
            return
        self.watch.load_state_dict(state)
        if self.ctx.drift is not None and state.get("group") is not None:
            self.ctx.drift.load_state_dict(state["group"])
        if state.get("reweight") is not None:
            self.ctx.reweight = (float(state["reweight"][0]), int(state["reweight"][1]))

    def write_prequential(self) -> None:
        """A `prequential` line with the device's counters (their sums and figures): what summary.json pools over
        devices (edgestream.metrics.prequential.pooled). At the worker's end and at each checkpoint."""
        watch = self.watch
        if watch is not None:
            self.events.record("prequential", time=float(self.performer.now(self.rank)), device=self.rank,
                               step=self.ctx.step, sums=watch.counter.sums(), figures=watch.counter.figures(),
                               detections=watch.detections)

    def _noted(self, facts: Any, time: float) -> None:
        self.drift_watch.note(facts.seqs, time)

    def run_blocking(self) -> Any:
        """Run the worker to its end in a blocking host (the performer performs each request itself)."""
        return run_blocking(self.drive())

    def summary(self) -> dict[str, Any]:
        """The per-rank summary every engine reports for a worker. A worker whose group stopped on a peer's
        vote (no reason of its own) while it was itself asked to stop by a signal says "signal": the signal
        reached it just after it had cast its own vote for that step (the orchestrator signals every trainer
        at once), and it stopped at a step boundary like the peer."""
        reason = self.stop.reason
        if reason is None and self.signal is not None and self.signal():
            reason = "signal"
        out = {"rank": self.rank, "algorithm": self.plan.algorithm.name,
               "stop_reason": reason or "finished", "steps": self.ctx.step}
        if self.watch is not None:
            out["prequential"] = self.watch.counter.figures()
            out["drift_detections"] = self.watch.detections
        return out
