"""A seeded synthetic dataset at any shape -- (F,), (C, T), (C, H, W) -- for classification or regression;
no download.

Classification: each class k has a smooth template T_k (a shared low-frequency background plus a weaker
class-specific low-frequency pattern, per channel). A sample of class k is a random crop of T_k (shift
up to ~1/8 of each spatial axis), scaled by a random contrast, offset by a random brightness, plus white
noise, quantised to uint8. Regression (`task="regression"`): K smooth patterns P_j and a target
t ~ N(0, 1)^K per sample; the sample is the crop of (background + sum_j t_j P_j) with the same
nuisances, and y = t (float32; [N] for a scalar target, the default, or [N, K] with `target_dim=K`).

Shapes: (C, H, W) as is; (C, T) is a (C, 1, T) image (shifts along T only: a time series); (F,) a
(1, 1, F) image without shifts (features do not move). Inputs are uint8 at every shape.

Difficulty: the class signal is weaker than the shared background, the nuisances and the noise; how
weak scales with the sample's size: below REF_SIZE (3072 values, 3x32x32) the pattern's amplitude is
multiplied by sqrt(REF_SIZE / size), so `signal` 1.0 gives about the same learnability at every size
(3x32x32 and larger are unchanged by this). Measured (tests/unit/test_data_synthetic_signal.py; an MLP
flatten-64-K, SGD lr 0.01, momentum 0.9, batch 32, 300 steps, 10 classes): 3x32x32 ~90% test
accuracy (~14% after 5 steps), 1x6x6, (16,) and (4, 20) well above chance (~70-95%); regression at
those shapes halves the mean predictor's error or better. `signal` scales the pattern further (lower is
harder). Generation is vectorised and chunked (about 0.25 s for 10k samples of 3x32x32) and a pure
function of the seed and sizes; train and test samples come from independent streams.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

#: the synthetic dataset's sizes when the config leaves them out
SYNTHETIC_DEFAULTS = {"shape": (3, 32, 32), "num_classes": 10, "n_train": 8000, "n_test": 2000}

#: relative amplitudes: shared background, class pattern, white noise (std), brightness (std).
BACKGROUND, CLASS_SIGNAL, NOISE, BRIGHTNESS = 0.3, 0.15, 1.0, 0.2
CONTRAST = (0.6, 1.4)
#: uint8 quantisation: v -> 128 + SCALE * v.
SCALE = 36.0
#: samples with fewer values than this get a stronger pattern: x sqrt(REF_SIZE / size)
REF_SIZE = 3072

Grid = tuple[int, int, int, int, int]  # (C, H, W, pad along H, pad along W)


def _low_frequency(rng: np.random.Generator, count: int, channels: int, h: int, w: int,
                   waves: int = 4) -> np.ndarray:
    """`count` x channels smooth patterns of size h x w: sums of `waves` random plane cosines of at
    most ~2.5 cycles per image, normalised to unit std."""
    yy = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None]
    xx = np.linspace(0.0, 1.0, w, dtype=np.float32)[None, :]
    kx = rng.uniform(-2.5, 2.5, size=(count, channels, waves, 1, 1)).astype(np.float32)
    ky = rng.uniform(-2.5, 2.5, size=(count, channels, waves, 1, 1)).astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, size=(count, channels, waves, 1, 1)).astype(np.float32)
    amp = rng.normal(size=(count, channels, waves, 1, 1)).astype(np.float32)
    pat = (amp * np.cos(2 * np.pi * (kx * xx + ky * yy) + phase)).sum(axis=2)
    pat -= pat.mean(axis=(-2, -1), keepdims=True)
    return pat / (pat.std(axis=(-2, -1), keepdims=True) + 1e-6)


def grid_of(shape: tuple[int, ...]) -> Grid:
    """The image grid a sample shape is generated on (see the module doc)."""
    if len(shape) == 1:
        return 1, 1, shape[0], 0, 0
    if len(shape) == 2:
        return shape[0], 1, shape[1], 0, max(1, shape[1] // 8)
    pad = max(1, min(shape[1], shape[2]) // 8)
    return shape[0], shape[1], shape[2], pad, pad


def boost(shape: tuple[int, ...]) -> float:
    """The pattern amplitude's size factor: max(1, sqrt(REF_SIZE / size))."""
    return max(1.0, (REF_SIZE / math.prod(shape)) ** 0.5)


def _patterns(rng: np.random.Generator, count: int, grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """(background (1, C, hp, wp), `count` patterns (count, C, hp, wp)) on the padded grid."""
    c, h, w, ph, pw = grid
    hp, wp = h + 2 * ph, w + 2 * pw
    return _low_frequency(rng, 1, c, hp, wp), _low_frequency(rng, count, c, hp, wp)


def _finish(x: np.ndarray, contrast: np.ndarray, bright: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Contrast, brightness, white noise, then the uint8 quantisation (x is modified)."""
    x *= contrast
    x += bright
    # Triangular white noise (difference of two uniforms) with std NOISE: cheaper than normal variates.
    noise = rng.random(size=x.shape, dtype=np.float32)
    noise -= rng.random(size=x.shape, dtype=np.float32)
    noise *= np.float32(NOISE * 6**0.5)
    x += noise
    x *= np.float32(SCALE)
    x += np.float32(128.5)  # + 0.5: the uint8 cast truncates, so this rounds
    np.clip(x, 0, 255, out=x)
    return x


def _nuisances(rng: np.random.Generator, n: int, grid: Grid) -> tuple[np.ndarray, ...]:
    c, _, _, ph, pw = grid
    dy = rng.integers(0, 2 * ph + 1, size=n)
    dx = rng.integers(0, 2 * pw + 1, size=n)
    contrast = rng.uniform(*CONTRAST, size=(n, 1, 1, 1)).astype(np.float32)
    bright = rng.normal(0.0, BRIGHTNESS, size=(n, c, 1, 1)).astype(np.float32)
    return dy, dx, contrast, bright


def _samples(rng: np.random.Generator, templates: np.ndarray, n: int, grid: Grid,
             chunk: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """n class samples drawn from `templates`; float work is done in chunks that stay in cache."""
    c, h, w = grid[:3]
    y = rng.integers(0, templates.shape[0], size=n)
    dy, dx, contrast, bright = _nuisances(rng, n, grid)
    windows = sliding_window_view(templates, (h, w), axis=(2, 3))  # (K, C, 2ph+1, 2pw+1, h, w)
    out = np.empty((n, c, h, w), dtype=np.uint8)
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        x = windows[y[lo:hi], :, dy[lo:hi], dx[lo:hi]]  # (m, C, h, w), a fresh array
        out[lo:hi] = _finish(x, contrast[lo:hi], bright[lo:hi], rng)
    return out, y.astype(np.int64)


def _regression_samples(rng: np.random.Generator, background: np.ndarray, patterns: np.ndarray, amp: float,
                        n: int, grid: Grid, chunk: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """n samples of background + amp * sum_j t_j P_j with targets t ~ N(0, 1)^K."""
    c, h, w = grid[:3]
    t = rng.standard_normal((n, patterns.shape[0])).astype(np.float32)
    dy, dx, contrast, bright = _nuisances(rng, n, grid)
    bg = sliding_window_view(background[0], (h, w), axis=(1, 2))  # (C, 2ph+1, 2pw+1, h, w)
    pat = sliding_window_view(patterns, (h, w), axis=(2, 3))  # (K, C, 2ph+1, 2pw+1, h, w)
    out = np.empty((n, c, h, w), dtype=np.uint8)
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        x = np.ascontiguousarray(bg[:, dy[lo:hi], dx[lo:hi]].transpose(1, 0, 2, 3)) * np.float32(BACKGROUND)
        x += np.einsum("mk,kcmhw->mchw", t[lo:hi] * np.float32(amp), pat[:, :, dy[lo:hi], dx[lo:hi]])
        out[lo:hi] = _finish(x, contrast[lo:hi], bright[lo:hi], rng)
    return out, t


def make_synthetic(shape: tuple[int, ...] = (3, 32, 32), num_classes: int = 10, n_train: int = 8000,
                   n_test: int = 2000, seed: int = 0, signal: float = 1.0, *, task: str = "classification",
                   target_dim: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): uint8 inputs (N, *shape) and int64 labels in [0, num_classes)
    (classification) or float32 targets [N] / [N, target_dim] (regression; num_classes is ignored).
    signal: the pattern's strength relative to the default (lower is harder; 1.0 = the module's measured
    defaults)."""
    if not 0 < signal <= 10:
        raise ValueError(f"signal: must be in (0, 10], got {signal}")
    if not 1 <= len(shape) <= 3 or any(int(d) < 1 for d in shape):
        raise ValueError(f"shape: must be (features,), (channels, length) or (channels, height, width) with every "
                         f"entry >= 1, got {tuple(shape)}")
    from edgestream.tasks import get_task

    regression = not get_task(task).labels
    if not regression and num_classes < 2:
        raise ValueError(f"num_classes: must be >= 2, got {num_classes}")
    if target_dim is not None and (isinstance(target_dim, bool) or not isinstance(target_dim, int) or target_dim < 1):
        raise ValueError(f"kwargs.target_dim: must be an integer >= 1, got {target_dim!r}")
    if n_train < 1 or n_test < 1:
        raise ValueError(f"n_train, n_test: must be >= 1, got {n_train}, {n_test}")
    shape = tuple(int(d) for d in shape)
    grid = grid_of(shape)
    amp = float(signal) * boost(shape)
    root = np.random.SeedSequence([seed, 0x5EED])
    t_seq, train_seq, test_seq = root.spawn(3)
    if regression:
        background, patterns = _patterns(np.random.default_rng(t_seq), target_dim or 1, grid)
        parts = [_regression_samples(np.random.default_rng(s), background, patterns, amp * CLASS_SIGNAL, n, grid)
                 for s, n in ((train_seq, n_train), (test_seq, n_test))]
        parts = [(x, t[:, 0] if target_dim is None else t) for x, t in parts]
    else:
        background, cls = _patterns(np.random.default_rng(t_seq), num_classes, grid)
        templates = (BACKGROUND * background + amp * CLASS_SIGNAL * cls).astype(np.float32)  # (K, C, hp, wp)
        parts = [_samples(np.random.default_rng(s), templates, n, grid) for s, n in ((train_seq, n_train),
                                                                                     (test_seq, n_test))]
    (x_tr, y_tr), (x_te, y_te) = parts
    return x_tr.reshape(n_train, *shape), y_tr, x_te.reshape(n_test, *shape), y_te
