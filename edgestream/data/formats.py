"""The dataset built-ins, registered in `edgestream.plugins.DATASETS` as ``edgestream.data.formats:<name>``,
and how any dataset entry's result becomes arrays.

Two calling conventions, told apart by the entry itself:

- a **built-in** (any function marked with `@builtin`, a user's too) is called as ``entry(spec)`` with
  the `DataSpec` (every ``data.*`` field, the task and the seed) and returns a `Loaded`;
- a **user factory** (``data.dataset: "pkg.mod:factory"`` or an entry point) is called as
  ``factory(**data.kwargs)`` and returns one of: ``(x_train, y_train, x_test, y_test)``; ``(x, y)``
  (split with a seeded ``data.test_fraction``, default 0.2); a dict with ``x``, ``y`` and optionally
  ``x_test``, ``y_test``; a map-style torch Dataset whose items are ``(x, y)`` (converted to arrays
  once); or ``(train_dataset, test_dataset)``. Arrays may be numpy arrays, torch tensors or lists.

Built-ins and the ``data.*`` fields they take (any other given field is refused with one line):

- ``digits``: scikit-learn's 8x8 digits, a stratified 80/20 split (no download).
- ``synthetic``: seeded data at ``data.shape`` (rank 1-3; synthetic.py), ``signal``, ``kwargs:
  {target_dim: K}`` (regression: a vector target of K values; default a scalar).
- ``cifar10``, ``cifar100`` (python-version batches), ``mnist`` (IDX files): ``root``.
- ``npz``: ``path``; arrays ``x``, ``y`` and, as the held-out split, ``x_test``, ``y_test`` when present
  (else a seeded ``test_fraction``). Read without pickle.
- ``folder``: ``root`` in ImageFolder layout ``root/<class>/*.png|jpg`` (or ``root/train/<class>/`` and
  ``root/test/<class>/``); uint8 (C, H, W), 1 channel when every image is greyscale, else RGB; every
  image must have the same size. Classes: the sorted folder names.
- ``csv``, ``parquet``: ``path``, ``target`` (a column; a list of columns = a vector regression target),
  ``features`` (default every other column but date/time ones), ``test_fraction``. Samples are (F,).
- ``windows``: sliding windows over a time series in a CSV or Parquet file: ``path``, ``target``,
  ``window``, ``stride`` (1), ``horizon`` (1), ``features`` (default every numeric column, the target's
  history included when horizon >= 1), ``test_fraction`` (the series' last rows are the test split).
  x = (features, window), y = the target ``horizon`` rows after the window's last row.

The held-out split, when an entry gives none, is seeded by the run's seed; for classification it is
stratified. The common checks (task vs targets, dtypes, class counts, n_train/n_test) are
edgestream.data.datasets.load_dataset's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edgestream.data.entry import (  # noqa: F401 - DataSpec .. split: also handed on from here (the docs' path)
    DEFAULT_TEST_FRACTION,
    FACTORY_FIELDS,
    OPTIONAL_FIELDS,
    DataSpec,
    Loaded,
    as_array,
    builtin,
    split,
)
from edgestream.data.synthetic import SYNTHETIC_DEFAULTS

# ---------------------------------------------------------------- dispatch


def _given(spec: DataSpec) -> list[str]:
    return [f for f in OPTIONAL_FIELDS if getattr(spec, f) not in (None, {}, [])]


def _check_fields(spec: DataSpec, takes: tuple[str, ...], requires: tuple[str, ...]) -> None:
    for f in _given(spec):
        if f not in takes:
            if f == "signal":
                raise ValueError(f"data.signal: only the synthetic dataset takes it (this is {spec.name!r})")
            allowed = ", ".join(takes) or "none of " + ", ".join(OPTIONAL_FIELDS)
            raise ValueError(f"data.{f}: dataset {spec.name!r} does not take it (it takes {allowed})")
    for f in requires:
        if getattr(spec, f) in (None, "", []):
            what = {"root": "the folder holding its files", "path": "the file to read",
                    "target": "the target column", "window": "samples per window"}[f]
            raise ValueError(f"data.{f}: required for dataset {spec.name!r} ({what})")


def to_arrays(spec: DataSpec) -> Loaded:
    """Resolve `spec.name` through plugins.DATASETS and run the entry (see the module doc)."""
    from edgestream.plugins import DATASETS

    entry = DATASETS.load(spec.name, "data.dataset")
    if getattr(entry, "takes_spec", False):
        _check_fields(spec, getattr(entry, "takes", ()), getattr(entry, "requires", ()))
        got = entry(spec)
        return got if isinstance(got, Loaded) else from_result(got, spec.name)
    _check_fields(spec, FACTORY_FIELDS, ())
    try:
        got = entry(**spec.kwargs)
    except Exception as exc:  # noqa: BLE001 - a user's factory may raise anything; report it on one line
        detail = " ".join(str(exc).split()) or type(exc).__name__
        field_ = "data.kwargs" if isinstance(exc, TypeError) and "argument" in detail else "data.dataset"
        raise ValueError(f"{field_}: dataset factory {spec.name!r} raised {type(exc).__name__}: {detail} "
                         f"(called with data.kwargs {spec.kwargs})") from None
    return from_result(got, spec.name)


def _is_map_dataset(v: Any) -> bool:
    return (hasattr(v, "__getitem__") and hasattr(v, "__len__") and not isinstance(v, (np.ndarray, list, tuple, dict))
            and not hasattr(v, "detach"))


def _from_items(ds: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    n = len(ds)
    if n == 0:
        raise ValueError(f"{what}: the dataset has no items")
    xs, ys = [], []
    for i in range(n):
        item = ds[i]
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"{what}: item {i} is a {type(item).__name__}; expected a pair (x, y)")
        xs.append(as_array(item[0], f"{what}: item {i} x"))
        ys.append(as_array(item[1], f"{what}: item {i} y"))
    shapes = {a.shape for a in xs}
    if len(shapes) > 1:
        raise ValueError(f"{what}: items have inputs of different shapes ({', '.join(map(str, sorted(shapes)[:3]))})")
    return np.stack(xs), np.stack(ys)


def from_result(got: Any, name: str) -> Loaded:
    """A user factory's result (see the module doc) as a `Loaded`; one line when it is none of them."""
    label = repr(name)
    src = Loaded(None, None, field="data.dataset", label=label)
    expected = ("expected (x_train, y_train, x_test, y_test), (x, y), a dict with x, y[, x_test, y_test], a map-style "
                "torch Dataset of (x, y) items or (train_dataset, test_dataset)")
    if isinstance(got, Loaded):
        return got
    if isinstance(got, dict):
        keys = set(got)
        if (not {"x", "y"} <= keys or not keys <= {"x", "y", "x_test", "y_test"}
                or ("x_test" in keys) != ("y_test" in keys)):
            raise ValueError(f"data.dataset: {label} returned a dict with keys {sorted(map(str, keys))}; {expected}")
        return Loaded(got["x"], got["y"], got.get("x_test"), got.get("y_test"), label=label)
    if _is_map_dataset(got):
        x, y = _from_items(got, src.what("dataset"))
        return Loaded(x, y, label=label)
    if isinstance(got, (tuple, list)) and len(got) == 2 and all(_is_map_dataset(g) for g in got):
        x, y = _from_items(got[0], src.what("train dataset"))
        xt, yt = _from_items(got[1], src.what("test dataset"))
        return Loaded(x, y, xt, yt, label=label)
    if isinstance(got, (tuple, list)) and len(got) in (2, 4):
        return Loaded(*got, label=label)
    shown = f"a {type(got).__name__}" + (f" of {len(got)}" if isinstance(got, (tuple, list)) else "")
    raise ValueError(f"data.dataset: {label} returned {shown}; {expected}")


# ---------------------------------------------------------------- the built-ins


@builtin()
def digits(spec: DataSpec) -> Loaded:
    """scikit-learn's 8x8 digits (1,797 samples), read from the file scikit-learn ships without importing it
    (scikit-learn's import, with scipy's, costs every process that loads a run's data about 2.5 s of CPU); a
    seeded stratified 80/20 split (`split`)."""
    import gzip
    from importlib.util import find_spec

    found = find_spec("sklearn")
    if found is None or not found.submodule_search_locations:
        raise ValueError("data.dataset: 'digits' is read from scikit-learn's copy, and scikit-learn is not installed "
                         "(pip install scikit-learn)")
    path = Path(next(iter(found.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float64)
    x = np.rint(table[:, :-1].reshape(-1, 1, 8, 8) * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)
    y = table[:, -1].astype(np.int64)
    return Loaded(*split(x, y, 0.2, spec.seed, stratify=True), num_classes=10, label="'digits'")


@builtin("signal", "kwargs")
def synthetic(spec: DataSpec) -> Loaded:
    from edgestream.data.synthetic import make_synthetic

    extra = sorted(set(spec.kwargs) - {"target_dim"})
    if extra:
        raise ValueError(f"data.kwargs: the synthetic dataset takes only target_dim (a regression target's "
                         f"length); got {', '.join(map(str, extra))}")
    target_dim = spec.kwargs.get("target_dim")
    if target_dim is not None and not spec.regression:
        raise ValueError("data.kwargs.target_dim: a vector target is for task 'regression' (this is classification)")
    shape = spec.shape if spec.shape is not None else SYNTHETIC_DEFAULTS["shape"]
    k = spec.num_classes if spec.num_classes is not None else SYNTHETIC_DEFAULTS["num_classes"]
    arrays = make_synthetic(
        shape, k, spec.n_train if spec.n_train is not None else SYNTHETIC_DEFAULTS["n_train"],
        spec.n_test if spec.n_test is not None else SYNTHETIC_DEFAULTS["n_test"], spec.seed,
        1.0 if spec.signal is None else float(spec.signal), task=spec.task, target_dim=target_dim)
    return Loaded(*arrays, num_classes=None if spec.regression else k, sized=True, label="'synthetic'")


def _cifar(variant: int) -> Callable[[DataSpec], Loaded]:
    @builtin(requires=("root",))
    def load(spec: DataSpec) -> Loaded:
        from edgestream.data.cifar import load_cifar

        return Loaded(*load_cifar(spec.root, variant), num_classes=variant, field="data.root",
                      label=repr(spec.root))

    load.__name__ = load.__qualname__ = f"cifar{variant}"
    return load


cifar10 = _cifar(10)
cifar100 = _cifar(100)


@builtin(requires=("root",))
def mnist(spec: DataSpec) -> Loaded:
    from edgestream.data.mnist import load_mnist

    return Loaded(*load_mnist(spec.root), num_classes=10, field="data.root", label=repr(spec.root))


def _file(spec: DataSpec, attr: str = "path") -> Path:
    p = Path(getattr(spec, attr)).expanduser()
    if not p.exists():
        raise ValueError(f"data.{attr}: {str(p)!r} does not exist")
    return p


def npz_arrays(p: Path, field: str, check: Callable[[set[str]], str | None]) -> dict[str, np.ndarray]:
    """Every array of the .npz file `p` (read without pickle); `check(names)` -> why they do not serve (or None).
    ValueError: one line starting with `field` and the file."""
    import zipfile

    label = repr(str(p))
    try:
        with np.load(p, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise ValueError("a single .npy array, not an .npz archive")
            problem = check(set(z.files))
            if problem:
                raise KeyError(f"has arrays {sorted(z.files)}; {problem}")
            return {k: z[k] for k in z.files}
    except KeyError as exc:
        raise ValueError(f"{field}: {label} {exc.args[0]}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        detail = " ".join(str(exc).split())
        if "allow_pickle" in detail:
            detail = "an array holds Python objects (stored with pickle); store arrays of numbers"
        raise ValueError(f"{field}: {label} is not a readable .npz file ({detail})") from None


@builtin("path", "test_fraction", requires=("path",))
def npz(spec: DataSpec) -> Loaded:
    p = _file(spec)
    arrays = npz_arrays(p, "data.path", lambda keys: "needs x and y (and x_test with y_test for a held-out split)"
                        if not {"x", "y"} <= keys or ("x_test" in keys) != ("y_test" in keys) else None)
    return Loaded(arrays["x"], arrays["y"], arrays.get("x_test"), arrays.get("y_test"), field="data.path",
                  label=repr(str(p)))


@builtin("test_fraction", requires=("root",))
def folder(spec: DataSpec) -> Loaded:
    from edgestream.data.imagefolder import read_image_folder

    return read_image_folder(spec.root)


@builtin("path", "target", "features", "test_fraction", requires=("path", "target"))
def csv(spec: DataSpec) -> Loaded:
    from edgestream.data.tables import read_rows

    return read_rows(spec, _file(spec), "csv")


@builtin("path", "target", "features", "test_fraction", requires=("path", "target"))
def parquet(spec: DataSpec) -> Loaded:
    from edgestream.data.tables import read_rows

    return read_rows(spec, _file(spec), "parquet")


@builtin("path", "target", "features", "window", "stride", "horizon", "test_fraction",
         requires=("path", "target", "window"))
def windows(spec: DataSpec) -> Loaded:
    from edgestream.data.tables import read_windows

    return read_windows(spec, _file(spec))
