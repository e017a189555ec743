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


class ParamDigest:
    """The digest of `params` as they are now; str() is the hex digest (computed once)."""

    __slots__ = ("_parts", "_event", "_value")

    def __init__(self, params: list[torch.Tensor]) -> None:
        self._parts: list[torch.Tensor] = []
        self._event = None
        self._value: str | None = None
        run: list[torch.Tensor] = []
        with torch.no_grad():
            for p in [*params, None]:
                if run and (p is None or (p.dtype, p.device) != (run[0].dtype, run[0].device)):
                    self._parts.append(self._snapshot(run))
                    run = []
                if p is not None:
                    run.append(p.detach())
        if self._event is not None:
            self._event.record()

    def _snapshot(self, run: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.cat([t.reshape(-1) for t in run]) if len(run) > 1 else run[0].reshape(-1).clone()
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
                h.update(part.numpy())
            self._value, self._parts, self._event = h.hexdigest(), [], None
        return self._value

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))
