"""Split a train split among devices: `partition_indices(labels, num_devices, scheme)`.

`labels` are the train split's class indices; float targets (a regression task) are refused with one
line (a regression run splits iid by sample count: the plan passes placeholder labels).

Every scheme returns one int64 index array per device, each SORTED ascending with no repeats (the
producer owns the streaming order: it shuffles each shard with its own seed). Every device gets at
least one sample; the arrays are disjoint and together cover every train sample exactly once (with
sharing, below: every sample at least once); and the result is a pure function of (labels,
num_devices, scheme, seed, labels_per_device, alpha, share_samples).

Sharing (`share_samples=True`, config `data.share_samples: true`) applies only where the split above
would leave a device empty (more devices D than train samples n; under `labels`, a device whose classes
have fewer samples than holders); a split that works without it is unchanged. Without it those cases
are refused, naming `share_samples`. With it:
- `iid` and `dirichlet` (D > n): the scheme splits the n samples over n devices (single samples) and
  device d holds shard d mod n, so each sample is on floor(D/n) or ceil(D/n) devices (dirichlet's alpha
  no longer shapes single-sample shards).
- `labels`: a class with more holders h than samples c is cut into its c single samples, and its r-th
  holder (in device order) takes sample r mod c, so each of the class's samples is on floor(h/c) or
  ceil(h/c) of its holders; classes with h <= c are split as before. Every device then holds a sample
  of each of its k classes (exactly k labels).
So every sample is used and every device is non-empty.

- `iid`: a seeded permutation split into near-equal parts (sizes differ by at most one).
- `labels` (ScaDLES non-IID, paper 004 section V: "mapping a device to a unique subset of labels"):
  device d holds the k = `labels_per_device` classes (d*k + j) mod K, j < k, of the K classes present
  (round-robin, so with num_devices*k == K each class lives on exactly one device, and with more
  devices classes are shared); each class's samples are split evenly (seeded) among the devices
  holding it. num_devices*k must be >= K, or some samples would have no device.
- `dirichlet`: per class, proportions p ~ Dirichlet(alpha * 1) over devices; the class's shuffled
  samples are cut by those proportions. Devices left empty then take one sample each from the
  largest device (deterministic), so every device is non-empty.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

SCHEMES = ("iid", "labels", "dirichlet")


def _check(labels: np.ndarray, num_devices: int, scheme: str, labels_per_device: int, alpha: float,
           share_samples: bool) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if labels.dtype.kind == "f":
        hint = "; use iid" if scheme != "iid" else " (iid uses only their count: pass np.zeros(n, np.int64))"
        raise ValueError(f"labels: float targets (a regression task) are not class labels; data.partition "
                         f"{scheme!r} needs class indices{hint}")
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels: must be a 1-D integer array, got {labels.dtype} of shape {labels.shape}")
    if isinstance(num_devices, bool) or int(num_devices) != num_devices or num_devices < 1:
        raise ValueError(f"num_devices: must be an integer >= 1, got {num_devices!r}")
    if num_devices > len(labels) and not share_samples:
        raise ValueError(f"num_devices: {num_devices} devices but only {len(labels)} train samples; "
                         f"every device needs at least one: set share_samples (data.share_samples: true) to "
                         f"let devices share samples, or use at most {len(labels)} devices")
    if scheme == "labels" and (int(labels_per_device) != labels_per_device or labels_per_device < 1):
        raise ValueError(f"labels_per_device: must be an integer >= 1, got {labels_per_device!r}")
    if scheme == "dirichlet" and not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha: must be a finite number > 0, got {alpha!r}")


def _iid(n: int, num_devices: int, rng: np.random.Generator) -> list[np.ndarray]:
    return list(np.array_split(rng.permutation(n), num_devices))


def _by_labels(labels: np.ndarray, num_devices: int, k: int, rng: np.random.Generator,
               share: bool = False) -> list[np.ndarray]:
    classes = np.unique(labels)
    n_cls = len(classes)
    if k > n_cls:
        raise ValueError(f"labels_per_device: must be <= the number of classes present ({n_cls}), got {k}")
    if num_devices * k < n_cls:
        raise ValueError(f"labels_per_device: num_devices * labels_per_device = {num_devices * k} < {n_cls} "
                         f"classes, so some samples would have no device; use labels_per_device >= "
                         f"{math.ceil(n_cls / num_devices)} or more devices")
    holders: list[list[int]] = [[] for _ in range(n_cls)]
    for d in range(num_devices):
        for j in range(k):
            holders[(d * k + j) % n_cls].append(d)
    perms = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]

    def split(shared: bool) -> list[np.ndarray]:
        parts: list[list[np.ndarray]] = [[] for _ in range(num_devices)]
        for idx, hold in zip(perms, holders, strict=True):
            if shared and len(hold) > len(idx):  # holder r takes the class's sample r mod c
                for r, d in enumerate(hold):
                    parts[d].append(idx[r % len(idx):r % len(idx) + 1])
            else:
                for d, chunk in zip(hold, np.array_split(idx, len(hold)), strict=True):
                    parts[d].append(chunk)
        return [np.concatenate(p) for p in parts]

    out = split(False)
    empty = [d for d, a in enumerate(out) if len(a) == 0]
    if empty and share:
        return split(True)
    if empty:
        raise ValueError(f"labels_per_device: devices {empty[:5]} got no samples (their classes have fewer "
                         "samples than holders); use fewer devices, more labels per device, or set "
                         "share_samples (data.share_samples: true) to let devices share samples")
    return out


def _dirichlet(labels: np.ndarray, num_devices: int, alpha: float,
               rng: np.random.Generator) -> list[np.ndarray]:
    parts: list[list[np.ndarray]] = [[] for _ in range(num_devices)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        p = rng.dirichlet(np.full(num_devices, float(alpha)))
        cuts = np.rint(np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
        for d, chunk in enumerate(np.split(idx, cuts)):
            parts[d].append(chunk)
    out = [np.concatenate(p) for p in parts]
    # Fill empty devices in order: each takes the last sample of the currently largest device (the lowest
    # index among equals). A heap of (-size, device); a filled device (size 1) is never the largest while
    # a device is still empty (there are at least as many samples as devices), so it is not pushed.
    heap = [(-len(a), i) for i, a in enumerate(out) if len(a)]
    heapq.heapify(heap)
    for d in range(num_devices):
        if len(out[d]) == 0:
            _, big = heapq.heappop(heap)
            out[d], out[big] = out[big][-1:], out[big][:-1]
            heapq.heappush(heap, (-len(out[big]), big))
    return out


def partition_indices(labels: np.ndarray, num_devices: int, scheme: str = "iid", *, seed: int = 0,
                      labels_per_device: int = 1, alpha: float = 0.5,
                      share_samples: bool = False) -> list[np.ndarray]:
    """Index arrays into the train split, one per device (sorted int64); see the module docstring."""
    labels = np.asarray(labels)
    _check(labels, num_devices, scheme, labels_per_device, alpha, share_samples)
    num_devices = int(num_devices)
    # iid and dirichlet with more devices than samples, shared: n single-sample shards, device d holds d mod n
    shards = min(num_devices, len(labels)) if scheme != "labels" else num_devices
    rng = np.random.default_rng([seed, 0x9A27])
    if scheme == "iid":
        parts = _iid(len(labels), shards, rng)
    elif scheme == "labels":
        parts = _by_labels(labels, shards, int(labels_per_device), rng, share=share_samples)
    else:
        parts = _dirichlet(labels, shards, alpha, rng)
    parts = [np.sort(p).astype(np.int64, copy=False) for p in parts]
    return parts if shards == num_devices else [parts[d % shards] for d in range(num_devices)]
