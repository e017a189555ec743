"""Chunks of the parameter server's wire (edgestream.ps.wire, whose module doc is the format) back into messages:
`Reassembler` (every chunk's checks, then the body's), `decode_one`, and a body decoded into tensors that view
one writable copy of it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from xxhash import xxh3_64_intdigest as _xxh3

from edgestream.ps.frames import (
    _DTYPES,
    _LAYOUTS,
    _NAMES,
    _SIZES,
    _SUM_AT,
    _U32,
    Envelope,
    Header,
    WireError,
    _body_sum,
    peek,
)


def _take(body: memoryview, pos: int, n: int, dtype: torch.dtype) -> Tensor:
    """n elements of `dtype` at body[pos:]: a writable view of the body (a private bytearray the decoder
    made; the tensors of one message never overlap), so a decoded model costs one copy of its bytes."""
    if n == 0:
        return torch.empty(0, dtype=dtype)
    if isinstance(body.obj, bytearray) and body.nbytes == len(body.obj):
        return torch.frombuffer(body.obj, dtype=dtype, count=n, offset=pos)
    raw = bytearray(body[pos:pos + n * _SIZES[_NAMES[dtype]]])  # not the decoder's own buffer: copy
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype)


def _entry(i: int, e: Any) -> tuple[torch.dtype, list[int], str, int, int]:
    bad = WireError(f"bad tensor table entry {i}: {e!r}"[:200])
    if not isinstance(e, dict):
        raise bad
    dtype, shape, layout, nnz = e.get("dtype"), e.get("shape"), e.get("layout"), e.get("nnz", 0)
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise WireError(f"tensor {i}: unknown dtype {dtype!r}"[:200])
    if not isinstance(layout, str) or layout not in _LAYOUTS:
        raise WireError(f"tensor {i}: unknown layout {layout!r}"[:200])
    if not isinstance(shape, list) or len(shape) > 64 \
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape):
        raise bad
    if not isinstance(nnz, int) or isinstance(nnz, bool) or nnz < 0:
        raise bad
    numel = 1
    for x in shape:
        numel *= x
    return _DTYPES[dtype], shape, layout, nnz, numel


def _decode_body(body: memoryview, h: Header, device: torch.device) -> Envelope:
    if len(body) < 4:
        raise WireError(f"body size mismatch: {len(body)} bytes, no room for the meta length")
    (mlen,) = _U32.unpack_from(body)
    if 4 + mlen > len(body):
        raise WireError(f"body size mismatch: meta of {mlen} bytes in a body of {len(body)}")
    try:
        meta = json.loads(bytes(body[4:4 + mlen]).decode())
        if not isinstance(meta, dict) or not isinstance(meta.get("m"), dict) or not isinstance(meta.get("t"), list):
            raise TypeError("meta must be an object holding an object 'm' and a list 't'")
    except (ValueError, TypeError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError included
        raise WireError(f"bad meta: {exc}"[:300]) from None
    pos = 4 + mlen
    tensors = []
    for i, e in enumerate(meta["t"]):
        dtype, shape, layout, nnz, numel = _entry(i, e)
        size = _SIZES[_NAMES[dtype]]
        if layout == "dense":
            need = numel * size
            if need > len(body) - pos:
                raise WireError(f"body size mismatch: tensor {i} needs {need} bytes, {len(body) - pos} left")
            t = _take(body, pos, numel, dtype)
            if dtype == torch.bool and numel and int(t.view(torch.uint8).max()) > 1:
                raise WireError(f"tensor {i}: bool bytes other than 0 and 1")
        else:
            if not dtype.is_floating_point or nnz > numel:
                raise WireError(f"tensor {i}: sparse {_NAMES[dtype]} with nnz {nnz} of {numel}")
            isz = 8 if numel >= 2**31 else 4
            need = nnz * (isz + size)
            if need > len(body) - pos:
                raise WireError(f"body size mismatch: tensor {i} needs {need} bytes, {len(body) - pos} left")
            idx = _take(body, pos, nnz, torch.int64 if isz == 8 else torch.int32).long()
            if nnz and (int(idx.min()) < 0 or int(idx.max()) >= numel):
                raise WireError(f"tensor {i}: sparse index out of range 0 .. {numel - 1}")
            try:
                t = torch.zeros(numel, dtype=dtype)
            except (RuntimeError, MemoryError):
                raise WireError(f"tensor {i}: cannot allocate a sparse tensor of {numel} elements") from None
            t[idx] = _take(body, pos + nnz * isz, nnz, dtype)
        pos += need
        t = t.reshape(shape)
        tensors.append(t if device.type == "cpu" else t.to(device))
    if pos != len(body):
        raise WireError(f"body size mismatch: {len(body) - pos} bytes left after the tensors")
    return Envelope(h.run, h.kind, h.worker, h.seq, h.model_version, meta["m"], tensors)


@dataclass
class _Partial:
    head: Header
    pieces: dict[int, memoryview]
    sums: dict[int, int]  # the slice sums of the chunks held
    size: int = 0


def _missing(p: _Partial) -> str:
    gone = [i for i in range(p.head.nchunks) if i not in p.pieces]
    shown = ", ".join(map(str, gone[:8])) + (f", ... (+{len(gone) - 8})" if len(gone) > 8 else "")
    return f"[{shown}]"


class Reassembler:
    """Collects chunks for ONE run; `add` returns the complete Envelope when the last chunk of a message
    arrives, else None.

    `add` raises WireError (the reason) for a chunk that is malformed, truncated, fails its checksum (the
    chunk's, or after reassembly the body's), belongs to another run, is of an unknown version or kind, or
    disagrees with the chunks of its message collected so far (chunk count, body length or CRC, model
    version); nothing of such a chunk is kept. A repeated chunk is ignored (None).

    A message whose chunks stop arriving is dropped when a chunk of a newer message (same kind and worker,
    different seq) arrives: `add` stores the new chunk, then raises WireError('incomplete: message <kind>
    worker <w> seq <s> lost chunk(s) [<list>] of <n>'); the caller counts a rejection and goes on, and the
    newer message completes as usual. When that new chunk itself completes its message (a single-chunk
    one), `add` returns the message instead of raising, and the reason goes to `lost` (see `drain_lost`).
    An incomplete copy of the message completed last (a chunk delivered twice) is dropped silently.
    Memory is bounded: at most one partial message per (kind, worker).
    """

    def __init__(self, run: str, *, device: str | torch.device = "cpu") -> None:
        self.run = run
        self.device = torch.device(device)
        self.lost: list[str] = []
        self._parts: dict[tuple[str, int], _Partial] = {}
        self._done: dict[tuple[str, int], tuple[int, int]] = {}  # (seq, body_sum) completed last

    def pending(self) -> int:
        """Partial messages held."""
        return len(self._parts)

    def drain_lost(self) -> list[str]:
        """Reasons of the incomplete messages dropped without an exception (the chunk that dropped one
        completed a newer message, which `add` returned) since the last call."""
        out, self.lost = self.lost, []
        return out

    def add(self, value: bytes) -> Envelope | None:
        """The complete Envelope once its last chunk arrived, else None; WireError for a bad chunk (class doc)."""
        h = peek(value)
        if h.run != self.run:
            raise WireError(f"foreign run: header says {h.run}, this is {self.run}")
        view = memoryview(value if isinstance(value, bytes) else bytes(value))  # a view of bytes stays valid
        piece = view[h.offset:]
        where = f"chunk {h.chunk} of {h.nchunks}, {h.kind} worker {h.worker} seq {h.seq}"
        if len(piece) < h.chunk_len:
            raise WireError(f"truncated chunk: {len(piece)} of {h.chunk_len} bytes ({where})")
        if len(piece) > h.chunk_len:
            raise WireError(f"chunk size mismatch: {len(piece)} bytes, the header says {h.chunk_len} ({where})")
        ssum = _xxh3(piece)  # the one pass over the chunk's bytes for its checksums
        if _xxh3(bytes(view[:_SUM_AT]) + bytes(8) + bytes(view[_SUM_AT + 8:h.offset]), ssum) != h.chunk_sum:
            raise WireError(f"bad checksum: {where}")
        if h.nchunks == 1 and h.chunk_len != h.body_len:
            raise WireError(f"body size mismatch: a single chunk of {h.chunk_len} bytes, body of {h.body_len}")
        key = (h.kind, h.worker)
        lost = None
        held = self._parts.get(key)
        if held is not None and held.head.seq != h.seq:
            del self._parts[key]
            if self._done.get(key) != (held.head.seq, held.head.body_sum):
                lost = (f"incomplete: message {held.head.kind} worker {held.head.worker} seq {held.head.seq} lost "
                        f"chunk(s) {_missing(held)} of {held.head.nchunks}")
            held = None
        if held is None:
            held = _Partial(h, {}, {})
        else:
            first = held.head
            if (first.nchunks, first.body_len, first.body_sum, first.model_version, first.sparse) != \
                    (h.nchunks, h.body_len, h.body_sum, h.model_version, h.sparse):
                raise WireError(f"inconsistent chunk: {where} says {h.nchunks} chunks / {h.body_len} bytes / sum "
                                f"{h.body_sum:016x} / model version {h.model_version}, earlier chunks said "
                                f"{first.nchunks} / {first.body_len} / {first.body_sum:016x} / {first.model_version}")
            if h.chunk in held.pieces:
                return None
            if held.size + len(piece) > h.body_len:
                raise WireError(f"body size mismatch: the chunks would hold {held.size + len(piece)} bytes of a "
                                f"{h.body_len}-byte body ({where})")
        held.pieces[h.chunk] = piece
        held.sums[h.chunk] = ssum
        held.size += len(piece)
        if len(held.pieces) < h.nchunks:
            self._parts[key] = held
            if lost is not None:
                raise WireError(lost)
            return None
        self._parts.pop(key, None)
        if lost is not None:
            self.lost.append(lost)
        if held.size != h.body_len:
            raise WireError(f"body size mismatch: the chunks hold {held.size} of {h.body_len} bytes ({where})")
        if _body_sum([held.sums[i] for i in range(h.nchunks)]) != h.body_sum:
            raise WireError(f"bad checksum: body of {h.kind} worker {h.worker} seq {h.seq}")
        # one writable copy of the body, which the decoded tensors view (see `_take`)
        body = memoryview(bytearray(piece) if h.nchunks == 1 else
                          bytearray().join(held.pieces[i] for i in range(h.nchunks)))
        self._done[key] = (h.seq, h.body_sum)
        return _decode_body(body, h, self.device)


def decode_one(value: bytes, run: str) -> Envelope:
    """A single-chunk message decoded: `Reassembler(run).add(value)`, WireError when it is not complete."""
    env = Reassembler(run).add(value)
    if env is None:
        h = peek(value)
        raise WireError(f"incomplete: chunk {h.chunk} of {h.nchunks} of a multi-chunk message")
    return env
