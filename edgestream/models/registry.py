"""The model zoo: `build_model(name, in_shape, num_classes)` and the allowed names `MODELS`."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from edgestream.models.cnn import cnn_small
from edgestream.models.mlp import mlp
from edgestream.models.resnet import resnet18, resnet20
from edgestream.models.vgg import vgg_small

_BUILDERS: dict[str, Callable[[tuple[int, int, int], int], nn.Module]] = {
    "mlp": mlp,
    "cnn-small": cnn_small,
    "resnet18": resnet18,
    "resnet20": resnet20,
    "vgg-small": vgg_small,
}
MODELS: tuple[str, ...] = tuple(_BUILDERS)


def build_model(name: str, in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """A freshly initialised model for inputs of shape (C, H, W) and `num_classes` outputs.

    Seed torch (torch.manual_seed) beforehand for identical replicas across workers.
    """
    if name not in _BUILDERS:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
    if len(in_shape) != 3 or min(in_shape) < 1:
        raise ValueError(f"in_shape must be (C, H, W) with positive sizes, got {in_shape}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    return _BUILDERS[name](tuple(int(s) for s in in_shape), int(num_classes))
