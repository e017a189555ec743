"""MNIST from its IDX files (optionally gzip-compressed), parsed from the IDX header.

IDX: two zero bytes, a type byte (0x08 = uint8), the number of dimensions, then one big-endian u32
per dimension, then the data. Images are idx3 (magic 0x00000803), labels idx1 (magic 0x00000801).
"""

from __future__ import annotations

import gzip
import math
import struct
from pathlib import Path

import numpy as np

FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801
#: sub-folders tried below `root`, in order (the torchvision layout included).
_SUBDIRS = ("", "mnist", "MNIST/raw")


def parse_idx(data: bytes, expect_magic: int, what: str = "idx") -> np.ndarray:
    """The uint8 array stored in IDX bytes `data`; ValueError on a wrong magic or size."""
    if len(data) < 4:
        raise ValueError(f"{what}: {len(data)} bytes is too short for an IDX header")
    (magic,) = struct.unpack_from(">I", data, 0)
    if magic != expect_magic:
        raise ValueError(f"{what}: bad IDX magic 0x{magic:08x}, expected 0x{expect_magic:08x}")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{what}: truncated IDX header ({len(data)} bytes, need {header})")
    dims = struct.unpack_from(f">{ndim}I", data, 4)
    want = header + math.prod(dims)
    if len(data) != want:
        raise ValueError(f"{what}: {len(data)} bytes, IDX header {dims} says {want}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def _find(root: Path, name: str) -> Path:
    tried = []
    for sub in _SUBDIRS:
        for suffix in ("", ".gz"):
            p = root / sub / (name + suffix)
            if p.is_file():
                return p
            tried.append(str(p))
    raise FileNotFoundError(f"MNIST file {name} not found; looked for: {', '.join(tried)}")


def _read(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.suffix == ".gz" else raw


def load_mnist(root: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): uint8 N x 1 x H x W images (28 x 28 for MNIST), int64 labels."""
    base = Path(root).expanduser()
    out = []
    for split in ("train", "test"):
        ip, lp = _find(base, FILES[f"{split}_images"]), _find(base, FILES[f"{split}_labels"])
        x = parse_idx(_read(ip), IMAGES_MAGIC, str(ip))
        y = parse_idx(_read(lp), LABELS_MAGIC, str(lp))
        if len(x) != len(y):
            raise ValueError(f"{ip}: {len(x)} images but {lp}: {len(y)} labels")
        out += [x[:, None].copy(), y.astype(np.int64)]  # copies: writable, owning arrays
    return out[0], out[1], out[2], out[3]
