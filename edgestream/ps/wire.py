"""The parameter server's tensor wire format: envelopes of tensors chunked into Kafka message values.

One logical message (`Envelope`: run, kind, worker, seq, model version, plain meta, tensors) becomes
one or more chunks, each a Kafka value of a fixed little-endian header and a slice of the body:

    header  "<4sBBBBIQqIIQIIIH" = magic b"ESPS", wire version (1), kind (index in KINDS), flags (bit 0:
            the body holds sparse tensors), reserved, worker u32, seq u64, model version i64, chunk
            index u32, chunk count u32, body length u64 (the whole body), body CRC-32, the chunk's
            CRC-32 (of the whole value with this field zeroed: header, run name and slice), this
            chunk's length u32, run name length u16; then the run name (utf-8), then the chunk's slice
            of the body.
    body    u32 meta length, meta JSON (utf-8: {"m": the caller's meta, "t": the tensor table}), then
            the tensors' raw little-endian bytes in order. Table entries: {"dtype", "shape", "layout":
            "dense" | "sparse", "nnz"}; a sparse tensor is its flat indices (int32, int64 from 2**31
            elements) then its nnz values.

Never pickle: JSON and raw arrays only. A sparse layout is used for floating tensors at most a third
non-zero (a Top-k update costs its compressed size on the wire). A chunk that is malformed, truncated,
fails a checksum or names another run raises `WireError` with the reason; nothing of it is applied.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

WIRE_VERSION = 1
MAGIC = b"ESPS"
KINDS = ("push", "pull", "hello", "reply")
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
_HEAD = struct.Struct("<4sBBBBIQqIIQIIIH")
_FLAG_SPARSE = 1
_CRC_AT = struct.calcsize("<4sBBBBIQqIIQI")  # where the chunk's CRC-32 sits in the header
_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}
if sys.byteorder != "little":  # pragma: no cover - every platform edgestream runs on is little-endian
    raise ImportError("edgestream.ps.wire writes raw little-endian arrays; this platform is big-endian")


class WireError(ValueError):
    """A message that cannot be accepted; str() is the reason (one line)."""


@dataclass
class Envelope:
    """One logical PS message (see the module doc)."""

    run: str
    kind: str
    worker: int
    seq: int
    version: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    tensors: list[Tensor] = field(default_factory=list)


@dataclass(frozen=True)
class Header:
    """One chunk's fixed header."""

    version: int
    kind: str
    worker: int
    seq: int
    model_version: int
    chunk: int
    nchunks: int
    body_len: int
    body_crc: int
    chunk_crc: int
    chunk_len: int
    run: str
    sparse: bool
    offset: int  # where the chunk's body slice starts in the value


def tensor_bytes(tensors: Any) -> int:
    """Bytes of the tensors, dense."""
    return sum(t.numel() * t.element_size() for t in tensors)


def _raw(t: Tensor) -> bytes:
    t = t.detach().contiguous().cpu()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def _encode_tensor(t: Tensor, sparse: bool) -> tuple[dict, list[bytes]]:
    name = _NAMES.get(t.dtype)
    if name is None:
        raise ValueError(f"tensors: dtype {t.dtype} cannot go on the wire (allowed: {', '.join(_DTYPES)})")
    entry = {"dtype": name, "shape": list(t.shape), "layout": "dense", "nnz": 0}
    n = t.numel()
    if sparse and t.is_floating_point() and n >= 8:
        flat = t.detach().reshape(-1)
        idx = torch.nonzero(flat, as_tuple=False).reshape(-1)
        nnz = int(idx.numel())
        if nnz * 3 <= n:
            idx_dtype = torch.int64 if n >= 2**31 else torch.int32
            entry.update(layout="sparse", nnz=nnz)
            return entry, [_raw(idx.to(idx_dtype)), _raw(flat[idx])]
    return entry, [_raw(t)]


def encode(env: Envelope, max_bytes: int = DEFAULT_CHUNK_BYTES, *, sparse: bool = True) -> list[bytes]:
    """The Kafka values of `env`: chunks whose body slices are at most `max_bytes` each."""
    if env.kind not in KINDS:
        raise ValueError(f"kind: {env.kind!r} is not one of {', '.join(KINDS)}")
    if env.worker < 0:
        raise ValueError(f"worker: must be >= 0, got {env.worker}")
    if env.seq < 0:
        raise ValueError(f"seq: must be >= 0, got {env.seq}")
    if max_bytes < 1:
        raise ValueError(f"max_bytes: must be >= 1, got {max_bytes}")
    run = env.run.encode()
    if not run or len(run) > 255:
        raise ValueError(f"run: must be 1-255 utf-8 bytes, got {len(run)}")
    table, parts = [], []
    any_sparse = False
    for t in env.tensors:
        entry, raw = _encode_tensor(t, sparse)
        any_sparse |= entry["layout"] == "sparse"
        table.append(entry)
        parts += raw
    meta = json.dumps({"m": env.meta, "t": table}, separators=(",", ":"), allow_nan=True).encode()
    body = b"".join([struct.pack("<I", len(meta)), meta, *parts])
    body_crc = zlib.crc32(body)
    n = max(1, -(-len(body) // max_bytes))
    view = memoryview(body)
    out = []
    for i in range(n):
        piece = view[i * max_bytes:(i + 1) * max_bytes]
        fields = [MAGIC, WIRE_VERSION, KINDS.index(env.kind), _FLAG_SPARSE if any_sparse else 0, 0, env.worker,
                  env.seq, int(env.version), i, n, len(body), body_crc, 0, len(piece), len(run)]
        crc = zlib.crc32(piece, zlib.crc32(run, zlib.crc32(_HEAD.pack(*fields))))
        fields[12] = crc
        out.append(b"".join([_HEAD.pack(*fields), run, piece]))
    return out


def peek(value: bytes) -> Header:
    """The chunk's header, checked (magic, version, kind, sizes, run name); WireError otherwise."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise WireError(f"not bytes: {type(value).__name__}")
    if len(value) < _HEAD.size:
        raise WireError(f"truncated header: {len(value)} of at least {_HEAD.size} bytes")
    (magic, version, kind, flags, _res, worker, seq, mver, chunk, nchunks, body_len, body_crc, chunk_crc,
     chunk_len, run_len) = _HEAD.unpack_from(value)
    if magic != MAGIC:
        raise WireError("bad magic: not a parameter-server message")
    if version != WIRE_VERSION:
        raise WireError(f"unknown wire version {version} (this edgestream reads {WIRE_VERSION})")
    if kind >= len(KINDS):
        raise WireError(f"unknown kind {kind}")
    if nchunks < 1 or chunk >= nchunks:
        raise WireError(f"chunk {chunk} of {nchunks}: out of range")
    end = _HEAD.size + run_len
    if len(value) < end:
        raise WireError(f"truncated header: run name of {run_len} bytes cut short")
    try:
        run = bytes(value[_HEAD.size:end]).decode()
    except UnicodeDecodeError:
        raise WireError("run name is not utf-8") from None
    if chunk_len > body_len:
        raise WireError(f"chunk of {chunk_len} bytes in a body of {body_len}")
    return Header(version, KINDS[kind], worker, seq, mver, chunk, nchunks, body_len, body_crc, chunk_crc,
                  chunk_len, run, bool(flags & _FLAG_SPARSE), end)


def _decode_body(body: bytes, h: Header, device: Any) -> Envelope:
    if len(body) < 4:
        raise WireError("body size mismatch: no meta length")
    (mlen,) = struct.unpack_from("<I", body)
    if 4 + mlen > len(body):
        raise WireError(f"body size mismatch: meta of {mlen} bytes in a body of {len(body)}")
    try:
        meta = json.loads(bytes(body[4:4 + mlen]).decode())
        user, table = meta["m"], meta["t"]
        if not isinstance(user, dict) or not isinstance(table, list):
            raise TypeError("meta must hold an object 'm' and a list 't'")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise WireError(f"bad meta: {exc}") from None
    pos = 4 + mlen
    tensors = []
    for i, e in enumerate(table):
        try:
            dtype = _DTYPES[e["dtype"]]
            shape = [int(x) for x in e["shape"]]
            layout, nnz = e["layout"], int(e.get("nnz", 0))
        except (KeyError, TypeError, ValueError):
            raise WireError(f"bad tensor table entry {i}: {e!r}"[:200]) from None
        if any(x < 0 for x in shape) or layout not in ("dense", "sparse"):
            raise WireError(f"bad tensor table entry {i}: {e!r}"[:200])
        numel = 1
        for x in shape:
            numel *= x
        size = torch.empty((), dtype=dtype).element_size()
        if layout == "dense":
            need = numel * size
            if pos + need > len(body):
                raise WireError(f"body size mismatch: tensor {i} needs {need} bytes, {len(body) - pos} left")
            t = _from(body, pos, numel, dtype).reshape(shape)
            pos += need
        else:
            if not 0 <= nnz <= numel or not dtype.is_floating_point:
                raise WireError(f"bad tensor table entry {i}: sparse nnz {nnz} of {numel}")
            idx_dtype = torch.int64 if numel >= 2**31 else torch.int32
            isz = 8 if idx_dtype == torch.int64 else 4
            need = nnz * (isz + size)
            if pos + need > len(body):
                raise WireError(f"body size mismatch: tensor {i} needs {need} bytes, {len(body) - pos} left")
            idx = _from(body, pos, nnz, idx_dtype).long()
            vals = _from(body, pos + nnz * isz, nnz, dtype)
            pos += need
            if nnz and (int(idx.min()) < 0 or int(idx.max()) >= numel):
                raise WireError(f"tensor {i}: sparse index out of range")
            t = torch.zeros(numel, dtype=dtype)
            t[idx] = vals
            t = t.reshape(shape)
        tensors.append(t.to(device) if str(device) != "cpu" else t)
    if pos != len(body):
        raise WireError(f"body size mismatch: {len(body) - pos} bytes left after the tensors")
    return Envelope(h.run, h.kind, h.worker, h.seq, h.model_version, user, tensors)


def _from(body: bytes, pos: int, n: int, dtype: torch.dtype) -> Tensor:
    size = torch.empty((), dtype=dtype).element_size()
    if n == 0:
        return torch.empty(0, dtype=dtype)
    raw = bytearray(body[pos:pos + n * size])  # a writable copy the tensor owns
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype)


class Reassembler:
    """Collects the chunks of one run's messages (see the module doc and `add`)."""

    def __init__(self, run: str, *, device: str | torch.device = "cpu") -> None:
        self.run = run
        self.device = device
        self._parts: dict[tuple[str, int], tuple[Header, dict[int, bytes], int]] = {}
        self.lost: list[str] = []

    def pending(self) -> int:
        """Partial messages held."""
        return len(self._parts)

    def add(self, value: bytes) -> Envelope | None:
        """The complete Envelope once its last chunk arrived, else None (a repeated chunk is ignored).
        WireError for a bad chunk (module doc); nothing of it is kept. A chunk of a newer message of the
        same kind and worker drops an incomplete older one; the reason goes to `lost` (callers drain it)
        and the newer message is collected as usual. At most one partial message per (kind, worker)."""
        h = peek(value)
        if h.run != self.run:
            raise WireError(f"foreign run: header says {h.run}, this is {self.run}")
        piece = memoryview(value)[h.offset:]
        if len(piece) != h.chunk_len:
            raise WireError(f"truncated chunk: {len(piece)} of {h.chunk_len} bytes (chunk {h.chunk} of {h.nchunks}, "
                            f"worker {h.worker} seq {h.seq})")
        crc = zlib.crc32(memoryview(value)[_CRC_AT + 4:], zlib.crc32(b"\0\0\0\0", zlib.crc32(value[:_CRC_AT])))
        if crc != h.chunk_crc:
            raise WireError(f"bad checksum: chunk {h.chunk} of {h.nchunks} (worker {h.worker} seq {h.seq})")
        key = (h.kind, h.worker)
        held = self._parts.get(key)
        if held is not None:
            first, chunks, size = held
            if first.seq != h.seq:
                missing = [i for i in range(first.nchunks) if i not in chunks]
                self.lost.append(f"incomplete: message {first.kind} worker {first.worker} seq {first.seq} lost "
                                 f"chunk(s) {missing[:8]} of {first.nchunks}")
                del self._parts[key]
                held = None
            elif (first.nchunks, first.body_len, first.body_crc) != (h.nchunks, h.body_len, h.body_crc):
                raise WireError(f"inconsistent chunk {h.chunk}: {h.nchunks} chunks / {h.body_len} bytes, earlier "
                                f"chunks said {first.nchunks} / {first.body_len}")
        first, chunks, size = held if held is not None else (h, {}, 0)
        if h.chunk in chunks:
            return None
        if size + len(piece) > h.body_len:
            raise WireError(f"size mismatch: chunks would hold {size + len(piece)} bytes of a {h.body_len}-byte body")
        chunks[h.chunk] = bytes(piece)
        size += len(piece)
        if len(chunks) < h.nchunks:
            self._parts[key] = (first, chunks, size)
            return None
        self._parts.pop(key, None)
        body = b"".join(chunks[i] for i in range(h.nchunks))
        if len(body) != h.body_len:
            raise WireError(f"truncated message: the chunks hold {len(body)} of {h.body_len} bytes")
        if zlib.crc32(body) != h.body_crc:
            raise WireError(f"bad checksum: body of worker {h.worker} seq {h.seq}")
        return _decode_body(body, h, self.device)

    def drain_lost(self) -> list[str]:
        """Reasons of the messages dropped incomplete since the last call."""
        out, self.lost = self.lost, []
        return out


def decode_one(value: bytes, run: str) -> Envelope:
    """A single-chunk message decoded (WireError when it is not complete)."""
    env = Reassembler(run).add(value)
    if env is None:
        raise WireError("incomplete: a chunk of a multi-chunk message")
    return env
