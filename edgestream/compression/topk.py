"""The `topk` compressor: per tensor, keep the k = max(1, ceil(ratio * numel)) largest magnitudes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgestream.compression.base import Compressed, k_of, tensor_ctx, wire_counts

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    import torch


def index_dtype(numel: int) -> torch.dtype:
    """int32 indices on the wire while they fit, int64 beyond 2^31 - 1 elements."""
    import torch

    return torch.int32 if numel <= torch.iinfo(torch.int32).max else torch.int64


def topk_indices(flat: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (int64) of the k entries of a flat tensor with the largest |value| (ties: any)."""
    import torch

    if k >= flat.numel():
        return torch.arange(flat.numel(), device=flat.device)
    return torch.topk(flat.abs(), k, sorted=False).indices


def topk_tensor(tensor: torch.Tensor, ratio: float) -> torch.Tensor:
    """Dense Top-k of a tensor: the k largest magnitudes kept in place, zeros elsewhere."""
    import torch

    flat = tensor.reshape(-1)
    idx = topk_indices(flat, k_of(ratio, flat.numel()))
    out = torch.zeros_like(flat)
    out[idx] = flat[idx]
    return out.reshape(tensor.shape)


def sparse_decompress(c: Compressed) -> torch.Tensor:
    """Dense tensor of the ctx shape/dtype from a (values, indices) payload."""
    import torch

    shape, numel, dtype = c.ctx
    values, indices = c.payload
    out = torch.zeros(numel, dtype=dtype, device=values.device)
    out[indices.to(torch.int64)] = values.to(dtype)
    return out.reshape(shape)


class TopKCompressor:
    """Top-k sparsification (Aji & Heafield; 004 ref. [25]).

    Payload [values (tensor dtype, float32 for gradients), indices (int32, flat)]; floats = 2k for
    float32. The ratio applies per tensor, so every layer keeps at least one entry.
    """

    name = "topk"
    sparse = True

    def __init__(self, ratio: float = 0.1) -> None:
        k_of(ratio, 1)  # validates the ratio
        self.ratio = ratio

    def k(self, numel: int) -> int:
        """Entries kept of a tensor with `numel` elements."""
        return k_of(self.ratio, numel)

    def compress(self, tensor: torch.Tensor, name: str) -> Compressed:
        flat = tensor.reshape(-1)
        return sparse_compress(tensor, topk_indices(flat, self.k(flat.numel())))

    def decompress(self, c: Compressed) -> torch.Tensor:
        return sparse_decompress(c)

    def state_dict(self) -> dict:
        """Stateless: {} (see `Compressor.state_dict`)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None


def sparse_compress(tensor: torch.Tensor, idx: torch.Tensor) -> Compressed:
    """The sparse payload [values at idx, idx] of `tensor` (flattened), indices in the smallest dtype
    that holds them; decoded by `sparse_decompress`."""
    flat = tensor.reshape(-1)
    payload = [flat[idx], idx.to(index_dtype(flat.numel()))]
    floats, nbytes = wire_counts(payload)
    return Compressed(payload, tensor_ctx(tensor), floats, nbytes)
