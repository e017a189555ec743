"""Training that diverges, named the same way by every engine: a non-finite loss stops the run
(`check_loss` raises `Diverged`, one line naming the device and the step), and a loss that grew a
hundredfold over its starting value is worth one warning (`LossGrowth`). The real trainer
(edgestream.trainer.performer) checks each step's loss; the simulator (edgestream.sim) checks each
Compute's.
"""

from __future__ import annotations

import math

#: what to do about a diverging run (the end of every line of this module)
ADVICE = "lower optim.lr, or check the data and the model"
#: how many times its starting value a loss may grow before `LossGrowth` warns
GROWTH_WARNING = 100.0


class Diverged(ArithmeticError):
    """The loss or the parameters stopped being finite; the message is one line naming the device and step.
    `code`: the exit status a command ends with."""

    code = 1


def check_loss(rank: int, loss: float, step: int) -> None:
    """Diverged when `loss` (device `rank`'s at `step`, as the step lines count) is NaN or infinite."""
    if not math.isfinite(loss):
        raise Diverged(f"device {rank}: the loss is non-finite ({loss}) at step {step}: training diverged ({ADVICE})")


def non_finite_params(rank: int, when: str) -> Diverged:
    """The Diverged of a parameter found non-finite `when` ("after the update of step 12")."""
    return Diverged(f"device {rank}: a parameter is non-finite {when}: training diverged ({ADVICE})")


class LossGrowth:
    """One warning per run when a device's loss grows GROWTH_WARNING times over its first positive value."""

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.warning: str | None = None

    def check(self, rank: int, loss: float, step: int) -> str | None:
        """The warning line, the first time a device's loss is over GROWTH_WARNING times its first one."""
        if self.warning is not None or not math.isfinite(loss):
            return None
        first = self.first.setdefault(rank, loss) if loss > 0 else self.first.get(rank)
        if first is None or loss <= GROWTH_WARNING * first:
            return None
        self.warning = (f"device {rank}: the loss grew from {first:.4g} to {loss:.4g} by step {step}, over "
                        f"{GROWTH_WARNING:g} times its starting value: training may be diverging ({ADVICE})")
        return self.warning
