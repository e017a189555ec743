"""The stop rule every engine applies: stop.max_steps, stop.max_time_s, stop.target_accuracy.

A worker asks `should_stop(completed, now)` with the number of steps it will have completed when the
collective that carries its stop flag finishes; the algorithms agree on stopping through that
collective (any worker's flag stops the group after the same step), so every engine ends a run after
exactly max_steps steps, on the first step past max_time_s, or on the first step after an evaluation
reached the target.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StopRule:
    """max_steps / max_time_s / target_accuracy (None: not used). `reason` is set by the first test
    that fires and stays set: the run is over for every worker of this engine."""

    max_steps: int | None = None
    max_time_s: float | None = None
    target_accuracy: float | None = None
    reason: str | None = None

    def should_stop(self, completed: int, now: float) -> bool:
        """Whether to stop once `completed` steps are done at engine time `now`."""
        if self.reason is None:
            if self.max_steps is not None and completed >= self.max_steps:
                self.reason = "max_steps"
            elif self.max_time_s is not None and now >= self.max_time_s:
                self.reason = "max_time_s"
        return self.reason is not None

    def accuracy(self, acc: float) -> None:
        """Record an evaluation: reaching the target stops the run."""
        if self.target_accuracy is not None and acc >= self.target_accuracy and self.reason is None:
            self.reason = "target_accuracy"
