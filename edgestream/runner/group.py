"""`WorkerGroup`: the workers of one config run hosted in one process (the simulator, the lockstep
engine), engine-neutral.

It builds one `WorkerContext` per device from the config, with a stop test backed by the run's one
`StopRule` at the engine's time for that worker (`performer.now(rank)`), writes every step line the
driver produces to the run's events, and hands out one `drive` generator per worker for the engine to
schedule (SimPy processes, the lockstep round robin). What a worker's requests do is the performer's
business; the group never looks at them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from edgestream.runner.driver import Performer, StepMeter, drive
from edgestream.runner.stop import StopRule
from edgestream.sync.context import WorkerContext
from edgestream.sync.registry import get_algorithm


class WorkerGroup:
    """The workers of `cfg` (an ExperimentConfig) in one process.

    events: the run's EventLog (anything with `step(**line)`); now(rank): the engine's clock;
    param_names: the model's trainable parameter names (keys of compressor state); on_line(line): called
    after each step line is written (progress displays). ValueError (from the algorithm registry or
    its params) when the config's algorithm cannot run.
    """

    def __init__(self, cfg: Any, events: Any, now: Callable[[int], float], *,
                 param_names: list[str] | None = None,
                 on_line: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.spec = get_algorithm(cfg.algorithm.name)
        self.world = int(cfg.devices.count)
        self.stop = StopRule.from_config(cfg.stop)
        self.events = events
        self._now = now
        self.on_line = on_line
        self.contexts = [WorkerContext.from_config(cfg, r, should_stop=self._stop_test(r), param_names=param_names)
                         for r in range(self.world)]
        self.meters: dict[int, StepMeter] = {}
        self.finished = 0
        self.lines = 0

    def _stop_test(self, rank: int) -> Callable[[int], bool]:
        stop, now = self.stop, self._now

        def should_stop(completed: int) -> bool:
            return stop.should_stop(completed, now(rank))

        return should_stop

    def sink(self, line: dict[str, Any]) -> None:
        """Write one step line (the driver's `sink`)."""
        self.events.step(**line)
        self.lines += 1
        if self.on_line is not None:
            self.on_line(line)

    def drivers(self, performer: Performer, *, on_finish: Callable[[int], None] | None = None,
                on_request: Callable[[int, Any], None] | None = None,
                profile: dict[str, float] | None = None) -> list[Generator[Any, Any, Any]]:
        """One `drive` generator per worker, in rank order; `on_finish(rank)` runs when a worker's
        program has returned."""
        return [self._drive(r, performer, on_finish, on_request, profile) for r in range(self.world)]

    def _drive(self, rank: int, performer: Performer, on_finish: Callable[[int], None] | None,
               on_request: Callable[[int, Any], None] | None,
               profile: dict[str, float] | None) -> Generator[Any, Any, Any]:
        program = self.spec.worker(self.contexts[rank])
        out = yield from drive(rank, program, performer, self.sink, self.meters, on_request=on_request,
                               profile=profile)
        self.finished += 1
        if on_finish is not None:
            on_finish(rank)
        return out

    @property
    def running(self) -> bool:
        """Whether some worker has not returned yet."""
        return self.finished < self.world

    def min_step(self) -> int:
        """Steps completed by the slowest worker (the step an evaluation line reports)."""
        return min(c.step for c in self.contexts)
