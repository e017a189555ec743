"""The stop rule every engine applies: stop.max_steps, stop.max_time_s, and the target metric
(stop.target_accuracy, or stop.target_metric: {name, value} with the metric's direction, edgestream.tasks).

A worker asks `should_stop(completed, now)` with the number of steps it will have completed when the
collective that carries its stop flag finishes; the algorithms agree on stopping through that
collective (any worker's flag stops the group after the same step), so every engine ends a run after
exactly max_steps steps, on the first step past max_time_s, or on the first step after an evaluation
reached the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgestream.tasks import reached  # noqa: F401 - reached handed on (runner.stop.reached)


@dataclass
class StopRule:
    """max_steps / max_time_s / a target (None: not used). `target` is (metric, value) (`cfg.target()`);
    `target_accuracy` is shorthand for ("accuracy", value). `reason` is set by the first test that fires
    and stays set: the run is over for every worker of this engine. Reaching the target sets
    "target_accuracy" for accuracy, "target_metric" for any other metric."""

    max_steps: int | None = None
    max_time_s: float | None = None
    target_accuracy: float | None = None
    reason: str | None = None
    target: tuple[str, float] | None = None

    def __post_init__(self) -> None:
        if self.target is None and self.target_accuracy is not None:
            self.target = ("accuracy", float(self.target_accuracy))
        elif self.target is not None:
            self.target = (str(self.target[0]), float(self.target[1]))
            if self.target[0] == "accuracy":
                self.target_accuracy = self.target[1]

    def should_stop(self, completed: int, now: float) -> bool:
        """Whether to stop once `completed` steps are done at engine time `now`."""
        if self.reason is None:
            if self.max_steps is not None and completed >= self.max_steps:
                self.reason = "max_steps"
            elif self.max_time_s is not None and now >= self.max_time_s:
                self.reason = "max_time_s"
        return self.reason is not None

    def observe(self, metrics: dict[str, Any]) -> None:
        """Record an evaluation's metrics: reaching the target stops the run."""
        if self.target is None or self.reason is not None:
            return
        name, value = self.target
        if reached(name, metrics.get(name), value):
            self.reason = "target_accuracy" if name == "accuracy" else "target_metric"

    def accuracy(self, acc: float) -> None:
        """Record an evaluation's accuracy (`observe({"accuracy": acc})`)."""
        self.observe({"accuracy": acc})
