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
        self.finished = 0

    def _count(self, line: dict[str, Any]) -> None:
        self.lines += 1
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
