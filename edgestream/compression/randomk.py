"""The `randomk` compressor: keep k = max(1, ceil(ratio * numel)) uniformly random coordinates."""

from __future__ import annotations

import zlib

import torch

from edgestream.compression.base import Compressed, k_of
from edgestream.compression.topk import sparse_compress, sparse_decompress


class RandomKCompressor:
    """Random-k sparsification, seeded per (seed, tensor name, call count).

    The c-th call for tensor `name` draws its indices from a generator seeded with
    (seed, crc32(name), c), so workers built with the same seed that compress the same tensors in
    the same order pick the same coordinates (a communicator could then all-reduce values only).
    Values are not rescaled by numel / k (as in GRACE): pair it with error feedback. The payload
    still carries the indices, so `sparse` is True and bytes are counted with them.
    """

    name = "randomk"
    sparse = True

    def __init__(self, ratio: float = 0.1, seed: int = 0) -> None:
        k_of(ratio, 1)
        self.ratio = ratio
        self.seed = seed
        self._calls: dict[str, int] = {}

    def indices(self, name: str, numel: int, call: int) -> torch.Tensor:
        """The indices (int64, sorted) that call number `call` for tensor `name` keeps."""
        gen = torch.Generator().manual_seed(
            (self.seed * 1_000_003 + zlib.crc32(name.encode()) * 7_919 + call) % (2**63 - 1)
        )
        k = k_of(self.ratio, numel)
        return torch.randperm(numel, generator=gen)[:k].sort().values

    def compress(self, tensor: torch.Tensor, name: str) -> Compressed:
        call = self._calls.get(name, 0)
        self._calls[name] = call + 1
        return sparse_compress(tensor, self.indices(name, tensor.numel(), call).to(tensor.device))

    def decompress(self, c: Compressed) -> torch.Tensor:
        return sparse_decompress(c)

    def state_dict(self) -> dict:
        """{"calls": {tensor name: calls so far}}: the next draw of each tensor."""
        return {"calls": dict(self._calls)}

    def load_state_dict(self, state: dict) -> None:
        self._calls = {str(k): int(v) for k, v in state.get("calls", {}).items()}
