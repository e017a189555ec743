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

    def __init__(self, dataset: Dataset, shards: list[np.ndarray], seed: int, drift: Any = None) -> None:
        self.dataset = dataset
        self.shards = shards
        #: the run's drift scenarios (edgestream.streams.drift.Drift) or None; with them, a drifted device's
        #: samples from `drift.first[device]` on are named by a drifted index (`drifted_index`), not a dataset one
        self.drift = drift
        self._n, self._m = len(dataset.y_train), len(shards)
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
        each k; int64, read-only on the fast path: `EpochOrders.indices`). With drift scenarios, the positions
        a scenario may change are drifted indices instead (`drifted_index`)."""
        out = self._order_indices(device, start, stop)
        first = self.drift.first.get(device) if self.drift is not None else None
        if first is not None and stop > first:
            out = np.array(out, dtype=np.int64, copy=True)
            ks = np.arange(max(start, first), stop, dtype=np.int64)
            out[ks - start] = self.drifted_index(device, ks)
        return out

    def drifted_index(self, device: int, ks: np.ndarray) -> np.ndarray:
        """What names sample k of `device` when a drift scenario may change it: N + k M + device (N dataset rows,
        M devices), an index past the dataset's, which `rows` and `labels` turn into the drifted sample (so a
        batch, the batched compute's gathering and an injected sample carry it as any other index)."""
        return self._n + ks * self._m + device

    def _drifted(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(positions of drifted indices in `indices` (flat), their raw inputs and targets after the drift) or
        None when there are none."""
        flat = indices.reshape(-1)
        at = np.flatnonzero(flat >= self._n)
        if not len(at):
            return None
        r = flat[at] - self._n
        devices, ks = r % self._m, r // self._m
        ds = self.dataset
        x = np.empty((len(at), *ds.x_train.shape[1:]), dtype=ds.x_train.dtype)
        y = np.empty((len(at), *ds.y_train.shape[1:]), dtype=ds.y_train.dtype)
        for d in np.unique(devices):
            sel = devices == d
            k = ks[sel]
            lo = int(k.min())
            base = np.asarray(self._order_indices(int(d), lo, int(k.max()) + 1))[k - lo]
            idx = self.drift.indices(int(d), k, base)
            x[sel], y[sel] = self.drift.apply(int(d), k, ds.x_train[idx], ds.y_train[idx])
        return at, x, y

    def _order_indices(self, device: int, start: int, stop: int) -> np.ndarray:
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
        if self.drift is None:
            return self._y_np[indices]
        drifted = self._drifted(indices)
        if drifted is None:
            return self._y_np[indices]
        at, _, y = drifted
        out = self._y_np[np.where(indices >= self._n, 0, indices)]
        out.reshape(-1, *out.shape[indices.ndim:])[at] = y
        return out

    def rows(self, indices: np.ndarray, *, x: bool = True) -> tuple[Tensor | None, Tensor]:
        """(inputs, targets) of the dataset rows `indices` (any shape of int array: the tensors get its
        shape in front of a sample's); inputs None when x is False."""
        if self.drift is not None:
            drifted = self._drifted(indices)
            if drifted is not None:
                return self._drifted_rows(indices, drifted, x)
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

    def _drifted_rows(self, indices: np.ndarray, drifted: tuple[np.ndarray, np.ndarray, np.ndarray],
                      x: bool) -> tuple[Tensor | None, Tensor]:
        """`rows` of `indices` holding drifted ones: the others gathered as ever, the drifted ones normalised
        from their drifted raw inputs as the consumer normalises what the producer sent (numpy, no torch op
        on the way: small torch ops cost more than the gathering)."""
        at, xd, yd = drifted
        flat = np.where(indices >= self._n, 0, indices).reshape(-1)
        targets = self._y_np[flat]
        targets[at] = yd
        inputs = None
        if x:
            if self._x_np is not None:
                rows = self._x_np[flat]
                rows[at] = self.dataset.normalize(xd).numpy()
            else:
                raw = self.dataset.x_train[flat]
                raw[at] = xd
                rows = self.dataset.normalize(raw).numpy()
            inputs = torch.from_numpy(rows).view(*indices.shape, *rows.shape[1:])
        return inputs, torch.from_numpy(targets).view(*indices.shape, *targets.shape[1:])

    def batch(self, device: int, indices: np.ndarray, own: int) -> SimBatch:
        """The batch of dataset `indices` (the first `own` from the device's stream, then injected); its
        tensors are gathered when first read."""
        return SimBatch(len(indices), None, None, indices, device, own, len(indices) - own, data=self)
