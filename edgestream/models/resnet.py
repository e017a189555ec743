"""CIFAR-style ResNets: a 3x3 stem with stride 1 and no max-pool (He et al. 2016).

resnet20: 3 stages x 3 basic blocks, 16/32/64 channels (272,474 parameters for 3x32x32, 10 classes).
resnet18: 4 stages x 2 basic blocks, 64/128/256/512 channels (11,173,962 parameters for 3x32x32).
Shortcuts that change shape are 1x1 convolution + batch norm (option B). Global average pooling makes
both work for any input of at least 1x1 after the stride-2 stages (8x8 digits included).
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 projection) shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """Stem conv3x3-BN-ReLU, stages of basic blocks (the first stride 1, then stride 2), GAP, linear."""

    def __init__(self, in_channels: int, num_classes: int, widths: tuple[int, ...], blocks: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        stages: list[nn.Module] = []
        c_in = widths[0]
        for i, width in enumerate(widths):
            for j in range(blocks):
                stages.append(BasicBlock(c_in, width, stride=2 if (i > 0 and j == 0) else 1))
                c_in = width
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def resnet20(in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """ResNet-20 for CIFAR (3 stages of 3 blocks, 16/32/64 channels)."""
    return CifarResNet(in_shape[0], num_classes, (16, 32, 64), blocks=3)


def resnet18(in_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """ResNet-18, CIFAR variant (3x3 stem, no max-pool; 4 stages of 2 blocks, 64..512 channels)."""
    return CifarResNet(in_shape[0], num_classes, (64, 128, 256, 512), blocks=2)
