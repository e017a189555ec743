"""Building a model: `build_model(name, input_shape, num_outputs, **kwargs)` resolves `name` through the one
extension mechanism (edgestream.plugins.MODELS: a built-in, an import path 'package.module:factory' or an
entry point in the group edgestream.models) and calls factory(input_shape, num_outputs, **kwargs).

Built-ins (`MODELS`): mlp (any input shape), cnn-small, resnet18, resnet20, vgg-small (images (C, H, W)).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from edgestream.plugins import MODELS as _REGISTRY
from edgestream.plugins import PluginError

MODELS: tuple[str, ...] = _REGISTRY.builtins
#: built-ins that take images only
IMAGE_MODELS = ("cnn-small", "resnet18", "resnet20", "vgg-small")


def build_model(name: str, in_shape: tuple[int, ...], num_classes: int, **kwargs: Any) -> nn.Module:
    """A freshly initialised model for inputs of shape `in_shape` ((F,), (C, T) or (C, H, W)) with
    `num_classes` outputs (the classes, or a regression target's length).

    Seed torch (torch.manual_seed) beforehand for identical replicas across workers. ValueError (one line,
    naming model.name) when the model cannot be built.
    """
    in_shape = tuple(int(s) for s in in_shape)
    if not in_shape or min(in_shape) < 1:
        raise ValueError(f"in_shape must have positive sizes, got {in_shape}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if name in IMAGE_MODELS and len(in_shape) != 3:
        raise ValueError(f"model.name: {name!r} takes images (channels, height, width); the data's samples have "
                         f"shape {list(in_shape)} (use mlp, or a model of your own by import path)")
    factory = _REGISTRY.load(name, "model.name")
    try:
        model = factory(in_shape, int(num_classes), **kwargs)
    except TypeError as exc:
        raise PluginError(f"model.name: {name!r} could not be called as factory(input_shape, num_outputs"
                          f"{', **kwargs' if kwargs else ''}): {exc}") from None
    if not isinstance(model, nn.Module):
        raise PluginError(f"model.name: {name!r} returned a {type(model).__name__}, not a torch.nn.Module")
    return model
