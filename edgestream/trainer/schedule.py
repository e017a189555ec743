"""When a trainer checkpoints: every `checkpoint.every_steps` steps and/or every `checkpoint.every_s` seconds.

Steps are the same on every rank, so `every_steps` needs no agreement. Seconds are not: each rank has its
own clock and reaches a step at its own moment, yet the checkpoints of a collective run must all hold one
step (`check_checkpoints(agree=True)`, what `--resume` needs). So the timer is decided by rank 0 at agreed
*decision steps*: at a decision step every rank joins one tiny broadcast (its own gloo group, so it never
interleaves with the algorithm's collectives) of rank 0's verdict: checkpoint now or not, and the next
decision step, chosen from rank 0's measured seconds per step so that it lands about where `every_s` runs
out. Every rank sees the same sequence of step numbers at its Logs and the same verdicts, so every rank
checkpoints at the same steps; the broadcast happens about once or twice per `every_s` (not per step), so
it costs a collective run nothing measurable, and it never makes the ranks of an asynchronous collective
algorithm (local SGD) wait for each other more than once per `every_s`.

Parameter-server workers (no collective; each worker's checkpoint stands alone) decide on their own clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: agree(due, next_step) -> (due, next_step) as rank 0 decided (a broadcast); None: this rank decides alone
Agree = Callable[[bool, int], tuple[bool, int]]


class CheckpointSchedule:
    """`due(step)` at each Log (step = completed steps): whether to checkpoint there; `saved(step)` after a
    checkpoint was written. `start_step`: the step the session starts from (a resumed one: its checkpoint's)."""

    def __init__(self, every_steps: int | None, every_s: float | None, start_step: int = 0, *,
                 agree: Agree | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_steps, self.every_s, self.agree, self.clock = every_steps, every_s, agree, clock
        now = clock()
        self.last_step, self.last_t = int(start_step), now   # the newest checkpoint (or the start)
        self.mark_step, self.mark_t = int(start_step), now   # the previous decision (seconds per step since)
        self.next_check = int(start_step) + 1                # the next decision step (collective runs)
        self.decisions = 0

    def due(self, step: int) -> bool:
        if step == self.last_step:
            return False
        by_steps = self.every_steps is not None and step % self.every_steps == 0
        if self.every_s is None:
            return by_steps
        if self.agree is None:  # alone: this rank's own clock
            return by_steps or self.clock() - self.last_t >= self.every_s
        if step < self.next_check:  # the same step on every rank: the sequence of Log steps is the same
            return by_steps
        now = self.clock()
        per_step = (now - self.mark_t) / max(1, step - self.mark_step)
        remaining = self.every_s - (now - self.last_t)
        due = remaining <= per_step / 2  # the next decision would be later by more than it is early now
        ahead = self.every_s if (due or by_steps) else remaining
        nxt = step + max(1, round(ahead / per_step)) if per_step > 0 else step + 1
        due, nxt = self.agree(due, nxt)  # rank 0's verdict, on every rank
        self.mark_step, self.mark_t, self.next_check = step, now, int(nxt)
        self.decisions += 1
        return bool(due) or by_steps

    def saved(self, step: int) -> None:
        self.last_step, self.last_t = int(step), self.clock()


def broadcast_agree(group: object, device: object = None) -> Agree:
    """An `Agree` over torch.distributed: rank 0's (due, next step) broadcast in `group` (gloo: CPU tensors)."""
    import torch
    import torch.distributed as dist

    def agree(due: bool, nxt: int) -> tuple[bool, int]:
        t = torch.tensor([1 if due else 0, int(nxt)], dtype=torch.int64)
        dist.broadcast(t, src=0, group=group)
        return bool(t[0].item()), int(t[1].item())

    return agree
