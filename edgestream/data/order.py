"""The order in which a device streams its shard: seeded shuffled, epoch after epoch.

Shared by the real producers and the simulator, so both stream the same samples in the same order.
"""

from __future__ import annotations

import numpy as np


class ShardOrder:
    """A device's samples in a seeded shuffled order, epoch after epoch: sample k -> dataset index."""

    def __init__(self, shard: np.ndarray, seed: int, device: int) -> None:
        if len(shard) == 0:
            raise ValueError(f"device {device} has no data in its shard; use fewer devices or another partition")
        self.shard = np.asarray(shard)
        self.seed, self.device = seed, device
        self._epoch, self._perm = -1, self.shard

    def index(self, k: int) -> int:
        epoch, pos = divmod(k, len(self.shard))
        if epoch != self._epoch:
            rng = np.random.default_rng([self.seed, self.device, epoch])
            self._perm, self._epoch = self.shard[rng.permutation(len(self.shard))], epoch
        return int(self._perm[pos])
