"""`GroupDrift`: the drift responses a synchronous group performs together (docs/stream-learning.md, "Responses").

In ddl, scadles and dbs-sgd every worker applies the same update, so a response that changes the update
(`reset_optimizer`, `lr_boost`) or saves the model (`checkpoint`) must happen on every worker at the same step,
although a drift is detected on one device. The detection sets that worker's `vote` (the host does it after the
step's `drift` line); at its next exchange the vote rides with the step's stop flag (`exchange(drift=...)`,
summed over the group), and every worker sees the same count at the same step (`agreed`), so all of them
* reset their optimizer's state (`ResetOptimizer`) before applying that step's update,
* multiply their learning rate by `factor` for the next `steps` steps (`lr_factor`, read by `WorkerContext.lr_now`),
* mark the step for a checkpoint (`checkpoint_step`: the trainer checkpoints every rank at that step's Log).

State is explicit and plain (the boost's end, the last agreed step), kept with the worker's checkpoint.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from edgestream.sync.requests import ResetOptimizer


@dataclass
class GroupDrift:
    """What the group does when some worker voted drift at a step (module doc)."""

    reset_optimizer: bool = False
    lr_boost: tuple[float, int] | None = None  # (factor, steps)
    checkpoint: bool = False
    vote: bool = False                 # this worker's vote at its next exchange (set by the host at a detection)
    boost_until: int = -1              # lr boost lasts while ctx.step < boost_until
    agreed_step: int | None = None     # the step at which the group last agreed (its update got the responses)
    checkpoint_step: int | None = None  # a checkpoint is due at the Log of this step (ctx.step after it)
    agreements: int = 0

    def lr_factor(self, step: int) -> float:
        return self.lr_boost[0] if self.lr_boost is not None and step < self.boost_until else 1.0

    def take_vote(self) -> bool:
        """This worker's vote for the exchange now (then cleared: one detection, one vote)."""
        vote, self.vote = self.vote, False
        return vote

    def agreed(self, votes: int, step: int) -> Generator[Any, Any, None]:
        """The exchange of step `step` (ctx.step before it completes) counted `votes` drift votes: perform the
        group's responses (a generator of requests: `yield from`)."""
        if votes <= 0:
            return
        self.agreements += 1
        self.agreed_step = step
        if self.reset_optimizer:
            yield ResetOptimizer()
        if self.lr_boost is not None:
            self.boost_until = step + int(self.lr_boost[1])
        if self.checkpoint:
            self.checkpoint_step = step + 1

    def state_dict(self) -> dict[str, Any]:
        return {"vote": self.vote, "boost_until": self.boost_until, "agreed_step": self.agreed_step,
                "checkpoint_step": self.checkpoint_step, "agreements": self.agreements}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.vote, self.boost_until = bool(state.get("vote", False)), int(state.get("boost_until", -1))
        self.agreed_step, self.checkpoint_step = state.get("agreed_step"), state.get("checkpoint_step")
        self.agreements = int(state.get("agreements", 0))
