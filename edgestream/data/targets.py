"""The task's targets: class indices for classification, float32 values for regression, and the class
count. The task must agree with the targets, else one line naming `task` (regression with integer class
labels, classification with non-integer numbers or vector targets)."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgestream.data.entry import as_array


def class_indices(*columns: np.ndarray) -> tuple[list[np.ndarray], tuple[str, ...]]:
    """Class indices of label values (strings, integers, integral floats), mapped jointly over
    `columns` (the splits) to positions in their sorted unique values; returns (indices per column,
    class names)."""
    joined = np.concatenate([np.asarray(c) for c in columns])
    names, inverse = np.unique(joined, return_inverse=True)
    out, lo = [], 0
    for c in columns:
        out.append(inverse[lo:lo + len(c)].astype(np.int64))
        lo += len(c)
    return out, tuple(str(v.item() if hasattr(v, "item") else v) for v in names)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask.reshape(len(mask), -1).any(axis=1))[0])


def targets_of(y: Any, regression: bool, what: str, n: int, about: str = "") -> np.ndarray:
    """`y` as the task's targets for `n` samples: int64 [n] class indices, or float32 [n] / [n, K].

    what: the line's start naming the source ("data.path: 'a.npz' y"); about: the same for the middle of
    a `task:` line ("y of 'a.npz'")."""
    about = about or what
    y = as_array(y, what)
    if len(y) != n or y.ndim == 0:
        raise ValueError(f"{what}: {len(y) if y.ndim else 0} targets for {n} samples")
    if regression:
        if y.dtype.kind in "iub":
            raise ValueError(f"task: 'regression' needs float targets, but {about} holds {y.dtype} values (class "
                             "labels?); use task: classification, or give float targets")
        if y.dtype.kind != "f":
            raise ValueError(f"task: 'regression' needs float targets, but {about} holds {y.dtype} values")
        if y.ndim > 2:
            raise ValueError(f"{what}: targets of shape {y.shape[1:]} per sample; a regression target is a scalar "
                             "or a vector (K,)")
        y = np.ascontiguousarray(y, dtype=np.float32)
        bad = ~np.isfinite(y)
        if bad.any():
            raise ValueError(f"{what}: target {_first_bad(bad)} is NaN or infinite (or too large for float32)")
        return y
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"task: 'classification' needs one class index per sample, but {about} has targets of "
                         f"shape {y.shape[1:]}; vector targets need task: regression")
    if y.dtype.kind == "f":
        bad = ~np.isfinite(y) | (y != np.round(y))
        if bad.any():
            i = _first_bad(bad)
            raise ValueError(f"task: 'classification' needs class labels, but {about} holds non-integer numbers "
                             f"(target {i} is {y[i]!r}); use task: regression")
    elif y.dtype.kind not in "iub":
        raise ValueError(f"{what}: class labels of dtype {y.dtype}; give integers 0..K-1 (or strings from a "
                         "table, which are mapped to indices)")
    y = y.astype(np.int64)
    if len(y) and y.min() < 0:
        raise ValueError(f"{what}: class labels must be indices 0..K-1, got {int(y.min())} (target "
                         f"{int(np.argmin(y))})")
    return y


def class_count(got: Any, y_train: np.ndarray, y_test: np.ndarray, num_classes: int | None, name: str) -> int:
    """The number of classes: the dataset's own (`got.num_classes`: a fixed dataset, class folders, a
    table's distinct values), else data.num_classes, else the largest label + 1. One line when they
    disagree."""
    hi = int(max(y_train.max(initial=-1), y_test.max(initial=-1))) + 1
    fixed = got.num_classes
    if fixed is not None:
        if hi > fixed:
            raise ValueError(f"{got.what('y')}: labels outside 0..{fixed - 1}: up to {hi - 1}")
        if num_classes is not None and num_classes != fixed:
            raise ValueError(f"data.num_classes: dataset {name!r} has {fixed} classes{got.classes_from}, got "
                             f"{num_classes}")
        return int(fixed)
    if num_classes is not None:
        if num_classes < hi:
            raise ValueError(f"data.num_classes: {num_classes} is not allowed; the labels of {got.about('y')} go up "
                             f"to {hi - 1}, so it must be >= {hi}")
        return int(num_classes)
    if hi < 2:
        raise ValueError(f"{got.what('y')}: every label is {max(hi - 1, 0)}; classification needs >= 2 classes "
                         "(or set data.num_classes)")
    return hi
