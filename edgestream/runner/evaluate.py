"""Scoring the global model on the held-out split, and when: the one evaluation every engine uses.

`evaluate(model, x, y)` scores a model. `Evaluation` decides when and records the result: at engine
time 0, then every `eval.every_s` engine seconds while the run goes on, and once more at the end
unless an evaluation already happened at that time; each one writes an eval line to the run's
events, tells the `StopRule` (reaching stop.target_accuracy stops the run) and calls `on_eval`.
`Evaluation.periodic` is the schedule as a generator of waits, so any engine can host it: the
simulator waits in virtual time (a SimPy process), a real trainer in wall time (a thread).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgestream.runner.stop import StopRule

EVAL_CHUNK = 2048


def evaluate(model: nn.Module, x: Tensor, y: Tensor, chunk: int = EVAL_CHUNK) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of `model` on (x, y), in eval mode, without gradients; the
    model's train/eval mode is restored."""
    was_training = model.training
    model.eval()
    correct, loss_sum = 0, 0.0
    device = next(model.parameters()).device
    with torch.no_grad():
        for lo in range(0, len(y), chunk):
            xb, target = x[lo:lo + chunk].to(device), y[lo:lo + chunk].to(device)
            logits = model(xb)
            loss_sum += float(F.cross_entropy(logits, target, reduction="sum"))
            correct += int((logits.argmax(dim=1) == target).sum())
    model.train(was_training)
    n = max(1, len(y))
    return correct / n, loss_sum / n


class Evaluation:
    """Periodic evaluation of one run (see module doc).

    score(): (accuracy, loss) of the global model now. events: the run's EventLog (or anything with
    `evaluation(time, step, accuracy, loss)`). stop: the run's StopRule. every_s: eval.every_s.
    on_eval(now, step, accuracy): called after each evaluation (progress displays).
    """

    def __init__(self, score: Callable[[], tuple[float, float]], events: Any, stop: StopRule, every_s: float,
                 on_eval: Callable[[float, int, float], None] | None = None) -> None:
        if not every_s > 0:
            raise ValueError(f"eval.every_s must be > 0, got {every_s}")
        self.score = score
        self.events = events
        self.stop = stop
        self.every_s = float(every_s)
        self.on_eval = on_eval
        self.last_time: float | None = None
        self.last_accuracy: float | None = None
        self.count = 0

    def run(self, now: float, step: int) -> float:
        """Evaluate at engine time `now` (after `step` steps); returns the accuracy."""
        acc, loss = self.score()
        now = float(now)
        self.events.evaluation(now, step, acc, loss)
        self.last_time, self.last_accuracy = now, acc
        self.count += 1
        self.stop.accuracy(acc)
        if self.on_eval is not None:
            self.on_eval(now, step, acc)
        return acc

    def periodic(self, now: Callable[[], float], step: Callable[[], int],
                 running: Callable[[], bool]) -> Generator[float, None, None]:
        """Evaluate at once, then after every wait of `every_s` it yields while `running()`: the engine
        waits the yielded seconds of its own time and resumes the generator."""
        self.run(now(), step())
        while running():
            yield self.every_s
            if running():
                self.run(now(), step())

    def final(self, now: float, step: int) -> None:
        """The end of the run: evaluate unless the last evaluation was at `now`."""
        if self.last_time is None or self.last_time < float(now):
            self.run(now, step)
