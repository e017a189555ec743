"""Scoring the global model on the held-out split, and when: the one evaluation every engine uses.

`evaluate(model, x, y, task=...)` scores a model: the task's metrics (edgestream.tasks; classification
{"accuracy", "loss"}, regression {"rmse", "mae", "loss"}). `Evaluation` decides when and records the
result: at engine time 0, then every `eval.every_s` engine seconds while the run goes on, and once more
at the end unless an evaluation already happened at that time; each one writes an eval line with the
metrics to the run's events, tells the `StopRule` (reaching the target metric stops the run) and calls
`on_eval` with the primary metric.
`Evaluation.periodic` is the schedule as a generator of waits, so an in-process engine can host it
in its own time (the simulator: a SimPy process); `BackgroundEvaluation` hosts the same schedule for a
real trainer, in a thread on snapshots taken at step boundaries, so training never waits for it.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from edgestream.runner.stop import StopRule
from edgestream.tasks import CLASSIFICATION, REGRESSION, Task

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor, nn

EVAL_CHUNK = 2048


def task_of(y: Tensor) -> Task:
    """The task whose targets look like `y`: float targets are regression, class indices classification."""
    import torch

    return REGRESSION if torch.is_floating_point(y) else CLASSIFICATION


def evaluate(model: nn.Module, x: Tensor, y: Tensor, chunk: int = EVAL_CHUNK, *,
             task: Task | None = None) -> dict[str, float]:
    """The metrics of `task` (default: from the targets' dtype, `task_of`) of `model` on (x, y), in eval
    mode, without gradients, in chunks of `chunk` samples; the model's train/eval mode is restored."""
    import torch

    task = task or task_of(y)
    was_training = model.training
    model.eval()
    sums: dict[str, float] = {}
    device = next(model.parameters()).device
    with torch.no_grad():
        for lo in range(0, len(y), chunk):
            xb, target = x[lo:lo + chunk].to(device), y[lo:lo + chunk].to(device)
            for k, v in task.metric_sums(model(xb), target).items():
                sums[k] = sums.get(k, 0.0) + v
    model.train(was_training)
    return task.finish(sums, len(y))


def as_metrics(score: Any) -> dict[str, float]:
    """A score as a metrics dict: a dict as it is, an (accuracy, loss) pair as {"accuracy", "loss"}."""
    if isinstance(score, dict):
        return score
    acc, loss = score
    return {"accuracy": acc, "loss": loss}


def primary_of(metrics: dict[str, float]) -> str:
    """The metric a run is judged by: accuracy when there is one, else the first (rmse for regression)."""
    return "accuracy" if "accuracy" in metrics else next(iter(metrics))


class Evaluation:
    """Periodic evaluation of one run (see module doc).

    score(): the metrics dict of the global model now (`evaluate`; an (accuracy, loss) pair is taken as
    classification's). events: the run's EventLog (or anything with `evaluation(time, step, **metrics)`).
    stop: the run's StopRule. every_s: eval.every_s. on_eval(now, step, value): called after each
    evaluation with the primary metric's value (accuracy; rmse for regression), for progress displays.
    `last_metrics` / `last_accuracy` / `primary`: the latest evaluation's.
    """

    def __init__(self, score: Callable[[], tuple[float, float]], events: Any, stop: StopRule, every_s: float,
                 on_eval: Callable[[float, int, float], None] | None = None,
                 extra: Callable[[], dict[str, Any]] | None = None) -> None:
        if not every_s > 0:
            raise ValueError(f"eval.every_s must be > 0, got {every_s}")
        self.score = score
        self.events = events
        self.stop = stop
        self.every_s = float(every_s)
        self.on_eval = on_eval
        self.extra = extra  # fields the eval line carries beside the metrics (the prequential figures)
        self.last_time: float | None = None
        self.last_accuracy: float | None = None
        self.last_metrics: dict[str, float] | None = None
        self.primary: str | None = None
        self.count = 0

    def run(self, now: float, step: int) -> float | None:
        """Evaluate at engine time `now` (after `step` steps); returns the primary metric's value (None, and
        nothing recorded, while `score` has nothing to score on: a stream hold-out still empty)."""
        score = self.score()
        if score is None:
            return None
        metrics = as_metrics(score)
        now = float(now)
        self.events.evaluation(now, step, **metrics, **(self.extra() if self.extra is not None else {}))
        self.primary = primary_of(metrics)
        self.last_time, self.last_metrics = now, dict(metrics)
        self.last_accuracy = metrics.get("accuracy")
        self.count += 1
        self.stop.observe(metrics)
        value = metrics[self.primary]
        if self.on_eval is not None:
            self.on_eval(now, step, value)
        return value

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


class BackgroundEvaluation:
    """`Evaluation` of a live model in a background thread (a real trainer's rank 0).

    `offer(now, step)` is called at each step boundary (a `Log`: the model is consistent then): when an
    evaluation is due (every `every_s` seconds of engine time) and none is running, it snapshots the
    parameters and buffers under `lock` and the thread scores the snapshot on its own copy of the
    model. `final(now, step)` waits for a running one, then evaluates once more unless one already
    happened at `now`. The schedule, eval lines and stop rule are `Evaluation`'s; task: whose metrics
    (default: from the targets' dtype). `x` may instead be an evaluation source (`y` None: an object whose
    `get()` gives (x, y) or None, and `close()`; edgestream.consumers.holdout), asked at each evaluation in
    the thread and closed with this object.
    """

    def __init__(self, model: nn.Module, x: Tensor | Any, y: Tensor | None, events: Any, stop: StopRule,
                 every_s: float, lock: Any = None, on_eval: Callable[[float, int, float], None] | None = None,
                 task: Task | None = None) -> None:
        self.model, self.lock = model, lock if lock is not None else threading.Lock()
        self.scratch = copy.deepcopy(model)
        self.source = x if y is None else None

        def score() -> dict[str, float] | None:
            if y is not None:
                return evaluate(self.scratch, x, y, task=task)
            if self.source is None:  # closed
                return None
            data = self.source.get()
            return None if data is None else evaluate(self.scratch, *data, task=task)

        self.evaluation = Evaluation(score, events, stop, every_s, on_eval)
        self.next_at = 0.0
        self._job: tuple[float, int, dict[str, Tensor]] | None = None
        self._cv = threading.Condition()
        self._closed = self._busy = False
        self.thread = threading.Thread(target=self._loop, name="evaluation", daemon=True)
        self.thread.start()

    def _snapshot(self) -> dict[str, Tensor]:
        with self.lock:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def offer(self, now: float, step: int) -> None:
        """Start an evaluation of the model as it is now, if one is due and none is running."""
        if now < self.next_at or self._busy:
            return
        state = self._snapshot()
        with self._cv:
            self._job, self._busy = (now, step, state), True
            self.next_at = now + self.evaluation.every_s
            self._cv.notify()

    def _score(self, now: float, step: int, state: dict[str, Tensor]) -> None:
        self.scratch.load_state_dict(state)
        self.evaluation.run(now, step)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while self._job is None and not self._closed:
                    self._cv.wait()
                if self._job is None:
                    return
                job, self._job = self._job, None
            try:
                self._score(*job)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _stop_thread(self) -> None:
        with self._cv:
            while self._busy:
                self._cv.wait()
            self._closed = True
            self._cv.notify_all()
        self.thread.join()

    def _release(self) -> None:
        if self.source is not None:
            source, self.source = self.source, None
            source.close()

    def close(self) -> None:
        """Wait for a running evaluation, stop the thread (and close an evaluation source)."""
        self._stop_thread()
        self._release()

    def final(self, now: float, step: int) -> None:
        """The end of the run: wait for a running evaluation, then the last one (see `Evaluation.final`)."""
        self._stop_thread()
        try:
            if self.evaluation.last_time is None or self.evaluation.last_time < float(now):
                self._score(now, step, self._snapshot())
        finally:
            self._release()
