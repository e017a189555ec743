"""The dataset registry: `load_dataset(name, root, ...)` -> `Dataset` (uint8 images + int64 labels).

Images stay uint8 N x C x H x W from disk to the wire; they become float only on the consumer, via
`Dataset.normalize` ((x/255 - mean) / std per channel, with the train split's statistics). The test
split is held out: it never streams and serves evaluation only.

Datasets: `digits` (scikit-learn's bundled 8x8 digits, no download), `synthetic` (seeded
class-conditional images, see synthetic.py), `cifar10` / `cifar100` (python-version batch files under
`root`), `mnist` (IDX files under `root`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from edgestream.data.wire import Affine

DATASETS = ("digits", "synthetic", "cifar10", "cifar100", "mnist")

#: the fixed (shape, num_classes) of the file-backed datasets; synthetic is configurable.
NATIVE: dict[str, tuple[tuple[int, int, int], int]] = {
    "digits": ((1, 8, 8), 10),
    "cifar10": ((3, 32, 32), 10),
    "cifar100": ((3, 32, 32), 100),
    "mnist": ((1, 28, 28), 10),
}
SYNTHETIC_DEFAULTS = {"shape": (3, 32, 32), "num_classes": 10, "n_train": 8000, "n_test": 2000}

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split of uint8 images (N x C x H x W, C-contiguous) with int64 labels in [0, num_classes).

    `mean` / `std` are per-channel statistics of x/255 over the train split.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    shape: tuple[int, int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    _affine: dict = field(default_factory=dict, init=False, repr=False)

    @property
    def affine(self) -> Affine:
        """The normalisation as an `Affine` (scale 1/(255 std), bias -mean/std per channel): what the
        Kafka consumer applies while decoding, and what `normalize` applies to tensors."""
        got = self._affine.get("affine")
        if got is None:
            got = self._affine["affine"] = Affine(tuple(1.0 / (255.0 * s) for s in self.std),
                                                  tuple(-m / s for m, s in zip(self.mean, self.std, strict=True)))
        return got

    def _scale_bias(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        got = self._affine.get(device)
        if got is None:
            scale, bias = (torch.tensor(v, dtype=torch.float32).view(-1, 1, 1).to(device)
                           for v in (self.affine.scale, self.affine.bias))
            got = self._affine[device] = (scale, bias)
        return got

    def normalize(self, x: torch.Tensor | np.ndarray) -> torch.Tensor:
        """float32 (x/255 - mean)/std per channel, for raw 0..255 values of shape (B, C, H, W) or (C, H, W).

        A tensor stays on its device; the input is never modified.
        """
        if isinstance(x, np.ndarray):
            # numpy path (the consumer's): single-threaded, no OpenMP pool contending with Kafka's threads
            if x.ndim < 3 or x.shape[-3] != self.shape[0]:
                raise ValueError(f"x: expected (B, {self.shape[0]}, H, W) or ({self.shape[0]}, H, W), "
                                 f"got {tuple(x.shape)}")
            return torch.from_numpy(self.affine(x.reshape(-1, *x.shape[-3:])).reshape(x.shape))
        t = x.to(torch.float32)
        if t is x:
            t = t.clone()
        if t.dim() < 3 or t.shape[-3] != self.shape[0]:
            raise ValueError(f"x: expected (B, {self.shape[0]}, H, W) or ({self.shape[0]}, H, W), "
                             f"got {tuple(t.shape)}")
        scale, bias = self._scale_bias(t.device)
        return t.mul_(scale).add_(bias)


def channel_stats(x: np.ndarray, chunk: int = 2048) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Exact per-channel mean and std of x/255 for uint8 N x C x H x W (integer sums, chunked for speed).

    A constant channel gets std 1.0, so normalisation never divides by zero.
    """
    c = x.shape[1]
    s = np.zeros(c, dtype=np.uint64)
    q = np.zeros(c, dtype=np.uint64)
    for lo in range(0, len(x), chunk):
        w = x[lo:lo + chunk].astype(np.uint32)
        s += w.sum(axis=(0, 2, 3), dtype=np.uint64)
        w *= w
        q += w.sum(axis=(0, 2, 3), dtype=np.uint64)
    n = x.size // c
    means, stds = [], []
    for sc, qc in zip(s.tolist(), q.tolist(), strict=True):
        var = (qc * n - sc * sc) / (n * n * 255.0**2)  # Python ints: exact up to the final division
        means.append(sc / (n * 255.0))
        stds.append(var**0.5 if var > 1e-12 else 1.0)
    return tuple(means), tuple(stds)


def _digits(seed: int) -> Arrays:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = np.rint(bunch.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)[:, None]
    y = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, stratify=y, random_state=seed)
    return np.ascontiguousarray(x_tr), y_tr, np.ascontiguousarray(x_te), y_te


def _cifar(variant: int) -> Callable[[str], Arrays]:
    def load(root: str) -> Arrays:
        from edgestream.data.cifar import load_cifar

        return load_cifar(root, variant)

    return load


def _mnist(root: str) -> Arrays:
    from edgestream.data.mnist import load_mnist

    return load_mnist(root)


_FILE_LOADERS: dict[str, Callable[[str], Arrays]] = {
    "cifar10": _cifar(10), "cifar100": _cifar(100), "mnist": _mnist,
}


def _subsample(x: np.ndarray, y: np.ndarray, n: int | None, rng: np.random.Generator,
               what: str) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random subset of n samples (original order kept); all when n is None."""
    if n is None or n == len(y):
        return x, y
    if not 1 <= n <= len(y):
        raise ValueError(f"{what}: must be in 1..{len(y)} (the split's size), got {n}")
    keep = np.sort(rng.choice(len(y), size=n, replace=False))
    return np.ascontiguousarray(x[keep]), y[keep]


def load_dataset(name: str, root: str | None = None, *, seed: int = 0, shape: tuple[int, ...] | None = None,
                 num_classes: int | None = None, n_train: int | None = None,
                 n_test: int | None = None, signal: float | None = None) -> Dataset:
    """Load dataset `name` (one of DATASETS).

    `shape`, `num_classes`, `n_train`, `n_test` size the synthetic dataset (defaults in
    SYNTHETIC_DEFAULTS) and `signal` sets its difficulty (class-pattern strength, 1.0 by default; 0.5 with
    50,000 samples is the large-batch task: cnn-small learns it over several epochs). For the other
    datasets `shape` / `num_classes` must be None or their native
    values, and `n_train` / `n_test` take a seeded random subset of the split (None = all).
    `root` is required for cifar10, cifar100 and mnist.
    """
    if name not in DATASETS:
        raise ValueError(f"name: unknown dataset {name!r}; allowed: {', '.join(DATASETS)}")
    if name == "synthetic":
        from edgestream.data.synthetic import make_synthetic

        shp = tuple(shape) if shape is not None else SYNTHETIC_DEFAULTS["shape"]
        if len(shp) != 3:
            raise ValueError(f"shape: must be (channels, height, width), got {shape}")
        k = num_classes if num_classes is not None else SYNTHETIC_DEFAULTS["num_classes"]
        x_tr, y_tr, x_te, y_te = make_synthetic(
            shp, k, n_train if n_train is not None else SYNTHETIC_DEFAULTS["n_train"],
            n_test if n_test is not None else SYNTHETIC_DEFAULTS["n_test"], seed,
            1.0 if signal is None else float(signal))
    else:
        if signal is not None:
            raise ValueError(f"signal: only the synthetic dataset takes it (this is {name!r})")
        native_shape, k = NATIVE[name]
        if shape is not None and tuple(shape) != native_shape:
            raise ValueError(f"shape: dataset {name!r} has fixed shape {native_shape}, got {tuple(shape)}")
        if num_classes is not None and num_classes != k:
            raise ValueError(f"num_classes: dataset {name!r} has {k} classes, got {num_classes}")
        if name == "digits":
            x_tr, y_tr, x_te, y_te = _digits(seed)
        else:
            if not root:
                raise ValueError(f"root: required for dataset {name!r} (the folder holding its files)")
            x_tr, y_tr, x_te, y_te = _FILE_LOADERS[name](root)
        rng = np.random.default_rng([seed, 0xD5])
        x_tr, y_tr = _subsample(x_tr, y_tr, n_train, rng, "n_train")
        x_te, y_te = _subsample(x_te, y_te, n_test, rng, "n_test")
    for what, y in (("train", y_tr), ("test", y_te)):
        if len(y) and (y.min() < 0 or y.max() >= k):
            raise ValueError(f"{name} {what} labels outside 0..{k - 1}: [{y.min()}, {y.max()}]")
    mean, std = channel_stats(x_tr)
    shp3 = tuple(int(d) for d in x_tr.shape[1:])
    return Dataset(name, x_tr, y_tr.astype(np.int64, copy=False), x_te, y_te.astype(np.int64, copy=False),
                   int(k), shp3, mean, std)  # type: ignore[arg-type]
