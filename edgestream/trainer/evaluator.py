"""Rank 0's periodic evaluation of the global model, in a background thread so training never stalls.

Every `every_s` seconds the training thread hands over a snapshot of the parameters and buffers at a
step boundary (`offer`, called when the worker logs a step: the model is consistent then); the thread
scores it on the held-out split with `edgestream.runner.evaluate` on its own copy of the model,
writes an eval line and tells the stop rule (target accuracy). `final` evaluates synchronously.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable

import torch
from torch import Tensor, nn

from edgestream.runner.evaluate import evaluate


class BackgroundEvaluator:
    def __init__(self, model: nn.Module, x_test: Tensor, y_test: Tensor, every_s: float,
                 on_result: Callable[[float, int, float, float], None]) -> None:
        self.scratch = copy.deepcopy(model)
        self.x, self.y, self.every_s, self.on_result = x_test, y_test, float(every_s), on_result
        self.next_at = 0.0
        self._job: tuple[float, int, dict[str, Tensor]] | None = None
        self._cv = threading.Condition()
        self._closed = False
        self._busy = False
        self.thread = threading.Thread(target=self._loop, name="evaluator", daemon=True)
        self.thread.start()

    def due(self, now: float) -> bool:
        return now >= self.next_at and not self._busy

    def offer(self, model: nn.Module, now: float, step: int) -> None:
        """Snapshot `model` (at a step boundary) for evaluation at time `now`, if one is due."""
        if not self.due(now):
            return
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        with self._cv:
            self._job, self._busy = (now, step, state), True
            self.next_at = now + self.every_s
            self._cv.notify()

    def _score(self, now: float, step: int, state: dict[str, Tensor]) -> None:
        self.scratch.load_state_dict(state)
        acc, loss = evaluate(self.scratch, self.x, self.y)
        self.on_result(now, step, acc, loss)

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

    def final(self, model: nn.Module, now: float, step: int) -> None:
        """Wait for a running evaluation, then score `model` once more (the run's last eval line)."""
        with self._cv:
            while self._busy:
                self._cv.wait()
            self._closed = True
            self._cv.notify_all()
        self.thread.join()
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            self._score(now, step, state)
