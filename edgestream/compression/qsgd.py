"""The `qsgd` compressor: stochastic quantisation of Alistarh et al. (QSGD, NeurIPS 2017; 004 ref. [29])."""

from __future__ import annotations

import torch

from edgestream.compression.base import Compressed, tensor_ctx, wire_counts


def level_dtype(levels: int) -> torch.dtype:
    """Smallest signed integer type that holds -levels..levels."""
    if levels <= torch.iinfo(torch.int8).max:
        return torch.int8
    if levels <= torch.iinfo(torch.int16).max:
        return torch.int16
    return torch.int32


class QSGDCompressor:
    """Q_s(v)_i = ||v||_2 * sign(v_i) * xi_i / s, with xi_i = l + Bernoulli(s|v_i|/||v|| - l),
    l = floor(s|v_i|/||v||). Unbiased: E[Q_s(v)] = v.

    Payload [norm (float32, 1 element), signed levels (int8 for s <= 127, int16 for s <= 32767)]:
    nbytes = 4 + numel * itemsize, honestly counted (no Elias coding). Default s = 256 -> int16,
    i.e. about 2x compression; s = 127 gives about 4x. The Bernoulli draws come from a generator
    seeded once with `seed` and advanced by every call.
    """

    name = "qsgd"
    sparse = False

    def __init__(self, levels: int = 256, seed: int = 0) -> None:
        if levels < 1:
            raise ValueError(f"qsgd needs levels >= 1, got {levels}")
        self.levels = levels
        self.seed = seed
        self._gens: dict[str, torch.Generator] = {}

    def _generator(self, device: torch.device) -> torch.Generator:
        key = str(device)
        if key not in self._gens:
            self._gens[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self._gens[key]

    def compress(self, tensor: torch.Tensor, name: str) -> Compressed:
        flat = tensor.reshape(-1).to(torch.float32)
        norm = flat.norm()
        s = self.levels
        if norm > 0:
            scaled = flat.abs() / norm * s
            lower = scaled.floor()
            u = torch.rand(flat.shape, generator=self._generator(flat.device), device=flat.device)
            xi = (lower + (u < (scaled - lower)).to(flat.dtype)).clamp_(max=s)  # rounding guard
            q = (flat.sign() * xi).to(level_dtype(s))
        else:
            q = torch.zeros(flat.shape, dtype=level_dtype(s), device=flat.device)
        payload = [norm.reshape(1), q]
        floats, nbytes = wire_counts(payload)
        return Compressed(payload, tensor_ctx(tensor) + (s,), floats, nbytes)

    def state_dict(self) -> dict:
        """{"generators": {device: generator state (a uint8 CPU tensor)}}."""
        return {"generators": {key: gen.get_state() for key, gen in self._gens.items()}}

    def load_state_dict(self, state: dict) -> None:
        self._gens = {}
        for key, gen_state in state.get("generators", {}).items():
            gen = torch.Generator(device=torch.device(key))
            gen.set_state(gen_state.cpu() if gen_state.device.type != "cpu" else gen_state)
            self._gens[key] = gen

    def decompress(self, c: Compressed) -> torch.Tensor:
        shape, _, dtype, s = c.ctx
        norm, q = c.payload
        return (q.to(torch.float32) * (norm / s)).to(dtype).reshape(shape)
