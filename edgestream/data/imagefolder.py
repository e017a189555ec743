"""An ImageFolder tree as a dataset: ``root/<class>/*.png|jpg|jpeg`` (one folder per class, sorted names
= class indices), or ``root/train/<class>/...`` with an optional ``root/test/<class>/...`` held-out split.

Images are decoded with Pillow into uint8 (C, H, W): C = 1 when every image is greyscale, else 3 (RGB;
an alpha channel is dropped, palette images are expanded). Every image must have the same size; the
first that does not is named in a one-line error. Files with other extensions are ignored.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgestream.data.entry import Loaded

EXTENSIONS = (".png", ".jpg", ".jpeg")
#: Pillow modes read as one grey channel
GREY_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F")


def _classes(folder: Path) -> list[str]:
    return sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))


def _files(folder: Path, classes: list[str]) -> tuple[list[Path], np.ndarray]:
    files, labels = [], []
    for k, name in enumerate(classes):
        d = folder / name
        if not d.is_dir():
            continue
        for f in sorted(d.rglob("*")):
            if f.suffix.lower() in EXTENSIONS and f.is_file():
                files.append(f)
                labels.append(k)
    return files, np.asarray(labels, np.int64)


def _decode(files: list[Path], mode: str, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    w, h = size
    out = np.empty((len(files), 1 if mode == "L" else 3, h, w), np.uint8)
    for i, f in enumerate(files):
        with Image.open(f) as img:
            a = np.asarray(img.convert(mode))
        out[i] = a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
    return out


def read_image_folder(root: str) -> Loaded:
    """The images under `root` (see the module doc); x_test None when there is no test/ folder."""
    from PIL import Image, UnidentifiedImageError

    base = Path(root).expanduser()
    if not base.is_dir():
        raise ValueError(f"data.root: {str(base)!r} is not a folder (an ImageFolder: root/<class>/*.png|jpg)")
    train_dir = base / "train" if (base / "train").is_dir() else base
    test_dir = base / "test" if train_dir != base and (base / "test").is_dir() else None
    classes = _classes(train_dir)
    if not classes:
        raise ValueError(f"data.root: no class folders in {str(train_dir)!r} (layout: root/<class>/*.png|jpg, or "
                         "root/train/<class>/ and root/test/<class>/)")
    if test_dir is not None:
        extra = sorted(set(_classes(test_dir)) - set(classes))
        if extra:
            raise ValueError(f"data.root: {str(test_dir)!r} has class folders the train split lacks: {extra[:5]}")
    splits = [_files(train_dir, classes)] + ([_files(test_dir, classes)] if test_dir is not None else [])
    if not len(splits[0][0]):
        raise ValueError(f"data.root: no .png/.jpg images in the class folders of {str(train_dir)!r}")
    if test_dir is not None and not len(splits[1][0]):
        raise ValueError(f"data.root: no .png/.jpg images in the class folders of {str(test_dir)!r}")
    every = [f for files, _ in splits for f in files]
    grey, size = True, None
    for f in every:  # headers only: the channel count and size decide the array before decoding
        try:
            with Image.open(f) as img:
                grey = grey and img.mode in GREY_MODES
                size = size or img.size
                got = img.size
        except (UnidentifiedImageError, OSError) as exc:
            raise ValueError(f"data.root: {str(f)!r} is not a readable image ({' '.join(str(exc).split())})") from None
        if got != size:
            raise ValueError(f"data.root: {str(f)!r} is {got[0]}x{got[1]} but {str(every[0])!r} is "
                             f"{size[0]}x{size[1]}; every image must have the same size")
    arrays = []
    for files, labels in splits:
        arrays += [_decode(files, "L" if grey else "RGB", size), labels]
    x_te, y_te = (arrays[2], arrays[3]) if len(arrays) == 4 else (None, None)
    return Loaded(arrays[0], arrays[1], x_te, y_te, num_classes=len(classes), class_names=tuple(classes),
                  field="data.root", label=repr(str(base)), classes_from=" (class folders)")
