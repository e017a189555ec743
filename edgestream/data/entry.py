"""What a dataset entry reads and hands back, and the array helpers every loader shares: the lowest layer of
edgestream.data's loaders (formats.py, tables.py, imagefolder.py, targets.py and datasets.py import it; it
imports none of them).

`DataSpec` (every ``data.*`` field, the task and the seed), `Loaded` (an entry's arrays and what it knows),
`builtin` (marks an entry taking the spec), `as_array`, the seeded held-out `split`, and the wire's input
dtypes (`WIRE_DTYPES`, `narrowest_int`). The calling conventions: edgestream.data.formats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgestream.data.wire import DTYPE_CODES

#: data.* fields that only some datasets take (data.root is accepted and ignored where unused)
OPTIONAL_FIELDS = ("path", "target", "features", "window", "stride", "horizon", "test_fraction", "kwargs", "signal")
#: what a user factory (import path / entry point) takes
FACTORY_FIELDS = ("kwargs", "test_fraction")
#: the held-out share when a dataset has no test split
DEFAULT_TEST_FRACTION = 0.2


@dataclass(frozen=True)
class DataSpec:
    """Everything a dataset entry may read: the ``data.*`` fields, the task and the run's seed."""

    name: str
    seed: int = 0
    task: str = "classification"
    root: str | None = None
    path: str | None = None
    target: str | list[str] | None = None
    features: list[str] | None = None
    window: int | None = None
    stride: int | None = None
    horizon: int | None = None
    test_fraction: float | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    shape: tuple[int, ...] | None = None
    num_classes: int | None = None
    n_train: int | None = None
    n_test: int | None = None
    signal: float | None = None

    @property
    def regression(self) -> bool:
        from edgestream.tasks import get_task

        return not get_task(self.task).labels

    @property
    def fraction(self) -> float:
        return DEFAULT_TEST_FRACTION if self.test_fraction is None else float(self.test_fraction)


@dataclass
class Loaded:
    """What a dataset entry produced: arrays (x_test None: split by load_dataset), and what it knows.

    num_classes: the dataset's own class count (None: from the labels); class_names: per index;
    sized: n_train/n_test already applied (synthetic); field/label: how error lines name the source
    ("data.path", "'a.npz'")."""

    x_train: Any
    y_train: Any
    x_test: Any = None
    y_test: Any = None
    num_classes: int | None = None
    class_names: tuple[str, ...] | None = None
    sized: bool = False
    field: str = "data.dataset"
    label: str = ""
    classes_from: str = ""  # where num_classes comes from, for the mismatch line (" (class folders)")

    def what(self, part: str) -> str:
        """The start of an error line about array `part`: "data.path: 'a.npz' y"."""
        return f"{self.field}: {self.label} {part}".replace(":  ", ": ")

    def about(self, part: str) -> str:
        """Array `part` inside a line: "y of 'a.npz'"."""
        return f"{part} of {self.label}" if self.label else part


def builtin(*takes: str, requires: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Mark `entry(spec: DataSpec) -> Loaded` as taking the spec; `takes`: the OPTIONAL_FIELDS it reads,
    `requires`: the fields it cannot do without."""

    def mark(fn: Callable) -> Callable:
        fn.takes_spec, fn.takes, fn.requires = True, tuple(takes), tuple(requires)  # type: ignore[attr-defined]
        return fn

    return mark

#: inputs of these dtypes travel as they are (the wire's dtypes)
WIRE_DTYPES = tuple(DTYPE_CODES.values())


def narrowest_int(lo: int, hi: int) -> np.dtype | None:
    """The smallest wire integer dtype holding [lo, hi], or None."""
    fits = [d for d in WIRE_DTYPES if d.kind in "iu" and np.iinfo(d).min <= lo and hi <= np.iinfo(d).max]
    return min(fits, key=lambda d: d.itemsize) if fits else None


# ---------------------------------------------------------------- arrays, splits


def as_array(v: Any, what: str) -> np.ndarray:
    """numpy view of an array-like (ndarray, torch tensor, list); object arrays refused."""
    if hasattr(v, "detach") and hasattr(v, "cpu"):  # a torch tensor
        v = v.detach().cpu().numpy()
    try:
        a = np.asarray(v)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what}: not an array ({' '.join(str(exc).split())})") from None
    if a.dtype == object:
        raise ValueError(f"{what}: holds Python objects ({type(v).__name__} of mixed or ragged items); give "
                         "arrays of numbers")
    return a


def split(x: np.ndarray, y: np.ndarray, fraction: float, seed: int, *, stratify: bool
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A seeded held-out split (x_train, y_train, x_test, y_test), about `fraction` of the samples in
    the test split (per class when `stratify`), original order kept within each."""
    n = len(y)
    if n < 2:
        raise ValueError(f"data.test_fraction: {n} sample(s) cannot be split into a train and a test split")
    rng = np.random.default_rng([int(seed), 0x5717])
    test = np.zeros(n, bool)
    if stratify:
        for c in np.unique(y):
            idx = np.flatnonzero(y == c)
            test[rng.permutation(idx)[:int(round(fraction * len(idx)))]] = True
    if not test.any() or test.all():
        test[:] = False
        test[rng.permutation(n)[:min(n - 1, max(1, int(round(fraction * n))))]] = True
    tr, te = np.flatnonzero(~test), np.flatnonzero(test)
    return np.ascontiguousarray(x[tr]), y[tr], np.ascontiguousarray(x[te]), y[te]
