"""`load_dataset(name, ...)` -> `Dataset`: inputs of any wire dtype and rank 1-3, class indices or float
targets, a held-out test split, and the train split's per-channel statistics.

`name` resolves through the one registry (`edgestream.plugins.DATASETS`): a built-in of
`edgestream.data.formats` (digits, synthetic, cifar10, cifar100, mnist, npz, folder, csv, parquet,
windows), an import path ``"pkg.mod:factory"`` or an entry point; what every entry may return and
which `data.*` fields it takes: edgestream.data.formats. This module then does what is common to all:
the inputs' dtype and rank, the task's targets (`targets.py`), the held-out split when the entry gave
none, `n_train` / `n_test`, the shape and class-count checks, and the statistics.

Inputs keep their dtype from disk to the wire (uint8 images stay uint8, float16 stays float16); they
become float32 only on the consumer, via `Dataset.normalize` / `Dataset.affine`:
``(x/255 - mean)/std`` for uint8, ``(x - mean)/std`` otherwise, per channel (a sample's first axis:
C of (C, H, W) or (C, T), each feature of (F,)). The test split never streams; it serves evaluation.

Every refusal is a ValueError of one line naming the field (``data.path: ...``, ``task: ...``).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from edgestream.data.entry import WIRE_DTYPES, as_array, narrowest_int
from edgestream.data.synthetic import SYNTHETIC_DEFAULTS  # noqa: F401 - handed on (load_dataset's doc names it)
from edgestream.data.wire import Affine

if TYPE_CHECKING:  # torch loads where a tensor is made (normalize): producers and `config validate` need none
    import torch

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split: inputs x of shape (N, *shape) (rank 1-3, any wire dtype, C-contiguous) and
    targets y: int64 class indices [N] in [0, num_classes) (`target_shape` None), or float32 targets
    [N] (`target_shape` (): a scalar) / [N, K] (`target_shape` (K,)), with num_classes 0.

    `mean` / `std` are per-channel statistics (channel = a sample's first axis) over the train split of
    the inputs' value scale: x/255 for uint8, x itself otherwise. Treat the arrays as read-only (a
    loaded dataset is shared by the config check and the run).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    shape: tuple[int, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    target_shape: tuple[int, ...] | None = None
    class_names: tuple[str, ...] | None = None  # what each class index stands for, when the data says
    _affine: dict = field(default_factory=dict, init=False, repr=False)

    @property
    def is_regression(self) -> bool:
        """Whether the targets are floats (not class indices)."""
        return self.target_shape is not None

    @property
    def affine(self) -> Affine:
        """The normalisation as an `Affine` per channel: scale 1/(255 std) for uint8 (1/std otherwise),
        bias -mean/std -- what the Kafka consumer applies while decoding and `normalize` applies."""
        got = self._affine.get("affine")
        if got is None:
            unit = 255.0 if self.x_train.dtype == np.uint8 else 1.0
            got = self._affine["affine"] = Affine(tuple(1.0 / (unit * s) for s in self.std),
                                                  tuple(-m / s for m, s in zip(self.mean, self.std, strict=True)))
        return got

    def _scale_bias(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        got = self._affine.get(device)
        if got is None:
            view = (-1, *[1] * (len(self.shape) - 1))
            scale, bias = (torch.tensor(v, dtype=torch.float32).view(view).to(device)
                           for v in (self.affine.scale, self.affine.bias))
            got = self._affine[device] = (scale, bias)
        return got

    def _check_input(self, shape: tuple[int, ...]) -> None:
        rank = len(self.shape)
        if len(shape) < rank or shape[len(shape) - rank] != self.shape[0]:
            lead = ", ".join(str(d) for d in ("B", self.shape[0], *["..."] * (rank - 1)))
            raise ValueError(f"x: expected ({lead}) or a single sample of shape {self.shape}, got {tuple(shape)}")

    def normalize(self, x: torch.Tensor | np.ndarray) -> torch.Tensor:
        """float32 normalised inputs (see `affine`) for raw values of shape (B, *shape) or `shape`.

        A tensor stays on its device; the input is never modified.
        """
        import torch

        rank = len(self.shape)
        self._check_input(tuple(x.shape))
        if isinstance(x, np.ndarray):
            # numpy path (the consumer's): single-threaded, no OpenMP pool contending with Kafka's threads
            return torch.from_numpy(self.affine(x.reshape(-1, *x.shape[-rank:])).reshape(x.shape))
        t = x.to(torch.float32)
        if t is x:
            t = t.clone()
        scale, bias = self._scale_bias(t.device)
        return t.mul_(scale).add_(bias)


def channel_stats(x: np.ndarray, chunk: int = 2048) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Exact per-channel mean and std of x/255 for uint8 (N, C, ...) (integer sums, chunked for speed).

    A constant channel gets std 1.0, so normalisation never divides by zero.
    """
    c = x.shape[1]
    axes = (0, *range(2, x.ndim))
    s = np.zeros(c, dtype=np.uint64)
    q = np.zeros(c, dtype=np.uint64)
    for lo in range(0, len(x), chunk):
        w = x[lo:lo + chunk].astype(np.uint32)
        s += w.sum(axis=axes, dtype=np.uint64)
        w *= w
        q += w.sum(axis=axes, dtype=np.uint64)
    n = x.size // c
    means, stds = [], []
    for sc, qc in zip(s.tolist(), q.tolist(), strict=True):
        var = (qc * n - sc * sc) / (n * n * 255.0**2)  # Python ints: exact up to the final division
        means.append(sc / (n * 255.0))
        stds.append(var**0.5 if var > 1e-12 else 1.0)
    return tuple(means), tuple(stds)


def _first_nonfinite(x: np.ndarray) -> int:
    return int(np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(axis=1))[0])


def value_stats(x: np.ndarray, what: str = "x_train", chunk_bytes: int = 8 << 20
                ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of x itself (any numeric dtype, (N, C, ...)), in float64, two chunked
    passes. A constant channel gets std 1.0; a NaN or infinite value is refused (ValueError naming the
    sample), since it would turn the model into NaN."""
    c = x.shape[1]
    axes = (0, *range(2, x.ndim))
    rows = max(1, chunk_bytes // max(1, x[:1].size * 8))
    n = x.size // c
    total = np.zeros(c)
    for lo in range(0, len(x), rows):
        total += x[lo:lo + rows].sum(axis=axes, dtype=np.float64)
    if not np.isfinite(total).all():
        raise ValueError(f"{what}: sample {_first_nonfinite(x)} holds NaN or infinite values" if x.dtype.kind == "f"
                         else f"{what}: the values overflow float64")
    mean = total / n
    sq = np.zeros(c)
    shape = (1, c) + (1,) * (x.ndim - 2)
    for lo in range(0, len(x), rows):
        d = x[lo:lo + rows].astype(np.float64) - mean.reshape(shape)
        sq += (d * d).sum(axis=axes)
    std = np.sqrt(sq / n)
    return tuple(float(m) for m in mean), tuple(float(s) if s > 1e-12 * max(1.0, abs(m)) else 1.0
                                                for m, s in zip(mean, std, strict=True))


def wire_inputs(x: Any, what: str) -> np.ndarray:
    """`x` as a C-contiguous array (N, *shape) of a wire dtype: rank 1-3 samples; bool -> uint8, integers
    the wire has no code for (uint16, uint32, ...) -> the narrowest wire integer holding their values;
    anything else refused (one line naming `what`)."""
    x = as_array(x, what)
    if x.ndim < 2 or x.ndim > 4:
        raise ValueError(f"{what}: samples of shape {x.shape[1:]} (array {x.shape}); each sample needs 1 to 3 axes: "
                         "(features,), (channels, length) or (channels, height, width)")
    if len(x) == 0 or 0 in x.shape:
        raise ValueError(f"{what}: no samples (array of shape {x.shape})")
    dt = x.dtype
    if dt == np.bool_:
        x = x.astype(np.uint8)
    elif dt.kind in "iu" and dt.newbyteorder("<") not in WIRE_DTYPES:
        lo, hi = int(x.min()), int(x.max())
        to = narrowest_int(lo, hi)
        if to is None:
            raise ValueError(f"{what}: {dt} values in [{lo}, {hi}] fit no integer dtype of the wire; convert them "
                             "to float")
        x = x.astype(to)
    elif dt.newbyteorder("<") not in WIRE_DTYPES:
        raise ValueError(f"{what}: dtype {dt} is not allowed; inputs must be numbers: "
                         f"{', '.join(str(d) for d in WIRE_DTYPES)} (or bool, other integers)")
    if x.dtype.byteorder == ">":
        x = x.astype(x.dtype.newbyteorder("<"))
    return np.ascontiguousarray(x)


def _subsample(x: np.ndarray, y: np.ndarray, n: int | None, rng: np.random.Generator,
               what: str) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random subset of n samples (original order kept); all when n is None."""
    if n is None or n == len(y):
        return x, y
    if not 1 <= n <= len(y):
        raise ValueError(f"data.{what}: {n} is not allowed; must be in 1..{len(y)} (the split's size)")
    keep = np.sort(rng.choice(len(y), size=n, replace=False))
    return np.ascontiguousarray(x[keep]), y[keep]


def _name_classes(got: Any) -> None:
    """String class labels (an npz's, a factory's) become indices of their sorted unique values."""
    from edgestream.data.targets import class_indices

    ys = [as_array(y, got.what(w)) for y, w in ((got.y_train, "y_train"), (got.y_test, "y_test")) if y is not None]
    if ys and all(y.dtype.kind in "US" for y in ys):
        mapped, names = class_indices(*ys)
        got.y_train = mapped[0]
        got.y_test = mapped[1] if len(mapped) > 1 else None
        got.num_classes, got.class_names = len(names), names
        got.classes_from = " (distinct labels)"


def load_dataset(name: str, root: str | None = None, *, seed: int = 0, task: str = "classification",
                 shape: tuple[int, ...] | None = None, num_classes: int | None = None,
                 n_train: int | None = None, n_test: int | None = None, signal: float | None = None,
                 path: str | None = None, target: str | list[str] | None = None,
                 features: list[str] | None = None, window: int | None = None, stride: int | None = None,
                 horizon: int | None = None, test_fraction: float | None = None,
                 kwargs: dict[str, Any] | None = None) -> Dataset:
    """Load dataset `name` (see the module doc and edgestream.data.formats) for `task`
    ("classification" or "regression").

    `shape`, `num_classes`, `n_train`, `n_test` size the synthetic dataset (defaults in
    SYNTHETIC_DEFAULTS) and `signal` sets its difficulty; for the other datasets `shape` and
    `num_classes` must be None or what the data has (num_classes may exceed the largest integer label
    of arrays that carry class indices themselves), and `n_train` / `n_test` take a seeded random subset
    of the split (None = all). The file formats' fields (`root`, `path`, `target`, `features`, `window`,
    `stride`, `horizon`, `test_fraction`, `kwargs`) are described in edgestream.data.formats.
    """
    from edgestream.data.entry import DataSpec, split
    from edgestream.data.formats import to_arrays
    from edgestream.data.targets import class_count, targets_of

    spec = DataSpec(name=name, seed=int(seed), task=task, root=root, path=path, target=target, features=features,
                    window=window, stride=stride, horizon=horizon, test_fraction=test_fraction,
                    kwargs=dict(kwargs or {}), shape=tuple(int(d) for d in shape) if shape is not None else None,
                    num_classes=num_classes, n_train=n_train, n_test=n_test, signal=signal)
    from edgestream.tasks import get_task

    regression = not get_task(task).labels  # float targets; a task with labels takes class indices
    if regression and num_classes is not None:
        raise ValueError(f"data.num_classes: task 'regression' has no classes (got {num_classes}); remove it")
    got = to_arrays(spec)
    if not regression:
        _name_classes(got)
    x_tr = wire_inputs(got.x_train, got.what("x_train"))
    y_tr = targets_of(got.y_train, regression, got.what("y_train"), len(x_tr), got.about("y_train"))
    if got.x_test is None:
        x_tr, y_tr, x_te, y_te = split(x_tr, y_tr, spec.fraction, spec.seed, stratify=not regression)
    else:
        x_te = wire_inputs(got.x_test, got.what("x_test"))
        y_te = targets_of(got.y_test, regression, got.what("y_test"), len(x_te), got.about("y_test"))
        if x_te.shape[1:] != x_tr.shape[1:] or x_te.dtype != x_tr.dtype:
            raise ValueError(f"{got.what('x_test')}: samples are {x_te.dtype}{x_te.shape[1:]} but the train split's "
                             f"are {x_tr.dtype}{x_tr.shape[1:]}")
        if x_te.dtype.kind == "f" and not np.isfinite(x_te).all():
            raise ValueError(f"{got.what('x_test')}: sample {_first_nonfinite(x_te)} holds NaN or infinite values")
        if y_te.shape[1:] != y_tr.shape[1:]:
            raise ValueError(f"{got.what('y_test')}: targets of shape {y_te.shape[1:]} but the train split's are "
                             f"{y_tr.shape[1:]}")
    k = 0 if regression else class_count(got, y_tr, y_te, num_classes, name)  # before n_train / n_test subsample
    if not got.sized:
        rng = np.random.default_rng([int(seed), 0xD5])
        x_tr, y_tr = _subsample(x_tr, y_tr, n_train, rng, "n_train")
        x_te, y_te = _subsample(x_te, y_te, n_test, rng, "n_test")
    shp = tuple(int(d) for d in x_tr.shape[1:])
    if shape is not None and tuple(shape) != shp:
        raise ValueError(f"data.shape: dataset {name!r} has samples of shape {list(shp)}, got {list(shape)}")
    mean, std = channel_stats(x_tr) if x_tr.dtype == np.uint8 else value_stats(x_tr, got.what("x_train"))
    return Dataset(name, x_tr, y_tr, x_te, y_te, int(k), shp, mean, std,
                   tuple(y_tr.shape[1:]) if regression else None, got.class_names)


#: id(owner) -> (weak reference to the owner, the arguments, the Dataset): see load_once
_ONCE: dict[int, tuple[Any, str, Dataset]] = {}


def load_once(owner: object, name: str, *args: Any, **kwargs: Any) -> Dataset:
    """`load_dataset(name, *args, **kwargs)`, loaded once per `owner` (a config object) and these
    arguments: `config validate` loads the dataset, and the run of the same config reuses it instead of
    reading the files again. Forgotten when the owner is."""
    key = repr((name, args, sorted(kwargs.items())))
    hit = _ONCE.get(id(owner))
    if hit is not None and hit[0]() is owner and hit[1] == key:
        return hit[2]
    ds = load_dataset(name, *args, **kwargs)
    ref = weakref.ref(owner, lambda _r, i=id(owner): _ONCE.pop(i, None))
    _ONCE[id(owner)] = (ref, key, ds)
    return ds
