"""Core types of the compression layer (GRACE's compressor / memory split) and the factories.

A `Compressor` turns one tensor into a `Compressed` message and back; a `Memory` holds the
error-feedback state around it. Neither communicates: the algorithm in sync/ decides what to send
and the engine sends `Compressed.payload`. `floats` and `nbytes` report what goes on the wire so that
both engines account bytes the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from edgestream import plugins as _plugins

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    import torch

COMPRESSOR_NAMES = _plugins.COMPRESSORS.builtins  # the built-ins (edgestream.compression.builtins)
MEMORY_NAMES = ("none", "residual", "dgc")

# Keys of the experiment config's `compression:` block that apply to some compressors only; a spec
# built from that block carries all of them, so each compressor ignores the ones it does not use.
_SHARED_KEYS = frozenset({"name", "ratio", "delta", "levels", "memory", "statistic", "seed", "beta", "kwargs"})


@dataclass
class Compressed:
    """One compressed tensor.

    payload: the tensors that go on the wire (e.g. [values, indices] or [fp16 tensor]).
    ctx: what the receiver already knows and needs to decompress (shape, numel, dtype); not counted.
    floats: 32-bit words on the wire (values and int32 indices both count; fp16 counts as half).
    nbytes: bytes on the wire.
    """

    payload: list[torch.Tensor]
    ctx: tuple
    floats: int
    nbytes: int


@runtime_checkable
class Compressor(Protocol):
    """Compresses one named tensor (a layer's gradient).

    `sparse` is True when the payload is (values, indices): a group then aggregates by all-gather
    and `scatter_add_sparse`; otherwise it decompresses and all-reduces (or sums) dense tensors.
    """

    name: str
    sparse: bool

    def compress(self, tensor: torch.Tensor, name: str) -> Compressed: ...

    def decompress(self, c: Compressed) -> torch.Tensor: ...

    def state_dict(self) -> dict[str, Any]:
        """What the compressor carries between steps (seeded draws' counters and generator states),
        as tensors and plain values only, so torch.save + torch.load(weights_only=True) round-trips it;
        {} for stateless compressors. `load_state_dict` restores it into a compressor built with the
        same spec."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class Memory(Protocol):
    """Error-feedback state kept per tensor name across steps.

    Use: t = memory.compensate(g, name); c = compressor.compress(t, name); send c;
    memory.update(t, name, compressor, c).
    """

    def compensate(self, tensor: torch.Tensor, name: str) -> torch.Tensor: ...

    def update(
        self, tensor: torch.Tensor, name: str, compressor: Compressor, compressed: Compressed
    ) -> None: ...

    def reset(self, name: str | None = None) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        """The error-feedback state (tensors by name; plain values), valid until the next update: copy it
        (torch.save does) to keep it. `load_state_dict` restores it."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def payload_nbytes(tensors: Sequence[torch.Tensor]) -> int:
    """Bytes of `tensors` as they travel (numel x element size each): the one count every engine,
    exchange, wire format and benchmark uses."""
    return sum(t.nbytes for t in tensors)


def wire_floats(nbytes: int) -> int:
    """The float32 count of `nbytes` on the wire (ceil(bytes / 4)): step lines' `floats_sent`."""
    return -(-int(nbytes) // 4)


def wire_counts(payload: Sequence[torch.Tensor]) -> tuple[int, int]:
    """(floats, nbytes) of a payload: bytes summed over tensors, floats = ceil(bytes / 4)."""
    nbytes = payload_nbytes(payload)
    return wire_floats(nbytes), nbytes


def tensor_ctx(tensor: torch.Tensor) -> tuple:
    """The receiver-side context of a tensor: (shape, numel, dtype)."""
    return (tuple(tensor.shape), tensor.numel(), tensor.dtype)


def k_of(ratio: float, numel: int) -> int:
    """k = max(1, ceil(ratio * numel)), at most numel; rounding guards 0.1 * 30 = 3.0000000000000004."""
    if not 0 < ratio <= 1:
        raise ValueError(f"compression ratio must be in (0, 1], got {ratio}")
    return min(numel, max(1, math.ceil(round(ratio * numel, 6))))


def build_compressor(spec: dict[str, Any]) -> Compressor:
    """A compressor from a spec such as {"name": "topk", "ratio": 0.1}.

    The name resolves through edgestream.plugins.COMPRESSORS (a built-in, an import path
    'package.module:attribute' or an entry point in the group edgestream.compressors) to a factory called
    as factory(spec) -> Compressor. Built-ins (edgestream.compression.builtins): none, fp16, topk(ratio),
    randomk(ratio, seed), qsgd(levels, seed), adaptive-topk(ratio, delta, statistic, beta). Keys of the
    config block that a compressor does not use (e.g. `delta` for topk, `memory`) are ignored; any other
    key is an error (a user compressor's own options go in `kwargs`).
    """
    from edgestream.plugins import COMPRESSORS

    spec = dict(spec)
    name = spec.get("name", "none")
    unknown = set(spec) - _SHARED_KEYS
    if unknown:
        raise ValueError(f"unknown compression option(s) {sorted(unknown)}; allowed: {sorted(_SHARED_KEYS)}")
    out = COMPRESSORS.load(name, "compression.name")(spec)
    if type(out) in _CONFORMING:  # a Protocol's isinstance is slow (~25 us): once per class, not per worker
        return out
    if not isinstance(out, Compressor):
        raise ValueError(f"compression.name: {name!r} returned a {type(out).__name__}, not an "
                         "edgestream.compression.Compressor")
    _CONFORMING.add(type(out))
    return out


#: classes whose instances `build_compressor` found to be Compressors
_CONFORMING: set[type] = set()


def scatter_add_sparse(
    numel: int,
    parts: Sequence[tuple[torch.Tensor, torch.Tensor]],
    weights: Sequence[float] | None,
    dtype: torch.dtype,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Decode an all-gather of sparse payloads: the flat dense sum_j w_j * scatter(values_j, indices_j).

    `parts` are the (values, indices) pairs gathered from all workers for one tensor; `weights`
    (None = all 1.0) are the aggregation weights, e.g. b_i / sum b for ScaDLES. Repeated indices,
    within or across parts, add up. The result is flat with `numel` elements: reshape with ctx.
    """
    import torch

    if weights is not None and len(weights) != len(parts):
        raise ValueError(f"{len(weights)} weights for {len(parts)} parts")
    if device is None:
        device = parts[0][0].device if parts else "cpu"
    out = torch.zeros(numel, dtype=dtype, device=device)
    for j, (values, indices) in enumerate(parts):
        v = values.to(device=device, dtype=dtype).reshape(-1)
        if weights is not None:
            v = v * weights[j]
        out.index_add_(0, indices.to(device=device, dtype=torch.int64).reshape(-1), v)
    return out
