"""`ParamDigest`: a step line's parameter digest, taken at the step and hashed when the line is written.

The digest is a short blake2b of the parameters' bytes (equal digests = bitwise-identical replicas).
Taking it is a copy: parameters of one dtype and device in a row become one flat snapshot, on a GPU copied
to pinned host memory without waiting (an event marks when it is there). Hashing -- waiting for that copy
and for the step's work before it -- happens at `str()`, which the live event log's flusher calls when it
encodes the line (edgestream.metrics.events), off the step: the trainer never stops the GPU for a digest.
"""

from __future__ import annotations

import hashlib

import torch
from torch._utils import _flatten_dense_tensors


def runs_of(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """`params` (detached) in runs of consecutive tensors of one dtype and device, in order."""
    runs: list[list[torch.Tensor]] = []
    for p in params:
        if not runs or (p.dtype, p.device) != (runs[-1][0].dtype, runs[-1][0].device):
            runs.append([])
        runs[-1].append(p.detach())
    return runs


class DigestTaker:
    """Takes `ParamDigest`s of the same parameters step after step: their runs are found once, so a digest
    costs one flattening call per run (not a Python call per tensor) plus, on a GPU, the copy's launch."""

    __slots__ = ("runs",)

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.runs = runs_of(params)

    def __call__(self) -> ParamDigest:
        return ParamDigest(runs=self.runs)


class ParamDigest:
    """The digest of `params` (or of ready `runs`, see `runs_of`) as they are now; str() is the hex digest
    (computed once)."""

    __slots__ = ("_parts", "_event", "_value")

    def __init__(self, params: list[torch.Tensor] = (), *, runs: list[list[torch.Tensor]] | None = None) -> None:
        self._event = None
        self._value: str | None = None
        with torch.no_grad():
            self._parts = [self._snapshot(run) for run in (runs_of(params) if runs is None else runs)]
        if self._event is not None:
            self._event.record()

    def _snapshot(self, run: list[torch.Tensor]) -> torch.Tensor:
        # one C++ call flattens and joins the run (a copy: the parameters change after the step)
        flat = _flatten_dense_tensors(run) if len(run) > 1 else run[0].reshape(-1).clone()
        if flat.device.type != "cuda":
            return flat
        host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
        host.copy_(flat, non_blocking=True)
        if self._event is None:
            self._event = torch.cuda.Event()
        return host

    def __str__(self) -> str:
        if self._value is None:
            if self._event is not None:
                self._event.synchronize()
            h = hashlib.blake2b(digest_size=8)
            for part in self._parts:
                h.update(part.view(torch.uint8).numpy())  # the bytes, whatever the dtype (bfloat16 too)
            self._value, self._parts, self._event = h.hexdigest(), [], None
        return self._value

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))
