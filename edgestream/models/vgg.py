"""`vgg-small`: a VGG-style net (conv3x3-BN-ReLU blocks and 2x2 max-pools) that adapts to the input size.

Plan 32, M, 64, M, 128, 128, M, 256, 256, M; a max-pool is skipped when the feature map is already
1 pixel high or wide, so 8x8 digits use three pools and 32x32 images four. The classifier is
flatten -> Linear(256) -> ReLU -> Linear(num_classes) on the final map (2x2 for 32x32 inputs:
1,391,914 parameters; 1x1 for 1x8x8: 1,194,730; 10 classes).
"""

from __future__ import annotations

from torch import nn

PLAN: tuple[int | str, ...] = (32, "M", 64, "M", 128, 128, "M", 256, 256, "M")


def vgg_small(in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """The `vgg-small` model for inputs (C, H, W)."""
    c, h, w = in_shape
    layers: list[nn.Module] = []
    for item in PLAN:
        if item == "M":
            if min(h, w) >= 2:
                layers.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
            continue
        assert isinstance(item, int)
        layers += [nn.Conv2d(c, item, 3, padding=1, bias=False), nn.BatchNorm2d(item), nn.ReLU(inplace=True)]
        c = item
    layers += [
        nn.Flatten(),
        nn.Linear(c * h * w, 256),
        nn.ReLU(inplace=True),
        nn.Linear(256, num_classes),
    ]
    return nn.Sequential(*layers)
