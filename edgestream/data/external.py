"""The `Dataset` of a run on external streams (`streams.source: external`): no train split (the records are the
training data), the samples' shape and targets from the config (`data.shape`, `data.num_classes` or
`task: regression` with `data.target_dim`), and the evaluation split from `eval.path` (an .npz: x, y, or
x_test, y_test) or empty (`eval.holdout`: the evaluator collects the held-out records; edgestream.consumers.holdout).

Records are used as they are: float32 inputs, no normalisation (mean 0, std 1 per channel), so a file's x must
be in the records' units. Every refusal is one line naming the field.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgestream.data.datasets import Dataset
from edgestream.data.targets import targets_of


def external_dataset(name: str, shape: tuple[int, ...], num_classes: int, target_shape: tuple[int, ...] | None,
                     eval_path: str | None) -> Dataset:
    """The spec-only Dataset of external streams: inputs of `shape`, class indices in [0, num_classes)
    (`target_shape` None) or float targets of `target_shape` (num_classes 0), the eval split from `eval_path`
    (None: empty). ValueError: one line naming the field."""
    shape = tuple(int(v) for v in shape)
    labels = target_shape is None
    x = np.zeros((0, *shape), np.float32)
    y = np.zeros(0, np.int64) if labels else np.zeros((0, *target_shape), np.float32)
    x_test, y_test = x, y
    if eval_path is not None:
        x_test, y_test = eval_file(eval_path, shape, num_classes, target_shape)
    return Dataset(name, x, y, x_test, y_test, num_classes if labels else 0, shape,
                   (0.0,) * shape[0], (1.0,) * shape[0], target_shape)


def eval_file(path: str, shape: tuple[int, ...], num_classes: int, target_shape: tuple[int, ...] | None
              ) -> tuple[np.ndarray, np.ndarray]:
    """(x float32 (N, *shape), targets) of an .npz evaluation file (arrays x, y or x_test, y_test; no pickle),
    checked against the run's shape and targets."""
    p = Path(path).expanduser()
    label = repr(str(p))
    if not p.is_file():
        raise ValueError(f"eval.path: {label} does not exist")
    from edgestream.data.formats import npz_arrays

    arrays = npz_arrays(p, "eval.path", lambda keys: None if {"x", "y"} <= keys or {"x_test", "y_test"} <= keys
                        else "needs x and y (or x_test and y_test)")
    x, y = (arrays["x_test"], arrays["y_test"]) if {"x_test", "y_test"} <= set(arrays) else (arrays["x"], arrays["y"])
    if x.dtype.kind not in "iuf" or x.ndim < 1:
        raise ValueError(f"eval.path: {label} x holds {x.dtype} values; must be numbers")
    if tuple(x.shape[1:]) != shape:
        raise ValueError(f"eval.path: {label} x has samples of shape {tuple(x.shape[1:])}; data.shape is "
                         f"{list(shape)}")
    if len(x) == 0:
        raise ValueError(f"eval.path: {label} x has no samples")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        raise ValueError(f"eval.path: {label} x holds NaN or infinite values")
    y = targets_of(y, target_shape is not None, f"eval.path: {label} y", len(x), f"y of {label}")
    if target_shape is None:
        if len(y) and int(y.max()) >= num_classes:
            raise ValueError(f"eval.path: {label} y has class {int(y.max())}; data.num_classes is {num_classes} "
                             f"(classes 0..{num_classes - 1})")
    elif tuple(y.shape[1:]) != target_shape:
        raise ValueError(f"eval.path: {label} y has targets of shape {tuple(y.shape[1:])}; the run's are "
                         f"{target_shape} (data.target_dim)")
    return x, y
