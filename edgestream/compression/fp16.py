"""The `fp16` compressor: cast to half precision (AMP-style 2x compression, 004 section II)."""

from __future__ import annotations

import torch

from edgestream.compression.base import Compressed, tensor_ctx, wire_counts


class FP16Compressor:
    """Payload [flat float16 tensor]; floats = ceil(numel / 2). Values representable in fp16 decode
    bit-exactly; others round to nearest (and overflow to +-inf beyond 65504, as casts do)."""

    name = "fp16"
    sparse = False

    def compress(self, tensor: torch.Tensor, name: str) -> Compressed:
        payload = [tensor.reshape(-1).to(torch.float16)]
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
