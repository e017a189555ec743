"""The simulator's data: the run's dataset, one shard per device, and batches as real tensors.

Devices stream their shards in exactly the order the Kafka producers use (`ShardOrder`: seeded
shuffle per device and epoch), so own-stream position k of device i is dataset index
`orders[i].index(k)` (computed by `edgestream.sim.orders.EpochOrders`: the same permutations at a
fraction of the cost, checked against `ShardOrder` when the data is built). Inputs are normalised
once up front (`Dataset.normalize`) when the float copy of the train split is small (<=
`PRENORMALIZE_MAX_BYTES`); otherwise each batch is normalised on the fly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from edgestream.data import Dataset, SampleSpec
from edgestream.data.order import ShardOrder
from edgestream.sim.orders import EpochOrders

PRENORMALIZE_MAX_BYTES = 512 * 2**20


class SimBatch:
    """A batch as algorithms see it (`n`, `x`, `y`) plus what the engine needs: the dataset indices,
    the device, how many samples came from its own stream (the rest were injected), and what the
    stream did to get it (`facts`: edgestream.streams.source.BatchFacts, set by `VirtualStream.take`).

    `x` and `y` are gathered from the run's data when first read: the batched compute gathers the rows of
    all the devices of a pass at once (`SimData.rows`) and never reads them one device at a time."""

    __slots__ = ("n", "indices", "device", "own", "injected", "facts", "data", "_x", "_y")

    def __init__(self, n: int, x: Tensor | None, y: Tensor | None, indices: np.ndarray, device: int, own: int,
                 injected: int, facts: Any = None, data: SimData | None = None) -> None:
        if (x is None or y is None) and data is None:
            raise ValueError("SimBatch: give x and y, or the SimData to gather them from")
        self.n, self.indices, self.device, self.own, self.injected = n, indices, device, own, injected
        self.facts, self.data, self._x, self._y = facts, data, x, y

    @property
    def x(self) -> Tensor:
        if self._x is None:
            assert self.data is not None
            self._x, y = self.data.rows(self.indices)
            if self._y is None:
                self._y = y
        return self._x

    @property
    def y(self) -> Tensor:
        if self._y is None:
            assert self.data is not None
            self._y = self.data.rows(self.indices, x=False)[1]
        return self._y

    def __repr__(self) -> str:
        return f"SimBatch(n={self.n}, device={self.device}, own={self.own}, injected={self.injected})"


class SimData:
    """Dataset, shards and stream orders of one run (the run plan's `dataset` and `shards`)."""

    def __init__(self, dataset: Dataset, shards: list[np.ndarray], seed: int) -> None:
        self.dataset = dataset
        self.shards = shards
        self.orders = [ShardOrder(s, seed, d) for d, s in enumerate(shards)]
        self.epochs = EpochOrders(self.orders)
        self._fast = self.epochs.agrees()
        self.y_train = torch.from_numpy(np.ascontiguousarray(dataset.y_train))
        float_bytes = dataset.x_train.size * 4
        self.x_train: Tensor | None = None
        if float_bytes <= PRENORMALIZE_MAX_BYTES:
            self.x_train = dataset.normalize(torch.from_numpy(dataset.x_train)).contiguous()
        # numpy views of the same memory: gathering a small batch with numpy is cheaper than index_select
        self._x_np = self.x_train.numpy() if self.x_train is not None else None
        self._y_np = self.y_train.numpy()
        self.x_test = dataset.normalize(torch.from_numpy(dataset.x_test))
        self.y_test = torch.from_numpy(np.ascontiguousarray(dataset.y_test))
        self.sample_bytes = SampleSpec.of(dataset).length  # one wire message, header included

    @property
    def shape(self) -> tuple[int, ...]:
        """One sample's shape: (F,), (C, T) or (C, H, W)."""
        return tuple(self.dataset.shape)

    @property
    def num_classes(self) -> int:
        return int(self.dataset.num_classes)

    def stream_indices(self, device: int, start: int, stop: int) -> np.ndarray:
        """Dataset indices of own-stream positions [start, stop) of `device` (= ShardOrder.index(k) for
        each k; int64, read-only on the fast path: `EpochOrders.indices`)."""
        order = self.orders[device]
        if hasattr(order, "indices"):
            return np.asarray(order.indices(start, stop), dtype=np.int64)
        if self._fast:  # a read-only view of the device's precomputed block of epochs
            return self.epochs.indices(device, start, stop)
        n = len(order.shard)
        parts, k = [], start
        while k < stop:
            pos = k % n
            first = order.index(k)  # makes the order hold epoch k // n's permutation
            perm = getattr(order, "_perm", None)
            take = min(stop - k, n - pos)
            if perm is None or int(perm[pos]) != first:  # an order without a cached permutation
                each = (order.index(j) for j in range(k, k + take))
                parts.append(np.fromiter(each, dtype=np.int64, count=take))
            else:
                parts.append(np.asarray(perm[pos:pos + take], dtype=np.int64))
            k += take
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def warm(self, positions: dict[int, int]) -> None:
        """Prepare the devices' stream orders at these own-stream positions ({device: position}) in one
        go (`EpochOrders.warm`); the orders are the same with or without it."""
        if self._fast:
            self.epochs.warm(positions)

    def labels(self, indices: np.ndarray) -> np.ndarray:
        """The targets of dataset `indices` as a numpy array (the engine's per-batch label checksum): class
        indices, or float regression targets."""
        return self._y_np[indices]

    def rows(self, indices: np.ndarray, *, x: bool = True) -> tuple[Tensor | None, Tensor]:
        """(inputs, targets) of the dataset rows `indices` (any shape of int array: the tensors get its
        shape in front of a sample's); inputs None when x is False."""
        flat = indices.reshape(-1)
        inputs = None
        if x:
            if self._x_np is not None:
                inputs = torch.from_numpy(self._x_np[flat])
            else:
                inputs = self.dataset.normalize(torch.from_numpy(self.dataset.x_train[flat]))
            inputs = inputs.view(*indices.shape, *inputs.shape[1:])
        targets = torch.from_numpy(self._y_np[flat])
        return inputs, targets.view(*indices.shape, *targets.shape[1:])

    def batch(self, device: int, indices: np.ndarray, own: int) -> SimBatch:
        """The batch of dataset `indices` (the first `own` from the device's stream, then injected); its
        tensors are gathered when first read."""
        return SimBatch(len(indices), None, None, indices, device, own, len(indices) - own, data=self)
