"""Building a model: `build_model(name, input_shape, num_outputs, **kwargs)` resolves `name` through the one
extension mechanism (edgestream.plugins.MODELS: a built-in, an import path 'package.module:factory' or an
entry point in the group edgestream.models) and calls factory(input_shape, num_outputs, **kwargs).

Built-ins (`MODELS`): mlp (any input shape), cnn-small, resnet18, resnet20, vgg-small (images (C, H, W)).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from edgestream.models.inputs import IMAGE_MODELS, check_input
from edgestream.plugins import MODELS as _REGISTRY
from edgestream.plugins import PluginError

MODELS: tuple[str, ...] = _REGISTRY.builtins
__all__ = ["IMAGE_MODELS", "MODELS", "build_model"]


def build_model(name: str, in_shape: tuple[int, ...], num_classes: int, **kwargs: Any) -> nn.Module:
    """A freshly initialised model for inputs of shape `in_shape` ((F,), (C, T) or (C, H, W)) with
    `num_classes` outputs (the classes, or a regression target's length).

    Seed torch (torch.manual_seed) beforehand for identical replicas across workers. ValueError (one line,
    naming model.name) when the model cannot be built.
    """
    in_shape = check_input(name, in_shape, num_classes)
    factory = _REGISTRY.load(name, "model.name")
    try:
        model = factory(in_shape, int(num_classes), **kwargs)
    except TypeError as exc:
        raise PluginError(f"model.name: {name!r} could not be called as factory(input_shape, num_outputs"
                          f"{', **kwargs' if kwargs else ''}): {exc}") from None
    if not isinstance(model, nn.Module):
        raise PluginError(f"model.name: {name!r} returned a {type(model).__name__}, not a torch.nn.Module")
    return model
