"""Optimizer and learning-rate schedule shared by both engines."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    import torch
    from torch import nn


def build_optimizer(
    model: nn.Module, lr: float, momentum: float = 0.9, weight_decay: float = 1e-4
) -> torch.optim.SGD:
    """SGD with momentum and weight decay on all parameters (the papers' setting); multi-tensor
    (foreach) kernels on every device: the same update with far less Python per step. A torch.optim.SGD
    that imports no torch._dynamo (edgestream/models/sgd.py)."""
    from edgestream.models.sgd import SGD  # torch.optim.SGD less its torch._dynamo import (~0.8 s of CPU)

    return SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay, foreach=True)


def lr_at(t: float, base_lr: float, milestones: Sequence[float], gamma: float) -> float:
    """Step decay: base_lr * gamma ** (number of milestones <= t).

    `t` and the milestones share a unit (steps, epochs or seconds; floats allowed), which is why
    this pure function, rather than MultiStepLR's integer epochs, is what the algorithms call.
    """
    return base_lr * gamma ** bisect.bisect_right(sorted(milestones), t)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group (apply `lr_at` before a step)."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def build_scheduler(
    optimizer: torch.optim.Optimizer, milestones: Sequence[float], gamma: float
) -> torch.optim.lr_scheduler.MultiStepLR:
    """MultiStepLR over integer milestones (rounded), stepped once per epoch by the caller."""
    import torch

    return torch.optim.lr_scheduler.MultiStepLR(optimizer, [round(m) for m in milestones], gamma=gamma)
