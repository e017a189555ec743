"""`mlp`: a two-hidden-layer perceptron (128, 64), the cheapest model.

Parameters (10 classes): 17,226 for 1x8x8 digits, 402,250 for 3x32x32.
"""

from __future__ import annotations

import math

from torch import nn


def mlp(in_shape: tuple[int, int, int], num_classes: int, hidden: tuple[int, ...] = (128, 64)) -> nn.Module:
    """Flatten -> [Linear -> ReLU] per hidden width -> Linear(num_classes)."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(in_shape)
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU(inplace=True)]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)
