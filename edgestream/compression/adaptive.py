"""ScaDLES adaptive Top-k (004 section IV): per step, compress only when Top-k keeps most of the gradient.

The decision is explicit state and pure functions, with no communication: each worker computes the
compression loss c of its gradient, keeps a running statistic of c in an `AdaptiveTopKState`, and
votes "compress" when that statistic is <= delta; the group compresses a step when at least half of
the workers vote so (`group_compress`). The algorithm in sync/ gathers the votes and then either
all-gathers Top-k payloads (with error feedback) or all-reduces dense gradients.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from edgestream.compression.topk import TopKCompressor, topk_tensor

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    import torch

Statistic = Literal["ewma", "reference"]


def compression_loss(grads: Sequence[torch.Tensor], ratio: float) -> float:
    """c = | ||g||^2 - ||topk(g)||^2 | / ||g||^2 over the whole model (004 section IV).

    Top-k is taken per layer, squared L2 norms are summed over layers. In [0, 1]: 0 when the Top-k
    entries hold all of the gradient's energy, 1 - ratio for a flat gradient. 0.0 for a zero gradient.
    """
    import torch

    total = 0.0
    kept = 0.0
    for g in grads:
        g = g.detach().to(torch.float64)
        total += float(g.pow(2).sum())
        kept += float(topk_tensor(g, ratio).pow(2).sum())
    if total == 0.0:
        return 0.0
    return abs(total - kept) / total


def compression_loss_reference(
    grads: Sequence[torch.Tensor], residuals: Sequence[torch.Tensor | None] | None, ratio: float
) -> float:
    """The authors' statistic: |N(g) - N(topk(g + e))| / N(g), N(x) = sum over layers of ||x_l||_2.

    Non-squared per-layer norms, and Top-k of the error-compensated gradient g + e (e: the residual
    of each layer, None or a missing list meaning zero). 0.0 for a zero gradient.
    """
    import torch

    n_g = 0.0
    n_top = 0.0
    for i, g in enumerate(grads):
        g = g.detach().to(torch.float64)
        e = residuals[i] if residuals is not None and i < len(residuals) else None
        t = g if e is None else g + e.detach().to(torch.float64)
        n_g += float(g.norm())
        n_top += float(topk_tensor(t, ratio).norm())
    if n_g == 0.0:
        return 0.0
    return abs(n_g - n_top) / n_g


class AdaptiveTopKState:
    """One worker's running statistic of the compression loss c and its vote.

    statistic "ewma": value = beta * value + (1 - beta) * c, initialised with the first c (so the
    first steps are not biased towards 0 and hence towards compressing); beta = 0.9 weighs history.
    statistic "reference": the authors' code, the cumulative mean of c since the start of the epoch;
    `new_epoch()` resets it (a no-op for "ewma").
    Before any observation `value` is None and the worker votes dense (no evidence yet).
    """

    def __init__(self, delta: float = 0.3, beta: float = 0.9, statistic: Statistic = "ewma") -> None:
        if statistic not in ("ewma", "reference"):
            raise ValueError(f"statistic must be 'ewma' or 'reference', got {statistic!r}")
        if not 0 <= beta < 1:
            raise ValueError(f"beta must be in [0, 1), got {beta}")
        self.delta = delta
        self.beta = beta
        self.statistic: Statistic = statistic
        self._value: float | None = None
        self._sum = 0.0
        self._count = 0

    def observe(self, c: float) -> None:
        """Fold in this step's compression loss c."""
        if not math.isfinite(c):
            raise ValueError(f"compression loss must be finite, got {c}")
        if self.statistic == "reference":
            self._sum += c
            self._count += 1
            self._value = self._sum / self._count
        elif self._value is None:
            self._value = c
        else:
            self._value = self.beta * self._value + (1.0 - self.beta) * c

    def new_epoch(self) -> None:
        """Start of an epoch: the reference statistic restarts its mean."""
        if self.statistic == "reference":
            self._sum, self._count, self._value = 0.0, 0, None

    @property
    def value(self) -> float | None:
        """The current statistic (None before any observation)."""
        return self._value

    def vote(self) -> bool:
        """True = vote to compress this step: statistic <= delta."""
        return self._value is not None and self._value <= self.delta

    def state_dict(self) -> dict:
        """{"value", "sum", "count"}: the statistic and the reference mean's running sums."""
        return {"value": self._value, "sum": self._sum, "count": self._count}

    def load_state_dict(self, state: dict) -> None:
        value = state.get("value")
        self._value = None if value is None else float(value)
        self._sum = float(state.get("sum", 0.0))
        self._count = int(state.get("count", 0))


def group_compress(votes: Sequence[bool]) -> bool:
    """The group compresses when at least half of the workers vote so (ties compress); no votes: dense."""
    return len(votes) > 0 and 2 * sum(bool(v) for v in votes) >= len(votes)


def cnc_ratio(compressed_steps: int, steps: int) -> float:
    """Compression-to-No-Compression ratio T_compressed / (T_compressed + T_uncompressed) (004 V-G).

    0.0 when no step was taken."""
    if steps < 0 or not 0 <= compressed_steps <= max(steps, 0):
        raise ValueError(f"need 0 <= compressed_steps <= steps, got {compressed_steps}, {steps}")
    return compressed_steps / steps if steps else 0.0


class AdaptiveTopKCompressor(TopKCompressor):
    """Top-k plus the adaptive knobs (spec name "adaptive-topk"). compress/decompress are Top-k's;
    the per-step compress-or-dense decision is taken by the algorithm with `new_state()` objects,
    `compression_loss[_reference]` and `group_compress`. Use the `none` compressor on dense steps."""

    name = "adaptive-topk"

    def __init__(
        self, ratio: float = 0.1, delta: float = 0.3, statistic: Statistic = "ewma", beta: float = 0.9
    ) -> None:
        super().__init__(ratio)
        self.delta = delta
        self.statistic: Statistic = statistic
        self.beta = beta
        AdaptiveTopKState(delta, beta, statistic)  # validates the knobs

    def new_state(self) -> AdaptiveTopKState:
        """A fresh per-worker decision state with this compressor's delta, beta and statistic."""
        return AdaptiveTopKState(self.delta, self.beta, self.statistic)

    def loss(
        self, grads: Sequence[torch.Tensor], residuals: Sequence[torch.Tensor | None] | None = None
    ) -> float:
        """This compressor's compression loss c of a model's gradients (by its `statistic`)."""
        if self.statistic == "reference":
            return compression_loss_reference(grads, residuals, self.ratio)
        return compression_loss(grads, self.ratio)
