"""Error-feedback memories: what a worker keeps of the part of a gradient it did not send."""

from __future__ import annotations

from typing import Any

import torch

from edgestream.compression.base import MEMORY_NAMES, Compressed, Compressor, Memory


class NoneMemory:
    """No error feedback: what compression drops is lost."""

    def compensate(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        return tensor

    def update(self, tensor: torch.Tensor, name: str, compressor: Compressor, compressed: Compressed) -> None:
        return None

    def reset(self, name: str | None = None) -> None:
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None


class ResidualMemory:
    """Error feedback (Seide et al. 2014; Karimireddy et al. 2019): t = g + e; send C(t); e = t - D(C(t)).

    Over any number of steps, sum of decompressed sends + final e = sum of gradients (mass is
    conserved). A dense step through the `none` compressor leaves e = 0, i.e. the residual is folded
    in once and reset; `reset(name)` drops it explicitly.
    """

    def __init__(self) -> None:
        self.residuals: dict[str, torch.Tensor] = {}

    def compensate(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        e = self.residuals.get(name)
        return tensor if e is None else tensor + e

    def update(self, tensor: torch.Tensor, name: str, compressor: Compressor, compressed: Compressed) -> None:
        self.residuals[name] = tensor - compressor.decompress(compressed)

    def residual(self, name: str) -> torch.Tensor | None:
        """The residual e of a tensor (None before its first update)."""
        return self.residuals.get(name)

    def reset(self, name: str | None = None) -> None:
        if name is None:
            self.residuals.clear()
        else:
            self.residuals.pop(name, None)

    def state_dict(self) -> dict:
        """{"residuals": {name: e}} (references: `update` replaces a residual, never edits it)."""
        return {"residuals": dict(self.residuals)}

    def load_state_dict(self, state: dict) -> None:
        self.residuals = dict(state.get("residuals", {}))


class DGCMemory:
    """Momentum correction and factor masking of Deep Gradient Compression (Lin et al. 2018, 004 ref. [28]).

    compensate(g): u = m * u + g; v = v + u; returns a copy of v (the accumulated velocity to compress).
    update: for a sparse compressor, the coordinates it sent are cleared in both u and v (momentum
    factor masking); for a dense compressor every coordinate was sent, so u = 0 and
    v = v - D(C(v)) (zero for lossless codecs, the quantisation error otherwise).
    The momentum lives here, so the optimizer should run with momentum 0 when this memory is used.
    DGC's local gradient clipping and warm-up schedule are not part of this object.
    """

    def __init__(self, momentum: float = 0.9) -> None:
        if not 0 <= momentum < 1:
            raise ValueError(f"dgc momentum must be in [0, 1), got {momentum}")
        self.momentum = momentum
        self.u: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}

    def compensate(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        u = self.u.get(name)
        u = (tensor.clone() if u is None else self.momentum * u + tensor).contiguous()
        v = self.v.get(name)
        v = (u.clone() if v is None else v + u).contiguous()
        self.u[name], self.v[name] = u, v
        return v.clone()  # the caller's copy; update() edits the stored one

    def update(self, tensor: torch.Tensor, name: str, compressor: Compressor, compressed: Compressed) -> None:
        if name not in self.v:
            raise KeyError(f"dgc memory: update({name!r}) without compensate")
        if compressor.sparse:
            idx = compressed.payload[1].to(torch.int64)
            self.u[name].view(-1)[idx] = 0
            self.v[name].view(-1)[idx] = 0
        else:
            self.u[name].zero_()
            self.v[name] = tensor - compressor.decompress(compressed)

    def reset(self, name: str | None = None) -> None:
        if name is None:
            self.u.clear()
            self.v.clear()
        else:
            self.u.pop(name, None)
            self.v.pop(name, None)

    def state_dict(self) -> dict:
        """{"u": {name: u}, "v": {name: v}}: references, edited in place by the next `update`."""
        return {"u": dict(self.u), "v": dict(self.v)}

    def load_state_dict(self, state: dict) -> None:
        self.u = {k: t.clone() for k, t in state.get("u", {}).items()}
        self.v = {k: t.clone() for k, t in state.get("v", {}).items()}


def build_memory(name: str | None = "none", **params: Any) -> Memory:
    """An error-feedback memory: "none", "residual" (e = t - decompress(compress(t))) or
    "dgc" (momentum correction, param `momentum`, default 0.9). None means "none"."""
    name = name or "none"
    if name == "none":
        return NoneMemory()
    if name == "residual":
        return ResidualMemory()
    if name == "dgc":
        return DGCMemory(momentum=float(params.get("momentum", 0.9)))
    raise ValueError(f"unknown memory {name!r}; allowed: {', '.join(MEMORY_NAMES)}")
