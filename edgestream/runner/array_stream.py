"""The lockstep engine's data: `ArraySource`, an endless stream over arrays at a constant rate S_i, and
`ArrayStream`, the `edgestream.streams.source.StreamSource` the engine takes its batches from.

An `ArrayStream` always holds its batch (no wait, nothing dropped): it counts int(S_i) buffered and
S_i x window_s arrived in the last window, so the shared take sequence (`take_batch`, through
`TakeRule` like the simulator's and the Kafka stream) sizes b_i = batch_policy.target(S_i, int(S_i)),
or the explicit size; the samples peers injected since the last batch join it.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from edgestream.streams.policies import PersistBuffer
from edgestream.streams.source import BatchFacts, TakeCounts, check_state
from edgestream.streams.take import TakeDecision, TakeRule

#: version of `ArrayStream.state_dict()`
STATE_VERSION = 1


@dataclass
class LockstepBatch:
    """A batch of the lockstep engine: inputs, labels, sample count, the own-stream count for Ack, and
    what the stream did to get it (`facts`)."""

    x: Tensor
    y: Tensor
    n: int
    own: int  # samples taken from the worker's own stream (the rest were injected)
    facts: BatchFacts | None = None


class ArraySource:
    """One worker's endless stream over arrays (reshuffled each pass, seeded), at a constant rate S_i."""

    def __init__(self, x: Tensor, y: Tensor, rate: float, seed: int = 0) -> None:
        if len(x) != len(y) or len(x) == 0:
            raise ValueError("ArraySource needs equally long, non-empty x and y")
        self.x, self.y, self.rate = x, y, float(rate)
        self._gen = torch.Generator().manual_seed(seed)
        self._order = torch.randperm(len(x), generator=self._gen)
        self._pos = 0

    def take(self, k: int) -> tuple[Tensor, Tensor]:
        """The next k samples."""
        idx = []
        while len(idx) < k:
            if self._pos == len(self._order):
                self._order, self._pos = torch.randperm(len(self.x), generator=self._gen), 0
            step = min(k - len(idx), len(self._order) - self._pos)
            idx.extend(self._order[self._pos : self._pos + step].tolist())
            self._pos += step
        index = torch.tensor(idx, dtype=torch.long)
        return self.x[index], self.y[index]

    def state_dict(self) -> dict[str, Any]:
        """The stream position: shuffle generator state, current order and position in it."""
        return {"generator": self._gen.get_state(), "order": self._order.clone(), "pos": self._pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._gen.set_state(state["generator"])
        self._order, self._pos = state["order"].clone(), int(state["pos"])


class ArrayStream:
    """`source` as a `StreamSource` under `batch_policy` (None: every take names its size), with the
    queue of samples peers injected (`inbox`: (x, y) pairs, taken with the next batch)."""

    def __init__(self, source: ArraySource, batch_policy: Any = None) -> None:
        self.source = source
        self.rule = TakeRule(PersistBuffer(), batch_policy, window_s=1.0)
        self.inbox: list[tuple[Tensor, Tensor]] = []

    def counts(self) -> TakeCounts:
        rate = self.source.rate
        return TakeCounts(int(rate), rate * self.rule.window_s)

    def skip(self, n: int) -> int:
        raise RuntimeError(f"an ArrayStream keeps every sample; asked to skip {n}")

    def wait(self, decision: TakeDecision, timeout: float | None = None) -> Generator[Any, Any, bool]:
        """Nothing to wait for: the arrays always hold the batch."""
        return True
        yield  # a generator that never yields

    def take(self, decision: TakeDecision, dropped: int) -> LockstepBatch:
        k = decision.target
        x, y = self.source.take(k)
        if self.inbox:
            xs, ys = zip(*self.inbox, strict=True)
            x, y = torch.cat([x, *xs]), torch.cat([y, *ys])
            self.inbox = []
        n = len(y)
        return LockstepBatch(x, y, n, k, BatchFacts(n - k, batch=n))

    def state_dict(self) -> dict[str, Any]:
        """The source's position and the injected samples not taken yet (tensors)."""
        return {"version": STATE_VERSION, "source": self.source.state_dict(),
                "inbox": [[x, y] for x, y in self.inbox]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        state = check_state(state, "ArrayStream", STATE_VERSION, ("source", "inbox"))
        self.source.load_state_dict(state["source"])
        self.inbox = [(x, y) for x, y in state["inbox"]]
