"""`WorkerGroup`: the M worker sessions of one run hosted in one process (the simulator, the lockstep
engine), engine-neutral.

Every worker is a `WorkerSession` (edgestream.runner.session) built from the run plan; the group's
sessions share the run's one `StopRule` (at the engine's time for each worker, `performer.now(rank)`)
and one event log, and the group hands out one driver generator per worker for the engine to schedule
(SimPy processes, the lockstep round robin). What a worker's requests do is the performer's business.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from edgestream.runner.driver import StepMeter
from edgestream.runner.performer import Performer
from edgestream.runner.session import WorkerSession
from edgestream.runner.watch import GroupWatch


class WorkerGroup:
    """The workers of `plan` (a RunPlan) in one process, performed by `performer`.

    events: the run's EventLog; param_names: the model's trainable parameter names (keys of compressor
    state); on_line(line): called after each step line is written (progress displays).
    """

    def __init__(self, plan: Any, performer: Performer, events: Any, *, param_names: list[str] | None = None,
                 on_line: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.plan = plan
        self.spec = plan.algorithm
        self.world = plan.world
        self.stop = plan.stop_rule()
        self.events = events
        self.meters: dict[int, StepMeter] = {}
        self.lines = 0  # step lines written so far, by every worker
        self._on_line = on_line
        self.sessions = [WorkerSession(plan, r, performer, stop=self.stop, events=events, meters=self.meters,
                                       param_names=param_names, on_line=self._count) for r in range(self.world)]
        self.contexts = [s.ctx for s in self.sessions]
        self.group_watch = GroupWatch.of(plan)
        #: the devices' newest prequential figures, pooled (edgestream.metrics.prequential.LivePool), or None: off
        self.pool = None
        if plan.prequential is not None:
            from edgestream.metrics.prequential import LivePool

            self.pool = LivePool()
        self.finished = 0

    def stream_fields(self) -> dict[str, Any]:
        """The all-devices prequential figures an eval line carries (`preq_<metric>`: window; `preq_cum_<metric>`:
        since the run began) and the drift detections so far (`drifts`); {} without prequential evaluation."""
        if self.pool is None:
            return {}
        out: dict[str, Any] = {f"preq_{k}": round(v, 6) for k, v in self.pool.figures("preq_").items()}
        out.update({f"preq_cum_{k}": round(v, 6) for k, v in self.pool.figures("preq_cum_").items()})
        drifts = self.detections()
        if drifts is not None:
            out["drifts"] = drifts
        return out

    def write_unfinished(self) -> None:
        """The `prequential` line of every worker that did not end by itself (a hard limit, a divergence, an
        interruption): summary.json pools every device's counters (a finished worker wrote its own)."""
        for s in self.sessions:
            if not s.finished:
                s.write_prequential()

    def detections(self) -> int | None:
        """Drift detections so far, every device's and the all-devices detector's (None without detectors)."""
        if getattr(self.plan.cfg, "drift", None) is None:
            return None
        own = sum(s.watch.detections for s in self.sessions if s.watch is not None)
        return own + (self.group_watch.detections if self.group_watch is not None else 0)

    def stream_note(self, metric: str) -> str:
        """What a progress line says of stream learning (runner.report.stream_note)."""
        if self.pool is None:
            return ""
        from edgestream.runner.report import stream_note

        return stream_note(self.pool.figures("preq_"), metric, self.detections())

    def _count(self, line: dict[str, Any]) -> None:
        self.lines += 1
        if self.pool is not None and "preq_n" in line:
            self.pool.update(int(line["device"]), line)
        watch = self.group_watch
        if watch is not None:  # the all-devices detector over the steps' mean prequential errors
            drift = watch.line(line)
            if drift is not None:
                self.events.record("drift", **drift)
        if self._on_line is not None:
            self._on_line(line)

    def drivers(self, *, on_finish: Callable[[int], None] | None = None,
                on_request: Callable[[int, Any], None] | None = None,
                profile: dict[str, float] | None = None) -> list[Generator[Any, Any, Any]]:
        """One driver generator per worker, in rank order; `on_finish(rank)` runs when a worker's
        program has returned."""
        return [self._drive(s, on_finish, on_request, profile) for s in self.sessions]

    def _drive(self, session: WorkerSession, on_finish: Callable[[int], None] | None,
               on_request: Callable[[int, Any], None] | None,
               profile: dict[str, float] | None) -> Generator[Any, Any, Any]:
        out = yield from session.drive(on_request=on_request, profile=profile)
        self.finished += 1
        if on_finish is not None:
            on_finish(session.rank)
        return out

    @property
    def running(self) -> bool:
        """Whether some worker has not returned yet."""
        return self.finished < self.world

    def min_step(self) -> int:
        """Steps completed by the slowest worker (the step an evaluation line reports)."""
        return min(c.step for c in self.contexts)
