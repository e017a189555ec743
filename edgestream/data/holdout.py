"""The deterministic hold-out of external streams (`eval.holdout: f`): record (device, offset) is held out when
a 64-bit hash of the pair (splitmix64 of device * 2**40 + offset), read as a fraction of 2**64, is below f.

The same records are held out on every host, in every session and after any restart (no state, no seed):
the trainers never train on them (edgestream.consumers.dataset), the evaluator scores on them
(edgestream.consumers.holdout). About f of any long enough stretch of a stream is held out.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def held_out(device: int | np.ndarray, offsets: np.ndarray, fraction: float) -> np.ndarray:
    """bool mask: which of the records at `offsets` of `device` (an int, or one per offset) are held out."""
    offsets = np.asarray(offsets, dtype=np.int64).astype(np.uint64)
    dev = np.asarray(device, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = _splitmix64((dev << np.uint64(40)) + offsets)
    return h < np.uint64(min(int(fraction * 2.0 ** 64), 2 ** 64 - 1))
