"""Datasets: digits, synthetic (deterministic, learnable but not trivial), CIFAR and MNIST file formats
written here in tiny form, the restricted unpickler, normalisation."""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from edgestream.data import Dataset, channel_stats, load_dataset
from edgestream.data.cifar import RestrictedUnpicklingError, restricted_load
from edgestream.plugins import DATASETS


def _check_layout(ds: Dataset, shape: tuple[int, int, int], k: int) -> None:
    assert ds.shape == shape and ds.num_classes == k
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        assert x.dtype == np.uint8 and x.flags.c_contiguous and x.shape[1:] == shape
        assert y.dtype == np.int64 and len(y) == len(x) and y.min() >= 0 and y.max() < k
    assert len(ds.mean) == len(ds.std) == shape[0]


# ----------------------------------------------------------------------------- digits / synthetic


def test_digits_is_a_stratified_80_20_split_of_sklearn_digits():
    ds = load_dataset("digits", seed=0)
    _check_layout(ds, (1, 8, 8), 10)
    assert len(ds.y_train) + len(ds.y_test) == 1797
    assert abs(len(ds.y_test) - 0.2 * 1797) < 2
    tr = np.bincount(ds.y_train, minlength=10) / len(ds.y_train)
    te = np.bincount(ds.y_test, minlength=10) / len(ds.y_test)
    assert np.abs(tr - te).max() < 0.01
    assert ds.x_train.max() == 255 and ds.x_train.min() == 0  # 16 -> 255, 0 -> 0
    assert set(np.unique(ds.x_train)) <= {round(v * 255 / 16) for v in range(17)}
    again = load_dataset("digits", seed=0)
    np.testing.assert_array_equal(again.x_train, ds.x_train)
    assert not np.array_equal(load_dataset("digits", seed=1).y_train, ds.y_train)


def test_synthetic_is_deterministic_and_configurable():
    a = load_dataset("synthetic", seed=3, n_train=300, n_test=100)
    _check_layout(a, (3, 32, 32), 10)
    b = load_dataset("synthetic", seed=3, n_train=300, n_test=100)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    c = load_dataset("synthetic", seed=4, n_train=300, n_test=100)
    assert not np.array_equal(a.x_train, c.x_train)
    d = load_dataset("synthetic", shape=(1, 12, 10), num_classes=4, n_train=50, n_test=20)
    _check_layout(d, (1, 12, 10), 4)
    assert (len(d.y_train), len(d.y_test)) == (50, 20)
    assert len(np.unique(a.y_train)) == 10


def _train_mlp(ds: Dataset, steps: list[int], lr: float = 0.01, batch: int = 32) -> dict[int, float]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x_tr, y_tr = ds.normalize(ds.x_train), torch.from_numpy(ds.y_train)
    x_te, y_te = ds.normalize(ds.x_test), torch.from_numpy(ds.y_test)
    dim = int(np.prod(ds.shape))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(dim, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, ds.num_classes))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    acc = {}
    for step in range(1, max(steps) + 1):
        idx = torch.randint(0, len(y_tr), (batch,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x_tr[idx]), y_tr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in steps:
            with torch.no_grad():
                acc[step] = (model(x_te).argmax(1) == y_te).float().mean().item()
    return acc


def test_synthetic_is_learnable_but_not_trivial():
    ds = load_dataset("synthetic", seed=0, n_train=3000, n_test=500)
    acc = _train_mlp(ds, [3, 300])
    assert acc[3] < 0.4, acc  # not solved in a handful of steps
    assert acc[300] > 0.6, acc  # well above chance (0.1) within a few hundred


def test_normalize_uses_train_statistics_and_accepts_numpy_and_torch():
    ds = load_dataset("synthetic", seed=0, n_train=400, n_test=50, shape=(3, 8, 8))
    z = ds.normalize(ds.x_train)
    assert z.dtype == torch.float32 and z.shape == (400, 3, 8, 8)
    np.testing.assert_allclose(z.mean(dim=(0, 2, 3)).numpy(), 0.0, atol=1e-4)
    np.testing.assert_allclose(z.std(dim=(0, 2, 3)).numpy(), 1.0, atol=1e-2)
    raw = torch.from_numpy(ds.x_train[:5].copy())
    before = raw.clone()
    zt = ds.normalize(raw)
    assert torch.equal(raw, before)  # input untouched
    expect = (raw.double() / 255 - torch.tensor(ds.mean).view(3, 1, 1)) / torch.tensor(ds.std).view(3, 1, 1)
    torch.testing.assert_close(zt, expect.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ds.normalize(ds.x_train[0]), zt[0])  # a single (C, H, W) image
    f = raw.float()
    ds.normalize(f)
    assert torch.equal(f, before.float())  # float input is not modified in place either
    with pytest.raises(ValueError, match="expected"):
        ds.normalize(np.zeros((2, 1, 8, 8), np.uint8))


def test_channel_stats_match_float_statistics():
    x = np.random.default_rng(1).integers(0, 256, size=(5000, 2, 3, 3), dtype=np.uint8)
    x[:, 1] //= 4
    mean, std = channel_stats(x, chunk=777)  # chunk boundaries must not matter
    f = x.astype(np.float64) / 255
    np.testing.assert_allclose(mean, f.mean(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(std, f.std(axis=(0, 2, 3)), rtol=1e-9)
    assert channel_stats(np.full((4, 1, 2, 2), 9, np.uint8))[1] == (1.0,)  # constant channel: no div by 0


def test_registry_errors():
    assert set(DATASETS.builtins) == {"digits", "synthetic", "cifar10", "cifar100", "mnist", "npz", "folder", "csv",
                                      "parquet", "windows"}
    with pytest.raises(ValueError, match=r"^data\.dataset: 'imagenet' is not a built-in dataset.*built-ins: digits, "
                                         r"synthetic.*'package\.module:attribute'"):
        load_dataset("imagenet")
    with pytest.raises(ValueError, match=r"^data\.root: required for dataset 'cifar10'"):
        load_dataset("cifar10")
    with pytest.raises(ValueError, match=r"^data\.shape: dataset 'digits' has samples of shape \[1, 8, 8\], got \[3, 32, 32\]$"):
        load_dataset("digits", shape=(3, 32, 32))
    with pytest.raises(ValueError, match=r"^data\.num_classes: dataset 'digits' has 10 classes, got 5$"):
        load_dataset("digits", num_classes=5)
    with pytest.raises(ValueError, match=r"^task: 'regression' needs float targets, but y_train of 'digits' holds int64"):
        load_dataset("digits", task="regression")


def test_n_train_subsamples_a_fixed_dataset_with_a_seed():
    ds = load_dataset("digits", n_train=100, n_test=40, seed=2)
    assert (len(ds.y_train), len(ds.y_test)) == (100, 40)
    again = load_dataset("digits", n_train=100, n_test=40, seed=2)
    np.testing.assert_array_equal(ds.x_train, again.x_train)
    with pytest.raises(ValueError, match="n_train"):
        load_dataset("digits", n_train=100_000)


# ----------------------------------------------------------------------------- CIFAR


def _cifar_batch(n: int, seed: int, label_key: bytes, k: int) -> dict:
    rng = np.random.default_rng(seed)
    return {b"batch_label": b"test", label_key: [int(v) for v in rng.integers(0, k, n)],
            b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8), b"filenames": [b"a.png"] * n}


def _write(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        pickle.dump(obj, f, protocol=2)  # the official files are protocol-2 pickles


def _make_cifar10(parent: Path) -> list[dict]:
    d = parent / "cifar-10-batches-py"
    batches = [_cifar_batch(4, i, b"labels", 10) for i in range(6)]
    for i in range(5):
        _write(d / f"data_batch_{i + 1}", batches[i])
    _write(d / "test_batch", batches[5])
    return batches


def test_cifar10_from_parent_or_extracted_folder(tmp_path):
    batches = _make_cifar10(tmp_path)
    for root in (tmp_path, tmp_path / "cifar-10-batches-py"):
        ds = load_dataset("cifar10", str(root))
        _check_layout(ds, (3, 32, 32), 10)
        assert len(ds.y_train) == 20 and len(ds.y_test) == 4
        np.testing.assert_array_equal(ds.x_train[:4].reshape(4, -1), batches[0][b"data"])
        np.testing.assert_array_equal(ds.y_train[4:8], batches[1][b"labels"])
        np.testing.assert_array_equal(ds.x_test.reshape(4, -1), batches[5][b"data"])


def test_cifar100_uses_fine_labels(tmp_path):
    d = tmp_path / "cifar-100-python"
    train = _cifar_batch(6, 0, b"fine_labels", 100) | {b"coarse_labels": [0] * 6}
    _write(d / "train", train)
    _write(d / "test", _cifar_batch(3, 1, b"fine_labels", 100) | {b"coarse_labels": [0] * 3})
    ds = load_dataset("cifar100", str(tmp_path))
    _check_layout(ds, (3, 32, 32), 100)
    np.testing.assert_array_equal(ds.y_train, train[b"fine_labels"])


def test_cifar_missing_files_name_the_expected_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py/data_batch_1"):
        load_dataset("cifar10", str(tmp_path))
    _make_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_4"):
        load_dataset("cifar10", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="cifar-100-python"):
        load_dataset("cifar100", str(tmp_path))


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_restricted_unpickler_refuses_code_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({b"data": _Evil(marker)}, protocol=2)
    with pytest.raises(RestrictedUnpicklingError, match="system"):
        restricted_load(payload)
    assert not marker.exists()
    d = tmp_path / "cifar-10-batches-py"
    _make_cifar10(tmp_path)
    (d / "data_batch_1").write_bytes(payload)  # a malicious file in place of a real one
    with pytest.raises(RestrictedUnpicklingError):
        load_dataset("cifar10", str(tmp_path))
    assert not marker.exists()
    for proto in (2, 5):
        with pytest.raises(RestrictedUnpicklingError, match=r"refusing global (__builtin__|builtins)\.eval"):
            restricted_load(pickle.dumps(eval, protocol=proto))


def test_restricted_unpickler_still_loads_numpy_arrays():
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    for proto in (2, 4, 5):
        back = restricted_load(pickle.dumps({"a": arr, "l": [1, 2]}, protocol=proto))
        np.testing.assert_array_equal(back["a"], arr)
        assert back["l"] == [1, 2]


# ----------------------------------------------------------------------------- MNIST


def _idx(arr: np.ndarray, magic: int) -> bytes:
    return struct.pack(">I", magic) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


def _make_mnist(root: Path, gz: bool = False, n_train: int = 6, n_test: int = 3) -> tuple:
    rng = np.random.default_rng(0)
    arrays = (rng.integers(0, 256, (n_train, 28, 28)), rng.integers(0, 10, n_train),
              rng.integers(0, 256, (n_test, 28, 28)), rng.integers(0, 10, n_test))
    names = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")
    root.mkdir(parents=True, exist_ok=True)
    for name, arr in zip(names, arrays, strict=True):
        data = _idx(arr, 0x803 if arr.ndim == 3 else 0x801)
        if gz:
            (root / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (root / name).write_bytes(data)
    return arrays


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_files(tmp_path, gz):
    x_tr, y_tr, x_te, y_te = _make_mnist(tmp_path, gz=gz)
    ds = load_dataset("mnist", str(tmp_path))
    _check_layout(ds, (1, 28, 28), 10)
    np.testing.assert_array_equal(ds.x_train[:, 0], x_tr)
    np.testing.assert_array_equal(ds.y_train, y_tr)
    np.testing.assert_array_equal(ds.x_test[:, 0], x_te)
    np.testing.assert_array_equal(ds.y_test, y_te)
    assert ds.x_train.flags.writeable


def test_mnist_bad_files_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        load_dataset("mnist", str(tmp_path))
    _make_mnist(tmp_path)
    labels = tmp_path / "train-labels-idx1-ubyte"
    good = labels.read_bytes()
    labels.write_bytes(struct.pack(">I", 0x803) + good[4:])
    with pytest.raises(ValueError, match="bad IDX magic 0x00000803, expected 0x00000801"):
        load_dataset("mnist", str(tmp_path))
    labels.write_bytes(good[:-1])
    with pytest.raises(ValueError, match="IDX header"):
        load_dataset("mnist", str(tmp_path))
    labels.write_bytes(_idx(np.zeros(5), 0x801))  # 5 labels for 6 images
    with pytest.raises(ValueError, match="6 images but"):
        load_dataset("mnist", str(tmp_path))
