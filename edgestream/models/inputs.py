"""What a model is built for, checked without torch: `check_input(name, in_shape, num_classes)` is the check
`build_model` runs before it calls a factory, and for a built-in (`MODELS`) without model.kwargs it is the whole
answer (every built-in builds for every input it passes), so `config validate` needs no torch for them."""

from __future__ import annotations

#: built-ins that take images only
IMAGE_MODELS = ("cnn-small", "resnet18", "resnet20", "vgg-small")


def check_input(name: str, in_shape: tuple[int, ...], num_classes: int) -> tuple[int, ...]:
    """`in_shape` as ints; ValueError (one line, naming model.name where it is the model's) when model `name`
    cannot take inputs of that shape with `num_classes` outputs."""
    in_shape = tuple(int(s) for s in in_shape)
    if not in_shape or min(in_shape) < 1:
        raise ValueError(f"in_shape must have positive sizes, got {in_shape}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if name in IMAGE_MODELS and len(in_shape) != 3:
        raise ValueError(f"model.name: {name!r} takes images (channels, height, width); the data's samples have "
                         f"shape {list(in_shape)} (use mlp, or a model of your own by import path)")
    return in_shape
