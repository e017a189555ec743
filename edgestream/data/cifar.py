"""CIFAR-10 / CIFAR-100 from the standard "python version" batch files, read with a restricted unpickler.

The official files are pickles (Python 2 era) of dicts holding a uint8 `b"data"` array (N x 3072) and
label lists. Unpickling arbitrary files can execute code, so `RestrictedUnpickler` resolves only the
few numpy globals needed to rebuild arrays (plus a latin-1-only stand-in for `_codecs.encode`, which
protocol-2 pickles written by Python 3 use for bytes) and refuses every other global before it is
imported or called.
"""

from __future__ import annotations

import importlib
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

CIFAR10_DIR = "cifar-10-batches-py"
CIFAR100_DIR = "cifar-100-python"
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST = "test_batch"

#: (module, name) globals the CIFAR pickles may reference -> (candidate modules, attribute) to resolve.
_ALLOWED: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {}
for _mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _ALLOWED[(_mod, "_reconstruct")] = (("numpy._core.multiarray", "numpy.core.multiarray"), "_reconstruct")
    _ALLOWED[(_mod, "scalar")] = (("numpy._core.multiarray", "numpy.core.multiarray"), "scalar")
for _mod in ("numpy.core.numeric", "numpy._core.numeric"):
    _ALLOWED[(_mod, "_frombuffer")] = (("numpy._core.numeric", "numpy.core.numeric"), "_frombuffer")
_ALLOWED[("_codecs", "encode")] = (("edgestream.data.cifar",), "_latin1_encode")
_ALLOWED[("numpy", "ndarray")] = (("numpy",), "ndarray")
_ALLOWED[("numpy", "dtype")] = (("numpy",), "dtype")


#: what reading a damaged or truncated batch file raises (beyond ValueError): callers that report a file
#: as unreadable catch these, without importing pickle themselves
UNREADABLE = (OSError, EOFError, pickle.UnpicklingError)


class RestrictedUnpicklingError(pickle.UnpicklingError):
    """A pickle referenced a global outside the allow-list (nothing of it was imported or run)."""


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """Stand-in for `_codecs.encode`, which protocol-2 pickles written by Python 3 use for bytes
    (`encode(str, "latin1")`); only the latin-1 codec is allowed."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise RestrictedUnpicklingError(f"refusing _codecs.encode with encoding {encoding!r}")
    return text.encode("latin-1")


def _resolve(modules: tuple[str, ...], name: str) -> Any:
    for mod in modules:
        try:
            return getattr(importlib.import_module(mod), name)
        except (ImportError, AttributeError):
            continue
    raise RestrictedUnpicklingError(f"numpy global {name!r} not found in {modules}")


class RestrictedUnpickler(pickle.Unpickler):
    """An Unpickler whose `find_class` allows only numpy array reconstruction globals."""

    def find_class(self, module: str, name: str) -> Any:
        target = _ALLOWED.get((module, name))
        if target is None:
            raise RestrictedUnpicklingError(
                f"refusing global {module}.{name}: only numpy array reconstruction is allowed "
                f"({', '.join(sorted({f'{m}.{n}' for m, n in _ALLOWED}))})")
        return _resolve(*target)


def restricted_load(data: bytes | io.IOBase, encoding: str = "bytes") -> Any:
    """Unpickle `data` (bytes or a binary file) with RestrictedUnpickler; `encoding` as in pickle."""
    f = io.BytesIO(data) if isinstance(data, bytes | bytearray) else data
    return RestrictedUnpickler(f, encoding=encoding).load()


def _load_batch(path: Path, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    with path.open("rb") as f:
        d = restricted_load(f)
    if not isinstance(d, dict):
        raise ValueError(f"{path}: expected a pickled dict, got {type(d).__name__}")
    key = b"data" if b"data" in d else "data"
    lkey = label_key if label_key in d else label_key.decode()
    if key not in d or lkey not in d:
        raise ValueError(f"{path}: missing keys {b'data'!r} / {label_key!r}; has {sorted(map(str, d))}")
    data = np.asarray(d[key], dtype=np.uint8)
    labels = np.asarray(d[lkey], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
        raise ValueError(f"{path}: data must be N x 3072 with N labels, got {data.shape} and {labels.shape}")
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32)), labels


def _find_dir(root: str | Path, subdir: str, first_file: str) -> Path:
    """`root` itself when it holds `first_file`, else `root/subdir`; FileNotFoundError naming both."""
    base = Path(root).expanduser()
    for cand in (base, base / subdir):
        if (cand / first_file).is_file():
            return cand
    raise FileNotFoundError(f"{first_file} not found: looked for {base / first_file} and "
                            f"{base / subdir / first_file} (root: the extracted {subdir}/ or its parent)")


def load_cifar(root: str | Path, variant: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test) of CIFAR-`variant` (10, or 100 with fine labels).

    Images are uint8 N x 3 x 32 x 32, labels int64."""
    if variant == 10:
        d = _find_dir(root, CIFAR10_DIR, CIFAR10_TRAIN[0])
        missing = [str(d / n) for n in (*CIFAR10_TRAIN, CIFAR10_TEST) if not (d / n).is_file()]
        if missing:
            raise FileNotFoundError(f"CIFAR-10 files missing: {', '.join(missing)}")
        parts = [_load_batch(d / n, b"labels") for n in CIFAR10_TRAIN]
        x_tr = np.concatenate([p[0] for p in parts])
        y_tr = np.concatenate([p[1] for p in parts])
        x_te, y_te = _load_batch(d / CIFAR10_TEST, b"labels")
    elif variant == 100:
        d = _find_dir(root, CIFAR100_DIR, "train")
        if not (d / "test").is_file():
            raise FileNotFoundError(f"CIFAR-100 file missing: {d / 'test'}")
        x_tr, y_tr = _load_batch(d / "train", b"fine_labels")
        x_te, y_te = _load_batch(d / "test", b"fine_labels")
    else:
        raise ValueError(f"variant: must be 10 or 100, got {variant}")
    return x_tr, y_tr, x_te, y_te
