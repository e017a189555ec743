"""A model's floating buffers on the parameter server (BatchNorm running statistics and the like).

The PS's W holds the trainable parameters; the rest of a model's floating state, its floating-point
buffers (`running_mean`, `running_var`, any buffer a user's module registers as a float tensor), travels
beside it. The reading (docs/ps.md, "Buffers"):

* The host (the simulator's PS node, the Kafka PS client), not the algorithm, attaches a worker's
  current floating buffers to each of its pushes (commits included) and writes the PS's buffers into
  the worker's replica when a pull's reply (or the join's) arrives. Workers' generators and `Push` /
  `Pulled` are unchanged, so an algorithm of a user's gets buffers without a line of its own.
* The PS keeps each worker's latest buffers; the global buffers are their mean over the workers that
  pushed (the initial buffers before any push). BatchNorm statistics are an estimate of the data seen
  through the current model, not a gradient step: the mean of every worker's latest estimate covers
  all workers' data (non-IID partitions included) as FedAvg averages them, where "the latest push
  wins" would hand the model one device's statistics. After a synchronous round (bsp, the -ps
  ADACOMMs) it is exactly the round's average. An algorithm may read them otherwise by overriding
  `Coordinator.on_buffers`.
* Integer buffers (`num_batches_tracked`) stay with each replica: they count that replica's own
  batches, and BatchNorm reads them only in training mode with momentum=None.

`BufferMean` keeps the latest buffers as one [M, B] matrix and their float64 sum, so a push costs O(B)
and the mean is taken at most once per change, whatever M.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor, nn


def floating_buffers(model: nn.Module) -> list[Tensor]:
    """The model's floating-point buffers, in `named_buffers()` order (the tensors themselves)."""
    return [b for _, b in model.named_buffers() if b.is_floating_point()]


def floating_buffer_names(model: nn.Module) -> list[str]:
    """The names of `floating_buffers(model)`, in the same order."""
    return [n for n, b in model.named_buffers() if b.is_floating_point()]


def load_buffers(dst: Sequence[Tensor], src: Sequence[Tensor]) -> None:
    """Copy `src` into the tensors `dst` (a model's floating buffers), in place; ValueError when they
    do not match in number or sizes."""
    import torch

    with torch.no_grad():
        dst, src = list(dst), list(src)
        if len(dst) != len(src):
            raise ValueError(f"buffers: {len(src)} tensors for the model's {len(dst)} floating buffers")
        for i, (d, s) in enumerate(zip(dst, src, strict=True)):
            if d.numel() != s.numel():
                raise ValueError(f"buffers: tensor {i} has {s.numel()} elements, the model's buffer {tuple(d.shape)}")
        if dst:
            torch._foreach_copy_(dst, [s.detach().reshape(d.shape).to(device=d.device, dtype=d.dtype)
                                       for d, s in zip(dst, src, strict=True)])


class BufferMean:
    """The PS's floating buffers for `world` workers, starting from `initial` (module doc): `update(w,
    tensors)` stores worker w's latest, `value()` is the mean over the workers that pushed."""

    def __init__(self, initial: Sequence[Tensor], world: int) -> None:
        import torch

        initial = [t.detach() for t in initial]
        self.shapes = [tuple(t.shape) for t in initial]
        self.dtypes = [t.dtype for t in initial]
        self.sizes = [t.numel() for t in initial]
        self.numel = sum(self.sizes)
        self.world = int(world)
        dtype = torch.float32
        for d in self.dtypes:
            dtype = torch.promote_types(dtype, d)
        self.initial = [t.clone() for t in initial]
        # the store lives on the host (the PS node's memory), whatever device the workers' buffers are on
        self.latest = torch.zeros(self.world, self.numel, dtype=dtype, device="cpu")
        self.has = torch.zeros(self.world, dtype=torch.bool, device="cpu")
        self.sum = torch.zeros(self.numel, dtype=torch.float64, device="cpu")
        self._value: list[Tensor] | None = self.initial

    def __len__(self) -> int:
        return len(self.shapes)

    def _flat(self, tensors: Sequence[Tensor]) -> Tensor:
        import torch

        tensors = list(tensors)
        if len(tensors) != len(self.shapes):
            raise ValueError(f"buffers: {len(tensors)} tensors for the model's {len(self.shapes)} floating buffers")
        for i, (t, n) in enumerate(zip(tensors, self.sizes, strict=True)):
            if t.numel() != n:
                raise ValueError(f"buffers: tensor {i} has {t.numel()} elements, the model's buffer "
                                 f"{list(self.shapes[i])}")
        return torch.cat([t.detach().reshape(-1).to(device="cpu", dtype=self.latest.dtype) for t in tensors])

    def update(self, worker: int, tensors: Sequence[Tensor]) -> None:
        """Worker `worker`'s current buffers arrived (they replace its previous ones)."""
        import torch

        with torch.no_grad():
            if not self.shapes:
                return
            flat = self._flat(tensors)
            if bool(self.has[worker]):
                self.sum -= self.latest[worker].double()
            self.latest[worker] = flat
            self.has[worker] = True
            self.sum += flat.double()
            self._value = None

    def value(self) -> list[Tensor]:
        """The global buffers: fresh tensors, never changed afterwards (a later update makes new ones)."""
        if self._value is None:
            n = int(self.has.sum())
            mean = (self.sum / n).split(self.sizes)
            self._value = [m.to(d).reshape(s) for m, d, s in zip(mean, self.dtypes, self.shapes, strict=True)]
        return self._value

    def nbytes(self) -> int:
        """Bytes of one copy of the buffers on the wire (dense)."""
        return sum(n * d.itemsize for n, d in zip(self.sizes, self.dtypes, strict=True))

    def state_dict(self) -> dict[str, Any]:
        return {"latest": self.latest.clone(), "has": self.has.clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        import torch

        with torch.no_grad():
            latest, has = state["latest"], state["has"]
            if tuple(latest.shape) != tuple(self.latest.shape):
                raise ValueError(f"buffers: the checkpoint holds {list(latest.shape)} (workers x buffer elements), "
                                 f"this run {list(self.latest.shape)}")
            self.latest.copy_(latest)
            self.has.copy_(has)
            self.sum = self.latest[self.has].double().sum(0) if bool(self.has.any()) else torch.zeros_like(self.sum)
            self._value = None if bool(self.has.any()) else self.initial
