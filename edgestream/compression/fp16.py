"""The `fp16` compressor: cast to half precision (AMP-style 2x compression, 004 section II)."""

from __future__ import annotations

import torch

from edgestream.compression.base import Compressed, tensor_ctx, wire_counts
from edgestream.compression.identity import NoneCompressor


class FP16Compressor(NoneCompressor):
    """Payload [flat float16 tensor]; floats = ceil(numel / 2). Values representable in fp16 decode
    bit-exactly; others round to nearest (and overflow to +-inf beyond 65504, as casts do). Decoding
    and (no) state are the identity's."""

    name = "fp16"

    def compress(self, tensor: torch.Tensor, name: str) -> Compressed:
        payload = [tensor.reshape(-1).to(torch.float16)]
        floats, nbytes = wire_counts(payload)
        return Compressed(payload, tensor_ctx(tensor), floats, nbytes)
