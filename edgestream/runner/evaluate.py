"""Scoring the global model on the held-out split: the one evaluation every engine uses."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

EVAL_CHUNK = 2048


def evaluate(model: nn.Module, x: Tensor, y: Tensor, chunk: int = EVAL_CHUNK) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of `model` on (x, y), in eval mode, without gradients; the
    model's train/eval mode is restored."""
    was_training = model.training
    model.eval()
    correct, loss_sum = 0, 0.0
    device = next(model.parameters()).device
    with torch.no_grad():
        for lo in range(0, len(y), chunk):
            xb, target = x[lo:lo + chunk].to(device), y[lo:lo + chunk].to(device)
            logits = model(xb)
            loss_sum += float(F.cross_entropy(logits, target, reduction="sum"))
            correct += int((logits.argmax(dim=1) == target).sum())
    model.train(was_training)
    n = max(1, len(y))
    return correct / n, loss_sum / n
