"""The `none` compressor: send the tensor as it is (the dense baseline)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgestream.compression.base import Compressed, tensor_ctx, wire_counts

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    import torch


class NoneCompressor:
    """Identity: payload [flat tensor]; floats = numel for float32 (bytes / 4 in general)."""

    name = "none"
    sparse = False

    def compress(self, tensor: torch.Tensor, name: str) -> Compressed:
        payload = [tensor.reshape(-1)]
        floats, nbytes = wire_counts(payload)
        return Compressed(payload, tensor_ctx(tensor), floats, nbytes)

    def decompress(self, c: Compressed) -> torch.Tensor:
        shape, _, dtype = c.ctx
        return c.payload[0].to(dtype).reshape(shape)

    def state_dict(self) -> dict:
        """Stateless: {} (see `Compressor.state_dict`)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None
