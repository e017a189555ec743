"""The dataset formats users bring (edgestream.data.formats): npz, csv, parquet, windows over a time series,
an ImageFolder of PNGs, and a factory by import path -- written here into tmp_path. Shapes, dtypes (kept
as given), splits (held out or seeded), targets (class indices 2-37, float scalars and vectors), and every
refusal's one line; `config validate` and the run load the same way."""

from __future__ import annotations

import tempfile
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.config import ConfigError, load_config, validate_dict
from edgestream.data import load_dataset, partition_indices
from edgestream.data.datasets import load_once
from edgestream.data.wire import DTYPE_CODES
from edgestream.runner.plan import PlanError, RunPlan


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


def refuse(pattern: str, **kw) -> str:
    with pytest.raises(ValueError, match=pattern) as exc:
        load_dataset(**kw)
    return one_line(exc)


def _npz(path: Path, **arrays) -> str:
    np.savez(path, **arrays)
    return str(path)


# ----------------------------------------------------------------------------- npz


def test_npz_with_a_held_out_split_keeps_dtype_and_arrays(tmp_path):
    rng = np.random.default_rng(0)
    x, xt = rng.random((50, 3, 4, 5)).astype(np.float16), rng.random((12, 3, 4, 5)).astype(np.float16)
    y, yt = rng.integers(0, 7, 50), rng.integers(0, 7, 12)
    ds = load_dataset("npz", path=_npz(tmp_path / "d.npz", x=x, y=y, x_test=xt, y_test=yt))
    assert ds.x_train.dtype == np.float16 and ds.shape == (3, 4, 5) and ds.num_classes == int(max(y.max(), yt.max())) + 1
    np.testing.assert_array_equal(ds.x_train, x)
    np.testing.assert_array_equal(ds.x_test, xt)
    assert ds.y_train.dtype == np.int64 and ds.target_shape is None and not ds.is_regression
    assert len(ds.mean) == len(ds.std) == 3
    f = x.astype(np.float64)
    np.testing.assert_allclose(ds.mean, f.mean(axis=(0, 2, 3)), rtol=1e-9)
    np.testing.assert_allclose(ds.std, f.std(axis=(0, 2, 3)), rtol=1e-6)
    z = ds.normalize(ds.x_train)
    assert z.dtype == torch.float32
    np.testing.assert_allclose(z.mean(dim=(0, 2, 3)).numpy(), 0, atol=1e-3)
    np.testing.assert_allclose(ds.affine(ds.x_train[:8]), z[:8].numpy(), rtol=1e-5, atol=1e-5)


def test_npz_without_test_split_is_a_seeded_stratified_fraction(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 255, (200, 16), dtype=np.uint8)
    y = np.repeat(np.arange(4), 50)
    path = _npz(tmp_path / "d.npz", x=x, y=y)
    ds = load_dataset("npz", path=path, seed=3)
    assert (len(ds.y_train), len(ds.y_test)) == (160, 40) and ds.x_train.dtype == np.uint8 and ds.shape == (16,)
    assert np.bincount(ds.y_test).tolist() == [10, 10, 10, 10]  # stratified
    again = load_dataset("npz", path=path, seed=3)
    np.testing.assert_array_equal(again.x_test, ds.x_test)
    assert not np.array_equal(load_dataset("npz", path=path, seed=4).y_train, ds.y_train) or \
        not np.array_equal(load_dataset("npz", path=path, seed=4).x_train, ds.x_train)
    ds = load_dataset("npz", path=path, test_fraction=0.5)
    assert len(ds.y_test) == 100
    # every sample is in exactly one split
    rows = {r.tobytes() for r in np.concatenate([ds.x_train, ds.x_test])}
    assert rows == {r.tobytes() for r in x}


def test_npz_regression_scalar_and_vector_targets(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(60, 2, 10)).astype(np.float32)
    ds = load_dataset("npz", path=_npz(tmp_path / "s.npz", x=x, y=x.sum(axis=(1, 2))), task="regression")
    assert ds.is_regression and ds.target_shape == () and ds.num_classes == 0 and ds.y_train.dtype == np.float32
    assert ds.x_train.dtype == np.float32 and ds.shape == (2, 10)
    ds = load_dataset("npz", path=_npz(tmp_path / "v.npz", x=x, y=x[:, :, 0].astype(np.float64)), task="regression")
    assert ds.target_shape == (2,) and ds.y_train.shape == (48, 2) and ds.y_train.dtype == np.float32


def test_npz_integer_inputs_travel_as_a_wire_integer(tmp_path):
    x = np.arange(40 * 3, dtype=np.int64).reshape(40, 3)
    ds = load_dataset("npz", path=_npz(tmp_path / "i.npz", x=x, y=np.arange(40) % 2))
    assert ds.x_train.dtype == (np.int64 if np.dtype("<i8") in DTYPE_CODES.values() else np.uint8)
    ds = load_dataset("npz", path=_npz(tmp_path / "u.npz", x=(x * 300).astype(np.uint16), y=np.arange(40) % 2))
    assert ds.x_train.dtype == np.int32  # uint16 has no wire code: the narrowest wire integer holding 0..35700
    ds = load_dataset("npz", path=_npz(tmp_path / "i16.npz", x=x.astype(np.int16), y=np.arange(40) % 2))
    assert ds.x_train.dtype == np.int16
    ds = load_dataset("npz", path=_npz(tmp_path / "b.npz", x=x > 50, y=np.arange(40) % 2))
    assert ds.x_train.dtype == np.uint8
    ds = load_dataset("npz", path=_npz(tmp_path / "s.npz", x=x.astype(np.float32), y=np.array(["cat", "dog"] * 20)))
    assert ds.num_classes == 2 and ds.class_names == ("cat", "dog")


@pytest.mark.parametrize(("arrays", "kw", "pattern"), [
    ({"x": np.zeros((4, 2))}, {}, r"^data\.path: '.*' has arrays \['x'\]; needs x and y"),
    ({"x": np.zeros((4, 2)), "y": np.zeros(4), "x_test": np.zeros((2, 2))}, {}, r"needs x and y \(and x_test with y_test"),
    ({"x": np.zeros((4, 2)), "y": np.array([0, 1, 0.5, 1])}, {},
     r"^task: 'classification' needs class labels, but y_train of '.*' holds non-integer numbers \(target 2 is"),
    ({"x": np.zeros((4, 2)), "y": np.array([0, 1, 2, 1])}, {"task": "regression"},
     r"^task: 'regression' needs float targets, but y_train of '.*' holds int64 values \(class labels\?\)"),
    ({"x": np.zeros((10, 2)), "y": np.arange(10)}, {"num_classes": 4},
     r"^data\.num_classes: 4 is not allowed; the labels of y of '.*' go up to 9, so it must be >= 10$"),
    ({"x": np.zeros((4, 2)), "y": np.array([0, -1, 1, 0])}, {}, r"^data\.path: '.*' y_train: class labels must be "),
    ({"x": np.zeros((4, 1, 2, 2, 2)), "y": np.zeros(4, int)}, {}, r"^data\.path: '.*' x_train: samples of shape"),
    ({"x": np.zeros(4), "y": np.zeros(4, int)}, {}, r"each sample needs 1 to 3 axes"),
    ({"x": np.zeros((4, 2)), "y": np.zeros(5, int)}, {}, r"^data\.path: '.*' y_train: 5 targets for 4 samples$"),
    ({"x": np.zeros((4, 2), complex), "y": np.zeros(4, int)}, {}, r"x_train: dtype complex128 is not allowed"),
    ({"x": np.array([[0.0, np.nan]] * 4), "y": np.arange(4) % 2}, {}, r"x_train: sample \d holds NaN or infinite"),
    ({"x": np.zeros((4, 2)), "y": np.array([0.0, np.inf, 1, 2])}, {"task": "regression"},
     r"y_train: target 1 is NaN or infinite"),
    ({"x": np.zeros((4, 2)), "y": np.zeros((4, 2))}, {},
     r"^task: 'classification' needs one class index per sample, but y_train of '.*' has targets of shape \(2,\)"),
    ({"x": np.zeros((6, 2)), "y": np.zeros(6, int)}, {}, r"every label is 0; classification needs >= 2 classes"),
    ({"x": np.zeros((6, 2)), "y": np.arange(6) % 2, "x_test": np.zeros((2, 3)), "y_test": np.zeros(2, int)}, {},
     r"x_test: samples are float64\(3,\) but the train split's are float64\(2,\)"),
])
def test_npz_refusals_are_one_line(tmp_path, arrays, kw, pattern):
    refuse(pattern, name="npz", path=_npz(tmp_path / "d.npz", **arrays), **kw)


def test_npz_file_problems(tmp_path):
    refuse(r"^data\.path: '.*nope\.npz' does not exist$", name="npz", path=str(tmp_path / "nope.npz"))
    (tmp_path / "bad.npz").write_text("not a zip")
    refuse(r"^data\.path: '.*bad\.npz' is not a readable \.npz file", name="npz", path=str(tmp_path / "bad.npz"))
    np.savez(tmp_path / "obj.npz", x=np.array([{"a": 1}] * 3, dtype=object), y=np.zeros(3))
    refuse(r"Python objects \(stored with pickle\)", name="npz", path=str(tmp_path / "obj.npz"))
    refuse(r"^data\.path: required for dataset 'npz'", name="npz")
    refuse(r"^data\.window: dataset 'npz' does not take it \(it takes path, test_fraction\)$", name="npz",
           path=str(tmp_path / "bad.npz"), window=3)
    refuse(r"^data\.num_classes: task 'regression' has no classes", name="npz", path="x", task="regression",
           num_classes=3)


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
       dtype=st.sampled_from(["uint8", "float16", "float32", "int16"]), classes=st.integers(2, 37),
       seed=st.integers(0, 3))
def test_any_rank_dtype_and_class_count_loads(shape, dtype, classes, seed):
    rng = np.random.default_rng(seed)
    n = 2 * classes + 10
    x = (rng.random((n, *shape)) * 100).astype(dtype)
    y = np.concatenate([np.arange(classes), rng.integers(0, classes, n - classes)])
    with tempfile.TemporaryDirectory() as d:
        ds = load_dataset("npz", path=_npz(Path(d) / "a.npz", x=x, y=y), seed=seed)
    assert ds.shape == shape and ds.x_train.dtype == np.dtype(dtype) and ds.num_classes == classes
    assert len(ds.y_train) + len(ds.y_test) == n and len(ds.mean) == shape[0]
    z = ds.normalize(ds.x_test)
    assert z.shape == (len(ds.y_test), *shape) and torch.isfinite(z).all()
    np.testing.assert_allclose(ds.normalize(ds.x_test[0]).numpy(), z[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(ds.normalize(torch.from_numpy(ds.x_test.copy())).numpy(), z.numpy(), rtol=1e-5,
                               atol=1e-5)


# ----------------------------------------------------------------------------- csv / parquet


def _table(n: int = 120, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.integers(0, 5, n)
    return {"a": a, "b": b, "species": np.array(["setosa", "virginica", "versicolor"])[(a > 0).astype(int) + (b > 2)],
            "price": 2 * a + b + 0.1 * rng.normal(size=n), "price2": a - b}


def _write(path: Path, cols: dict) -> str:
    import pyarrow as pa

    table = pa.table(cols)
    if path.suffix == ".csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, path)
    else:
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    return str(path)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_tables_classification_maps_the_target_to_sorted_classes(tmp_path, kind):
    cols = _table()
    path = _write(tmp_path / f"t.{kind}", cols)
    ds = load_dataset(kind, path=path, target="species", features=["a", "b"], seed=1)
    assert ds.class_names == ("setosa", "versicolor", "virginica") and ds.num_classes == 3
    assert ds.shape == (2,) and len(ds.y_train) + len(ds.y_test) == 120
    want = np.float32 if kind == "csv" else np.float64  # CSV numbers carry no dtype; Parquet keeps the widest float
    assert ds.x_train.dtype == want
    names = np.array(ds.class_names)
    rows = {(float(r[0]), float(r[1])): s for r, s in zip(np.stack([cols["a"], cols["b"]], 1).astype(want),
                                                          cols["species"], strict=True)}
    for r, k in zip(ds.x_train, ds.y_train, strict=True):
        assert rows[(float(r[0]), float(r[1]))] == names[k]
    with pytest.raises(ValueError, match=r"^data\.num_classes: dataset '.*' has 3 classes \(distinct values of "
                                         r"data\.target\), got 4$") as e:
        load_dataset(kind, path=path, target="species", features=["a", "b"], num_classes=4)
    one_line(e)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_tables_regression_scalar_and_vector(tmp_path, kind):
    cols = _table()
    del cols["species"]
    path = _write(tmp_path / f"t.{kind}", cols)
    ds = load_dataset(kind, path=path, target="price", task="regression")
    assert ds.shape == (3,) and ds.target_shape == () and ds.y_train.dtype == np.float32  # a, b, price2
    all_y = np.sort(np.concatenate([ds.y_train, ds.y_test]))
    np.testing.assert_allclose(all_y, np.sort(cols["price"].astype(np.float32)))
    ds = load_dataset(kind, path=path, target=["price", "price2"], features=["a", "b"], task="regression")
    assert ds.target_shape == (2,) and ds.y_train.shape[1] == 2 and ds.shape == (2,)
    if kind == "parquet":
        ds = load_dataset(kind, path=path, target="price", features=["b"], task="regression")
        assert ds.x_train.dtype == (np.int64 if np.dtype("<i8") in DTYPE_CODES.values() else np.uint8)
        ints = _write(tmp_path / "i.parquet", {"b": cols["b"].astype(np.int16), "c": cols["b"].astype(np.uint8),
                                               "price": cols["price"]})
        assert load_dataset(kind, path=ints, target="price", task="regression").x_train.dtype == np.int16


def test_parquet_float16_and_float32_columns_keep_their_dtype(tmp_path):
    rng = np.random.default_rng(0)
    path = _write(tmp_path / "h.parquet", {"f": rng.random(40).astype(np.float32), "g": rng.random(40).astype(np.float32),
                                            "k": np.arange(40) % 3})
    assert load_dataset("parquet", path=path, target="k").x_train.dtype == np.float32


def test_tables_refusals_are_one_line(tmp_path):
    cols = _table()
    path = _write(tmp_path / "t.csv", cols)
    refuse(r"^data\.features: column 'species' of '.*' is not numeric \(string\); list numeric columns",
           name="csv", path=path, target="price", task="regression")
    refuse(r"^data\.target: no column 'nope' in '.*'; columns: a, b, species, price, price2$", name="csv", path=path,
           target="nope", features=["a"])
    refuse(r"^data\.features: no column 'zz'", name="csv", path=path, target="species", features=["a", "zz"])
    refuse(r"^task: 'classification' needs class labels, but data\.target 'price' holds non-integer numbers",
           name="csv", path=path, target="price", features=["a", "b"])
    refuse(r"^data\.target: column 'species' of '.*' is not numeric \(string\); task 'regression' needs numbers",
           name="csv", path=path, target="species", features=["a"], task="regression")
    refuse(r"^data\.target: task 'classification' needs one target column", name="csv", path=path,
           target=["a", "b"], features=["price"])
    refuse(r"^data\.features: lists the target column 'b'", name="csv", path=path, target="b", features=["a", "b"])
    refuse(r"^data\.target: required for dataset 'csv'", name="csv", path=path)
    (tmp_path / "bad.parquet").write_text("a,b\n1,2\n")
    refuse(r"^data\.path: '.*bad\.parquet' is not a readable PARQUET file", name="parquet",
           path=str(tmp_path / "bad.parquet"), target="a")
    (tmp_path / "gaps.csv").write_text("a,b\n1,2\n,3\n4,5\n")
    refuse(r"^data\.features: column 'a' of '.*' has 1 missing values$", name="csv", path=str(tmp_path / "gaps.csv"),
           target="b")


# ----------------------------------------------------------------------------- windows


def _series(path: Path, n: int = 100) -> dict:
    t = np.arange(n)
    cols = {"time": [f"2024-01-01T00:{i // 60:02d}:{i % 60:02d}" for i in t], "u": np.sin(t / 5.0),
            "v": np.cos(t / 7.0), "y": np.sin(t / 5.0 + 0.3), "state": (t // 10) % 3}
    _write(path, cols)
    return cols


def test_windows_are_features_by_window_with_the_target_horizon_rows_later(tmp_path):
    cols = _series(tmp_path / "s.csv")
    ds = load_dataset("windows", path=str(tmp_path / "s.csv"), target="y", features=["u", "v"], window=8, stride=3,
                      horizon=2, task="regression", test_fraction=0.25)
    assert ds.shape == (2, 8) and ds.x_train.dtype == np.float32 and ds.target_shape == ()
    # train rows 0..74: windows start at 0, 3, ..., the last whose target row (start + 7 + 2) < 75
    starts = np.arange(0, 75 - 8 - 2 + 1, 3)
    assert len(ds.y_train) == len(starts)
    np.testing.assert_allclose(ds.x_train[1], np.stack([cols["u"][3:11], cols["v"][3:11]]).astype(np.float32))
    np.testing.assert_allclose(ds.y_train, cols["y"][starts + 9].astype(np.float32))
    np.testing.assert_allclose(ds.y_test[0], np.float32(cols["y"][75 + 9]))  # the test split: the last 25 rows
    # default features: every numeric column, the target's history included (the time stamps left out)
    ds = load_dataset("windows", path=str(tmp_path / "s.csv"), target="y", window=4, task="regression")
    assert ds.shape == (4, 4)
    ds = load_dataset("windows", path=str(tmp_path / "s.csv"), target="y", window=4, horizon=0, task="regression")
    assert ds.shape == (3, 4)  # horizon 0: the target is the window's own last row, so not an input


def test_windows_classification_and_refusals(tmp_path):
    _series(tmp_path / "s.parquet")
    p = str(tmp_path / "s.parquet")
    ds = load_dataset("windows", path=p, target="state", features=["u", "v"], window=5)
    assert ds.num_classes == 3 and ds.y_train.dtype == np.int64 and ds.x_train.dtype == np.float64
    refuse(r"^data\.window: the test rows of '.*' \(20 of 100, test_fraction 0\.2\) hold no window of 30 rows \+ "
           r"horizon 1; need >= 31 rows$", name="windows", path=p, target="y", features=["u"], window=30,
           task="regression")
    refuse(r"^data\.window: required for dataset 'windows'", name="windows", path=p, target="y")
    refuse(r"^data\.features: column 'time' of '.*' is not numeric", name="windows", path=p, target="y",
           features=["time"], window=3, task="regression")


# ----------------------------------------------------------------------------- folder


def _png(path: Path, size: tuple[int, int], color: tuple[int, ...] | int, mode: str = "RGB") -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, color).save(path)


def test_image_folder_of_three_classes(tmp_path):
    colors = {"cat": (255, 0, 0), "dog": (0, 255, 0), "emu": (0, 0, 255)}
    for name, c in colors.items():
        for i in range(5):
            _png(tmp_path / "imgs" / name / f"{i}.png", (6, 4), c)
    (tmp_path / "imgs" / "cat" / "notes.txt").write_text("ignored")
    ds = load_dataset("folder", str(tmp_path / "imgs"), seed=0)
    assert ds.shape == (3, 4, 6) and ds.x_train.dtype == np.uint8 and ds.num_classes == 3
    assert ds.class_names == ("cat", "dog", "emu") and len(ds.y_train) + len(ds.y_test) == 15
    for x, k in zip(ds.x_train, ds.y_train, strict=True):
        assert tuple(x[:, 0, 0]) == colors[ds.class_names[k]]
    refuse(r"^data\.num_classes: dataset 'folder' has 3 classes \(class folders\), got 2$", name="folder",
           root=str(tmp_path / "imgs"), num_classes=2)


def test_image_folder_train_test_greyscale_jpeg_and_refusals(tmp_path):
    for split, n in (("train", 4), ("test", 2)):
        for k in range(3):
            _png(tmp_path / "g" / split / f"c{k}" / "a.png", (5, 5), 40 * k, mode="L")
            for i in range(n - 1):
                _png(tmp_path / "g" / split / f"c{k}" / f"{i}.jpg", (5, 5), 40 * k, mode="L")
    ds = load_dataset("folder", str(tmp_path / "g"))
    assert ds.shape == (1, 5, 5) and (len(ds.y_train), len(ds.y_test)) == (12, 6)
    _png(tmp_path / "g" / "train" / "c1" / "big.png", (7, 5), 3, mode="L")
    refuse(r"^data\.root: '.*big\.png' is 7x5 but '.*' is 5x5; every image must have the same size$", name="folder",
           root=str(tmp_path / "g"))
    (tmp_path / "g" / "train" / "c1" / "big.png").write_bytes(b"not a png")
    refuse(r"^data\.root: '.*big\.png' is not a readable image", name="folder", root=str(tmp_path / "g"))
    (tmp_path / "empty").mkdir()
    refuse(r"^data\.root: no class folders in '.*empty'", name="folder", root=str(tmp_path / "empty"))


# ----------------------------------------------------------------------------- factories by import path


FACTORIES = '''
import numpy as np
import torch

def _xy(n=40, k=3, shape=(2, 6), seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, *shape)).astype(np.float32), np.arange(n) % k

def four(n=40, k=3):
    x, y = _xy(n, k)
    xt, yt = _xy(10, k, seed=1)
    return x, y, xt, yt

def two(n=40):
    return _xy(n)

def as_dict():
    x, y = _xy()
    return {"x": torch.from_numpy(x), "y": torch.from_numpy(y), "x_test": x[:5], "y_test": y[:5]}

class Items(torch.utils.data.Dataset):
    def __init__(self, n, vector=False):
        self.x, self.y = _xy(n)
        self.vector = vector
    def __len__(self):
        return len(self.y)
    def __getitem__(self, i):
        y = torch.tensor([float(i), 2.0 * i]) if self.vector else float(self.y[i]) + 0.5
        return torch.from_numpy(self.x[i]), y

def items(vector=False):
    return Items(30, vector)

def pair():
    return Items(30), Items(8)

def wrong():
    return [1, 2, 3]

def broken(**kw):
    raise RuntimeError("the sensor archive is offline")
'''


@pytest.fixture
def factories(tmp_path, monkeypatch) -> str:
    name = f"userdata_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(FACTORIES))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_factories_by_import_path(factories):
    ds = load_dataset(f"{factories}:four", kwargs={"n": 30, "k": 4})
    assert (len(ds.y_train), len(ds.y_test)) == (30, 10) and ds.shape == (2, 6) and ds.num_classes == 4
    ds = load_dataset(f"{factories}:two", test_fraction=0.25, seed=2)
    assert (len(ds.y_train), len(ds.y_test)) == (30, 10) and ds.x_train.dtype == np.float32
    ds = load_dataset(f"{factories}:as_dict")
    assert len(ds.y_test) == 5 and ds.y_train.dtype == np.int64
    ds = load_dataset(f"{factories}:items", task="regression")
    assert ds.target_shape == () and len(ds.y_train) == 24 and ds.shape == (2, 6)
    ds = load_dataset(f"{factories}:items", task="regression", kwargs={"vector": True})
    assert ds.target_shape == (2,)
    ds = load_dataset(f"{factories}:pair", task="regression", n_train=10)
    assert (len(ds.y_train), len(ds.y_test)) == (10, 8)


def test_factory_refusals_are_one_line(factories):
    refuse(rf"^data\.dataset: '{factories}:wrong' returned a list of 3; expected \(x_train, y_train, x_test, "
           r"y_test\), \(x, y\)", name=f"{factories}:wrong")
    refuse(rf"^data\.dataset: dataset factory '{factories}:broken' raised RuntimeError: the sensor archive is "
           r"offline \(called with data\.kwargs \{\}\)$", name=f"{factories}:broken")
    refuse(rf"^data\.kwargs: dataset factory '{factories}:two' raised TypeError: .*unexpected keyword argument 'm'",
           name=f"{factories}:two", kwargs={"m": 1})
    refuse(r"^task: 'classification' needs class labels, but y_train of .* holds non-integer numbers",
           name=f"{factories}:items")
    refuse(rf"^data\.path: dataset '{factories}:two' does not take it \(it takes kwargs, test_fraction\)$",
           name=f"{factories}:two", path="a.npz")
    refuse(r"^data\.dataset: cannot import module 'no_such_module_xyz'", name="no_such_module_xyz:f")


# ----------------------------------------------------------------------------- validate and run agree


def _cfg_file(tmp_path: Path, data: dict, **top) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"name": "fmt", "data": data, "model": {"name": "mlp"}, **top}))
    return p


def test_validate_and_run_refuse_the_same_line(tmp_path):
    """The issue's case: validate said valid for num_classes 4 on 10-class data while run refused it."""
    np.savez(tmp_path / "d.npz", x=np.zeros((30, 4), np.float32), y=np.arange(30) % 10)
    path = _cfg_file(tmp_path, {"dataset": "npz", "path": "d.npz", "num_classes": 4})
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.problems == [f"data.num_classes: 4 is not allowed; the labels of y of '{tmp_path / 'd.npz'}' go up "
                                "to 9, so it must be >= 10"]
    cfg = load_config(path, check=False)
    with pytest.raises(PlanError) as run_err:
        _ = RunPlan.resolve(cfg).dataset
    assert run_err.value.problems == e.value.problems
    with pytest.raises(ConfigError) as e:
        load_config(_cfg_file(tmp_path, {"dataset": "npz", "path": "d.npz"}, task="regression"))
    assert len(e.value.problems) == 1 and e.value.problems[0].startswith("task: 'regression' needs float targets")
    cfg = load_config(_cfg_file(tmp_path, {"dataset": "npz", "path": "d.npz"}))
    plan = RunPlan.resolve(cfg)
    assert plan.dataset is RunPlan.dataset_of(cfg) and plan.dataset.num_classes == 10  # loaded once, by validate


def test_load_once_is_per_owner_and_arguments():
    class Owner:
        pass

    a, b = Owner(), Owner()
    ds = load_once(a, "synthetic", shape=(4,), n_train=20, n_test=10)
    assert load_once(a, "synthetic", shape=(4,), n_train=20, n_test=10) is ds
    assert load_once(b, "synthetic", shape=(4,), n_train=20, n_test=10) is not ds
    assert load_once(a, "synthetic", shape=(5,), n_train=20, n_test=10).shape == (5,)


def test_synthetic_regression_through_the_config():
    cfg = validate_dict({"task": "regression", "data": {"dataset": "synthetic", "shape": [12], "n_train": 40,
                                                        "n_test": 10, "kwargs": {"target_dim": 3}}})
    ds = RunPlan.resolve(cfg).dataset
    assert ds.target_shape == (3,) and ds.shape == (12,) and ds.num_classes == 0
    with pytest.raises(PlanError, match=r"data\.kwargs: the synthetic dataset takes only target_dim"):
        _ = RunPlan.resolve(validate_dict({"data": {"dataset": "synthetic", "kwargs": {"dim": 3}}})).dataset
    with pytest.raises(PlanError, match=r"data\.kwargs\.target_dim: a vector target is for task 'regression'"):
        _ = RunPlan.resolve(validate_dict({"data": {"dataset": "synthetic", "kwargs": {"target_dim": 3}}})).dataset


def test_partition_refuses_float_targets():
    for scheme in ("iid", "labels", "dirichlet"):
        with pytest.raises(ValueError, match=r"^labels: float targets \(a regression task\) are not class labels") as e:
            partition_indices(np.zeros(20, np.float32), 2, scheme)
        one_line(e)
