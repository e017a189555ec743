"""A 1-D convolutional network for multichannel sensor windows of shape (channels, time)."""

from __future__ import annotations

from torch import nn


def sensor_cnn(input_shape: tuple[int, ...], num_outputs: int, width: int = 16, batchnorm: bool = True) -> nn.Module:
    """edgestream calls factory(input_shape, num_outputs, **model.kwargs); input_shape is (channels, time)."""
    if len(input_shape) != 2:
        raise ValueError(f"sensor_cnn takes windows (channels, time), got samples of shape {list(input_shape)}")
    channels, _ = input_shape
    norm = (lambda c: nn.BatchNorm1d(c)) if batchnorm else (lambda c: nn.Identity())
    return nn.Sequential(
        nn.Conv1d(channels, width, kernel_size=5, padding=2), norm(width), nn.ReLU(),
        nn.Conv1d(width, width, kernel_size=5, padding=2), norm(width), nn.ReLU(),
        nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(width, num_outputs),
    )
