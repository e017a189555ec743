"""Tables (CSV, Parquet; read with pyarrow) as datasets: rows of feature columns + target column(s)
(`read_rows`), or sliding windows over a time series (`read_windows`). See edgestream.data.formats for
the fields.

Inputs: a CSV's numbers carry no dtype, so its features become float32; a Parquet file's keep theirs
(the widest float among float columns, else the columns' common integer dtype -- the narrowest wire
integer holding the values when the wire has no code for it -- and bool -> uint8). Targets:
classification maps the target column's values (strings, integers, integral floats) to indices of
their sorted unique values; regression takes numeric columns as float32, a list of columns as a vector
target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edgestream.data.entry import WIRE_DTYPES, DataSpec, Loaded, narrowest_int
from edgestream.data.targets import class_indices

#: how many column names an error line lists
_SHOWN_COLUMNS = 8


def read_table(path: Path, kind: str) -> Any:
    """The file as a pyarrow Table; one line naming data.path when it cannot be read."""
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        import pyarrow.csv as pcsv

        return pcsv.read_csv(path)
    except ImportError:
        raise ValueError("data.path: reading CSV/Parquet needs pyarrow (pip install pyarrow)") from None
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ...
        detail = " ".join(str(exc).split())[:300]
        raise ValueError(f"data.path: {str(path)!r} is not a readable {kind.upper()} file ({detail})") from None


def _columns(table: Any) -> str:
    names = table.column_names
    more = f", ... ({len(names)} in all)" if len(names) > _SHOWN_COLUMNS else ""
    return ", ".join(names[:_SHOWN_COLUMNS]) + more


def _kind(col_type: Any) -> str:
    """"float", "int", "bool", "time" or "other" of a pyarrow type."""
    import pyarrow as pa

    if pa.types.is_floating(col_type):
        return "float"
    if pa.types.is_integer(col_type):
        return "int"
    if pa.types.is_boolean(col_type):
        return "bool"
    if pa.types.is_temporal(col_type):
        return "time"
    return "other"


def _column(table: Any, name: str, field: str, path: Path) -> np.ndarray:
    if name not in table.column_names:
        raise ValueError(f"{field}: no column {name!r} in {str(path)!r}; columns: {_columns(table)}")
    col = table.column(name)
    if col.null_count:
        raise ValueError(f"{field}: column {name!r} of {str(path)!r} has {col.null_count} missing values")
    return col.to_numpy()


def _targets(spec: DataSpec) -> list[str]:
    t = spec.target
    return [t] if isinstance(t, str) else list(t or [])


def _feature_names(spec: DataSpec, table: Any, path: Path, *, keep_targets: bool) -> list[str]:
    targets = _targets(spec)
    if spec.features is not None:
        names = list(spec.features)
        if not names:
            raise ValueError("data.features: empty; list the input columns (or leave it out: every other column)")
    else:
        names = [n for n, t in zip(table.column_names, table.schema.types, strict=True)
                 if (keep_targets or n not in targets) and _kind(t) != "time"]
        if not names:
            raise ValueError(f"data.features: {str(path)!r} has no feature columns besides the target; columns: "
                             f"{_columns(table)}")
    for n in names:
        if n not in table.column_names:
            raise ValueError(f"data.features: no column {n!r} in {str(path)!r}; columns: {_columns(table)}")
        kind = _kind(table.schema.field(n).type)
        if kind not in ("float", "int", "bool"):
            raise ValueError(f"data.features: column {n!r} of {str(path)!r} is not numeric "
                             f"({table.schema.field(n).type}); list numeric columns in data.features")
    return names


def features_matrix(table: Any, names: list[str], path: Path, kind: str) -> np.ndarray:
    """(rows, len(names)) of the feature columns in one dtype (see the module doc)."""
    cols = [_column(table, n, "data.features", path) for n in names]
    if kind == "csv":
        return np.ascontiguousarray(np.stack(cols).astype(np.float32, copy=False).T)
    floats = [c.dtype for c in cols if c.dtype.kind == "f"]
    if floats:
        dt = max(floats, key=lambda d: d.itemsize)
    elif all(c.dtype.kind == "b" for c in cols):
        dt = np.dtype(np.uint8)
    else:
        dt = np.result_type(*(c.dtype for c in cols if c.dtype.kind != "b"))
        if dt.newbyteorder("<") not in WIRE_DTYPES:
            lo, hi = min(int(c.min()) for c in cols), max(int(c.max()) for c in cols)
            dt = narrowest_int(lo, hi) or np.dtype(np.float64)
    return np.ascontiguousarray(np.stack(cols).astype(dt, copy=False).T)  # (F, rows) then one transposing copy


def targets_column(spec: DataSpec, table: Any, path: Path) -> tuple[np.ndarray, tuple[str, ...] | None]:
    """The target column(s): class indices + class names (classification), or float32 values."""
    names = _targets(spec)
    if not spec.regression:
        if len(names) != 1:
            raise ValueError(f"data.target: task 'classification' needs one target column, got {names}; a list of "
                             "columns is a vector target (task: regression)")
        col = _column(table, names[0], "data.target", path)
        if col.dtype.kind == "f" and (~np.isfinite(col) | (col != np.round(col))).any():
            bad = col[~np.isfinite(col) | (col != np.round(col))][0]
            raise ValueError(f"task: 'classification' needs class labels, but data.target {names[0]!r} holds "
                             f"non-integer numbers (e.g. {bad!r}); use task: regression")
        (y,), classes = class_indices(col)
        return y, classes
    cols = []
    for n in names:
        col = _column(table, n, "data.target", path)
        if col.dtype.kind not in "fiub":
            raise ValueError(f"data.target: column {n!r} of {str(path)!r} is not numeric "
                             f"({table.schema.field(n).type}); task 'regression' needs numbers")
        cols.append(col.astype(np.float32))
    y = cols[0] if isinstance(spec.target, str) else np.column_stack(cols)
    return np.ascontiguousarray(y), None


def _loaded(x: Any, y: Any, xt: Any, yt: Any, classes: tuple[str, ...] | None, path: Path) -> Loaded:
    return Loaded(x, y, xt, yt, num_classes=None if classes is None else len(classes), class_names=classes,
                  field="data.path", label=repr(str(path)), classes_from=" (distinct values of data.target)")


def read_rows(spec: DataSpec, path: Path, kind: str) -> Loaded:
    """csv / parquet: one sample per row, x = the feature columns (F,), y = the target column(s)."""
    table = read_table(path, kind)
    for n in _targets(spec):
        if spec.features is not None and n in spec.features:
            raise ValueError(f"data.features: lists the target column {n!r}; a target must not be an input")
    names = _feature_names(spec, table, path, keep_targets=False)
    y, classes = targets_column(spec, table, path)
    x = features_matrix(table, names, path, kind)
    return _loaded(x, y, None, None, classes, path)


def read_windows(spec: DataSpec, path: Path) -> Loaded:
    """windows: x = (features, window) of consecutive rows, y = the target `horizon` rows after the
    window's last row; the last test_fraction of the rows make the test split (no window spans both)."""
    from numpy.lib.stride_tricks import sliding_window_view

    kind = "parquet" if path.suffix.lower() in (".parquet", ".pq") else "csv"
    table = read_table(path, kind)
    w, stride = int(spec.window), int(spec.stride or 1)
    h = 1 if spec.horizon is None else int(spec.horizon)
    names = _feature_names(spec, table, path, keep_targets=h >= 1)
    if h == 0 and spec.features is not None and any(n in spec.features for n in _targets(spec)):
        raise ValueError("data.features: with data.horizon 0 the target is the window's last row; it must not be "
                         "an input too")
    y_all, classes = targets_column(spec, table, path)
    x_all = features_matrix(table, names, path, kind)
    rows = len(x_all)
    cut = rows - int(round(rows * spec.fraction))
    parts = []
    for what, lo, hi in (("train", 0, cut), ("test", cut, rows)):
        n = (hi - lo - w - h) // stride + 1 if hi - lo >= w + h else 0
        if n < 1:
            raise ValueError(f"data.window: the {what} rows of {str(path)!r} ({hi - lo} of {rows}, test_fraction "
                             f"{spec.fraction:g}) hold no window of {w} rows + horizon {h}; need >= {w + h} rows")
        starts = np.arange(n) * stride
        view = sliding_window_view(x_all[lo:hi], w, axis=0)  # (rows - w + 1, features, w)
        parts += [np.ascontiguousarray(view[starts]), y_all[lo:hi][starts + w - 1 + h]]
    return _loaded(*parts, classes, path)
