"""A GPU step's loss read without stopping the GPU: `LossWatch` and its `LazyLoss`es.

Reading a CUDA loss (`float(loss)`) waits for the device to finish everything queued before it: once per step,
that sync leaves the GPU idle while the host prepares the next step (the take, the exchange's bookkeeping, the
step line, the driver), so the step costs host time + device time instead of the larger of the two. A trainer
on a GPU (edgestream.trainer.performer) therefore hands the algorithm a `LazyLoss` instead: the loss is copied
to pinned host memory without waiting (an event marks when it is there), and

* its value is read when something needs it -- the event log's flusher when it encodes the step line, or an
  algorithm's own arithmetic on it (`float()`, `+`, `*`, comparisons: then that algorithm waits, as before);
* `LossWatch.check()`, at every step, checks the losses of the steps the GPU has finished (an event query: no
  wait) and raises `Diverged` naming the first non-finite one's step, as the eager check did -- a step or two
  after it was computed instead of at once (the parameter check was already every PARAM_CHECK_EVERY-th
  change); queuing a step while `AHEAD` are still in flight waits for the oldest first, so the host runs at
  most that far ahead of the device;
* the parameter check (every PARAM_CHECK_EVERY-th model change: a fused norm of all parameters) goes the
  same way (`lazy_check`): no step waits for it either;
* `LossWatch.settle()` waits for and checks them all: before a checkpoint is saved (a checkpoint never holds a
  model whose steps have an unchecked loss) and when the worker ends.

On the CPU a loss is computed by the time `backward` returns: the trainer reads it at once there (a float).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from edgestream.runner.divergence import check_loss

#: pinned float32 slots the losses are copied into, reused in turn; a loss is read (waiting if need be)
#: before it falls RING // 2 steps behind, so a slot is never overwritten before it was read
RING = 64
#: losses (and parameter checks) in flight at most: queuing one more first waits for the oldest (a wait that
#: frees the interpreter for the prefetch thread). Enough for the device to always have the next step queued
#: while the host prepares the one after; more would only delay the checks
AHEAD = 3


_READ = threading.Lock()


class LazyLoss:
    """A step's mean loss on its way to the host: a number once read (`float()`; see the module doc).
    Arithmetic and comparisons read it; the event log writes it as the float (`lazy_number`)."""

    __slots__ = ("_host", "_event", "_value", "step", "error")

    lazy_number = True  # edgestream.metrics.events: encoded as float(value) when the line is written

    def __init__(self, host: torch.Tensor | None, event: Any, step: int, value: float | None = None,
                 error: Callable[[], Exception] | None = None) -> None:
        self._host, self._event, self._value, self.step = host, event, value, int(step)
        self.error = error  # a parameter check (`LossWatch.lazy_check`): the exception its non-finite value raises

    def ready(self) -> bool:
        """Whether the value is on the host (read, or its copy done); never waits."""
        return self._value is not None or self._event is None or bool(self._event.query())

    def __float__(self) -> float:
        # read by the training thread (its checks) and the event log's flusher (the line), maybe at once: one
        # reads, under the lock; the training thread reads every value before its slot and event are reused
        # (`LossWatch.lazy`), so a read in progress in the flusher holds that reuse back
        value = self._value
        if value is None:
            with _READ:
                value = self._value
                if value is None:
                    if self._event is not None:
                        self._event.synchronize()
                    value = self._value = float(self._host.item())  # pinned host memory: no device sync
        return value

    def __repr__(self) -> str:
        return repr(float(self))

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(float(self))

    def __hash__(self) -> int:
        return hash(float(self))

    def __eq__(self, other: object) -> bool:
        return float(self) == other

    def __lt__(self, other: Any) -> bool:
        return float(self) < other

    def __le__(self, other: Any) -> bool:
        return float(self) <= other

    def __gt__(self, other: Any) -> bool:
        return float(self) > other

    def __ge__(self, other: Any) -> bool:
        return float(self) >= other

    def __add__(self, other: Any) -> Any:
        return float(self) + other

    def __radd__(self, other: Any) -> Any:
        return other + float(self)

    def __sub__(self, other: Any) -> Any:
        return float(self) - other

    def __rsub__(self, other: Any) -> Any:
        return other - float(self)

    def __mul__(self, other: Any) -> Any:
        return float(self) * other

    def __rmul__(self, other: Any) -> Any:
        return other * float(self)

    def __truediv__(self, other: Any) -> Any:
        return float(self) / other

    def __rtruediv__(self, other: Any) -> Any:
        return other / float(self)

    def __neg__(self) -> float:
        return -float(self)

    def __abs__(self) -> float:
        return abs(float(self))

    def __round__(self, ndigits: int | None = None) -> Any:
        return round(float(self), ndigits)

    def is_finite(self) -> bool:
        return math.isfinite(float(self))


class LossWatch:
    """Worker `rank`'s losses on `device` read without waiting, checked as their steps finish (module doc)."""

    def __init__(self, rank: int, device: torch.device, ring: int = RING, ahead: int = AHEAD) -> None:
        self.rank, self.device, self.size = rank, torch.device(device), max(2, int(ring))
        self.ahead = max(1, min(int(ahead), self.size // 2))
        cuda = self.device.type == "cuda"
        self._ring = torch.empty(self.size, dtype=torch.float32, pin_memory=cuda)
        self._slots = list(self._ring.unbind(0))  # 0-dim views, made once
        self._events = [torch.cuda.Event() for _ in range(self.size)] if cuda else None  # one per slot, reused
        self._next = 0
        self.pending: deque[LazyLoss] = deque()

    def lazy(self, loss: torch.Tensor, step: int, error: Callable[[], Exception] | None = None) -> LazyLoss:
        """`loss` (a 0-dim tensor of this step, `step` as the step lines count) copied towards the host; the
        copy and its event queued on the current stream after the step's work."""
        while len(self.pending) >= self.ahead:  # the device is that far behind: wait for the oldest (and so
            self._check(self.pending.popleft())  # a slot is read long before it comes round again)
        slot = self._next
        self._next = (slot + 1) % self.size
        host = self._slots[slot]
        host.copy_(loss.detach(), non_blocking=True)
        event = None
        if self._events is not None:
            event = self._events[slot]
            event.record()
        out = LazyLoss(host, event, step, error=error)
        self.pending.append(out)
        return out

    def lazy_check(self, value: torch.Tensor, step: int, error: Callable[[], Exception]) -> None:
        """Raise `error()` (by `check` or `settle`, in step order with the losses) once `value`, a 0-dim tensor
        (a sum of norms of the parameters: non-finite when any of them is), turns out non-finite; no wait."""
        self.lazy(value, step, error)

    def _check(self, lazy: LazyLoss) -> None:
        if lazy.error is None:
            check_loss(self.rank, float(lazy), lazy.step)
        elif not math.isfinite(float(lazy)):
            raise lazy.error()

    def check(self) -> None:
        """Diverged for the first non-finite loss among the finished steps (oldest first); never waits."""
        pending = self.pending
        while pending and pending[0].ready():
            self._check(pending.popleft())

    def settle(self) -> None:
        """Wait for every pending loss and check it (before a checkpoint, at the worker's end)."""
        pending = self.pending
        while pending:
            self._check(pending.popleft())
