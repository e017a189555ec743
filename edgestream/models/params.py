"""Flat views of a model's parameters and gradients, for sync code that averages or sends them.

Order is `model.parameters()` order everywhere; names from `param_names` key the per-tensor
compressors and memories. Buffers (batch-norm statistics) are not parameters and are not included.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def param_names(model: nn.Module) -> list[str]:
    """Names of the trainable parameters, in `parameters()` order."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def _params(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def flat_params(model: nn.Module) -> torch.Tensor:
    """A detached copy of all trainable parameters as one flat tensor."""
    return torch.cat([p.detach().reshape(-1) for p in _params(model)])


def set_flat_params(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy a flat tensor (as from `flat_params`) into the parameters, in place."""
    params = _params(model)
    total = sum(p.numel() for p in params)
    if flat.numel() != total:
        raise ValueError(f"flat tensor has {flat.numel()} elements, model has {total}")
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n


def grads_of(model: nn.Module) -> list[torch.Tensor]:
    """Detached copies of the gradients, one per trainable parameter (zeros where .grad is None),
    safe to keep after the next zero_grad/backward."""
    return [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in _params(model)]


def set_grads(model: nn.Module, grads: Sequence[torch.Tensor]) -> None:
    """Install gradients (e.g. the aggregated ones) into .grad before optimizer.step()."""
    params = _params(model)
    if len(grads) != len(params):
        raise ValueError(f"{len(grads)} gradients for {len(params)} parameters")
    for p, g in zip(params, grads, strict=True):
        p.grad = g.detach().to(device=p.device, dtype=p.dtype).reshape(p.shape).clone()
