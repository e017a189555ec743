"""`cnn-small`: a small convolutional net, cheap enough for many simulated devices on a CPU.

Three 3x3 convolutions (16, 32, 64 channels; no batch norm, so no buffers to synchronise), a 2x2
max-pool after the second (and after the first too for inputs of 16 pixels or more, to keep 32x32
images cheap), then a 2x2 adaptive average pool and a linear classifier. Any input size works.
Convolutions use Kaiming-normal initialisation (PyTorch's default init makes this BN-free net
start very slowly).
Parameters: 25,866 for 1x8x8 digits, 26,154 for 3x32x32 (10 classes).
"""

from __future__ import annotations

from torch import nn


def cnn_small(in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """The `cnn-small` model for inputs (C, H, W)."""
    c, h, w = in_shape
    pool1: nn.Module = nn.MaxPool2d(2) if min(h, w) >= 16 else nn.Identity()
    pool2: nn.Module = nn.MaxPool2d(2) if min(h, w) >= 4 else nn.Identity()
    net = nn.Sequential(
        nn.Conv2d(c, 16, 3, padding=1),
        nn.ReLU(inplace=True),
        pool1,
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(inplace=True),
        pool2,
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 4, num_classes),
    )
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return net
