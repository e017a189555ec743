"""Synthetic multichannel sensor windows: each class is a vibration at its own frequency, with noise.

edgestream calls factory(**data.kwargs) and streams the train split to the devices; the test split is held
out for evaluation. x is float32 (channels, length): it keeps its dtype on the wire.
"""

from __future__ import annotations

import numpy as np


def sensor_windows(n_train: int = 2000, n_test: int = 500, channels: int = 3, length: int = 32,
                   classes: int = 4, noise: float = 0.5, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float32) / length

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, classes, n)
        freq = 1.0 + 1.5 * y[:, None, None]                          # class -> frequency
        phase = rng.uniform(0, 2 * np.pi, (n, channels, 1))
        x = np.sin(2 * np.pi * freq * t[None, None, :] + phase) + noise * rng.standard_normal((n, channels, length))
        return x.astype(np.float32), y.astype(np.int64)

    x, y = make(n_train)
    x_test, y_test = make(n_test)
    return {"x": x, "y": y, "x_test": x_test, "y_test": y_test}
