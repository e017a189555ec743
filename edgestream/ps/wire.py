"""The parameter server's tensor wire format: envelopes of tensors chunked into Kafka message values.

One logical message (`Envelope`: run, kind, worker, seq, model version, plain meta, tensors) becomes one or
more chunks. Each chunk is one Kafka value: a fixed little-endian header, the run name, then the chunk's
slice of the message body.

Header (`struct` format "<4sBBBBIQqIIQQQIH", 66 bytes):

    magic        4s   b"ESPS"
    version      u8   WIRE_VERSION (2)
    kind         u8   index in KINDS ("push", "pull", "hello", "reply")
    flags        u8   bit 0: the body holds sparse tensors; other bits must be 0
    reserved     u8   0
    worker       u32  worker rank
    seq          u64  push: the push id; pull/hello: the request id; reply: the id of the request it answers
    model ver.   i64  push: the version it was computed on; reply: the version of the model sent
    chunk        u32  this chunk's index, 0 .. nchunks-1
    nchunks      u32  chunks of the message (1 .. max(1, body_len))
    body_len     u64  length of the whole (reassembled) body
    body_sum     u64  the body's checksum: XXH3-64 of the message's slice sums (see below), each as a
                      little-endian u64, in chunk order
    chunk_sum    u64  this whole value's checksum: XXH3-64 of the header (this field zeroed) and the run name,
                      seeded with the slice sum, so a damaged header, run name or slice is caught alike
    chunk_len    u32  length of this chunk's slice of the body
    run_len      u16  length of the run name (1 .. 255)

then the run name (utf-8, `run_len` bytes), then the slice (`chunk_len` bytes). A message of body length
B cut at `max_bytes` has ceil(B / max_bytes) chunks (one when B is 0); chunk i holds body[i*max_bytes:
(i+1)*max_bytes]. A chunk's slice sum is XXH3-64 of its slice (seed 0).

Checksums: each side reads every body byte once for them (the slice sums; the chunk and body sums are
derived from those), and XXH3 runs at several GB/s, so a 45 MB model costs milliseconds, not the ~70 ms
per side of the two CRC-32 passes of wire version 1. (Kafka's own record-batch CRC-32C guards the bytes
between client and broker; these sums make every chunk self-checking from the producer to the reader.)

Body: u32 meta length, meta JSON (utf-8, compact, `Infinity`/`NaN` allowed): {"m": the caller's meta,
"t": the tensor table}, then the tensors' raw little-endian bytes in table order. A table entry is
{"dtype": "float32" | "float64" | "float16" | "bfloat16" | "int64" | "int32" | "int16" | "int8" | "uint8" |
"bool", "shape": [...], "layout": "dense" | "sparse", "nnz": k}. A dense tensor is its numel*itemsize bytes
(row-major); a sparse one is k flat indices (int32; int64 when numel >= 2**31), ascending, then its k
values in its dtype; decoding scatters them into zeros. The sparse layout is chosen (with `sparse=True`)
for floating tensors at most a third non-zero whose sparse form is smaller; "zero" is bitwise (+0.0
only), so -0.0 and NaN survive and every round trip is bit-exact. The table's sizes must add up to the
body length exactly.

A model's floating buffers (BatchNorm running statistics; edgestream.sync.buffers) ride in the same body:
a push or reply whose caller meta holds "buffers": k ends its tensors with the model's k floating
buffers (`split_buffers`); a message without the key carries none, so a model without floating buffers
sends exactly the bytes it did before.

Never pickle: JSON and raw arrays only. Whatever bytes arrive, decoding raises nothing but `WireError`
(its str() is the one-line reason), and nothing of a rejected chunk is kept.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from xxhash import xxh3_64
from xxhash import xxh3_64_intdigest as _xxh3

from edgestream.compression import payload_nbytes as tensor_bytes  # noqa: F401 (the one dense-bytes count)

WIRE_VERSION = 2
MAGIC = b"ESPS"
KINDS = ("push", "pull", "hello", "reply")
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024

_HEAD = struct.Struct("<4sBBBBIQqIIQQQIH")
_SUM_AT = struct.calcsize("<4sBBBBIQqIIQQ")  # offset of chunk_sum in the header
_U32 = struct.Struct("<I")
_FLAG_SPARSE = 1
_MAX_RUN = 255
_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}
_SIZES = {k: torch.empty((), dtype=v).element_size() for k, v in _DTYPES.items()}
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}  # same-size integer views of floats
_LAYOUTS = ("dense", "sparse")
if sys.byteorder != "little":  # pragma: no cover - every platform edgestream runs on is little-endian
    raise ImportError("edgestream.ps.wire moves raw little-endian arrays; this platform is big-endian")


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
    """One chunk's fixed header (and run name), as `peek` read and checked it."""

    version: int
    kind: str
    worker: int
    seq: int
    model_version: int
    chunk: int
    nchunks: int
    body_len: int
    body_sum: int
    chunk_sum: int
    run: str
    sparse: bool
    chunk_len: int = 0  # length of this chunk's slice of the body
    offset: int = 0     # where the slice starts in the value


# ---------------------------------------------------------------------------------------------- encode
def _bytes_of(t: Tensor) -> memoryview:
    """The raw bytes of a contiguous CPU copy (or view) of `t`, without a further copy."""
    flat = t.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def _encode_tensor(t: Tensor, sparse: bool) -> tuple[dict[str, Any], list[memoryview]]:
    name = _NAMES.get(t.dtype)
    if name is None:
        raise ValueError(f"tensors: dtype {t.dtype} cannot go on the wire (allowed: {', '.join(_DTYPES)})")
    if t.layout != torch.strided:
        t = t.to_dense()
    entry: dict[str, Any] = {"dtype": name, "shape": list(t.shape), "layout": "dense", "nnz": 0}
    n = t.numel()
    if sparse and t.is_floating_point() and n:
        size = _SIZES[name]
        flat = t.detach().contiguous().reshape(-1)
        bits = flat.view(_BITS[size])  # bitwise non-zero: -0.0 and NaN are kept as values
        nnz = int(torch.count_nonzero(bits))
        isz = 8 if n >= 2**31 else 4
        if nnz * 3 <= n and nnz * (isz + size) < n * size:
            idx = torch.nonzero(bits).reshape(-1)
            entry.update(layout="sparse", nnz=nnz)
            return entry, [_bytes_of(idx.to(torch.int64 if isz == 8 else torch.int32)), _bytes_of(flat[idx])]
    return entry, [_bytes_of(t)]


def _check(env: Envelope, max_bytes: int) -> bytes:
    if not isinstance(env.kind, str) or env.kind not in KINDS:
        raise ValueError(f"kind: {env.kind!r} is not one of {', '.join(KINDS)}")
    if not isinstance(env.worker, int) or not 0 <= env.worker < 2**32:
        raise ValueError(f"worker: must be an int in 0 .. 2**32-1, got {env.worker!r}")
    if not isinstance(env.seq, int) or not 0 <= env.seq < 2**64:
        raise ValueError(f"seq: must be an int in 0 .. 2**64-1, got {env.seq!r}")
    if not isinstance(env.version, int) or not -(2**63) <= env.version < 2**63:
        raise ValueError(f"version: must be a 64-bit int, got {env.version!r}")
    if not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes: must be an int >= 1, got {max_bytes!r}")
    if not isinstance(env.run, str):
        raise ValueError(f"run: must be a str, got {type(env.run).__name__}")
    run = env.run.encode()
    if not 1 <= len(run) <= _MAX_RUN:
        raise ValueError(f"run: must be 1-{_MAX_RUN} utf-8 bytes, got {len(run)}")
    if not isinstance(env.meta, dict):
        raise ValueError(f"meta: must be a dict, got {type(env.meta).__name__}")
    if not all(isinstance(t, Tensor) for t in env.tensors):
        raise ValueError("tensors: must all be torch tensors")
    return run


def encode(env: Envelope, max_bytes: int = DEFAULT_CHUNK_BYTES, *, sparse: bool = True) -> list[bytes]:
    """The Kafka values of `env`: one chunk, or n chunks whose bodies are at most `max_bytes` each (header
    excluded). ValueError (naming the field) for an envelope that cannot be sent."""
    return list(chunks(env, max_bytes, sparse=sparse))


def chunks(env: Envelope, max_bytes: int = DEFAULT_CHUNK_BYTES, *, sparse: bool = True) -> Iterator[bytes]:
    """`encode`'s values one at a time, each built (its one copy of the body bytes) when asked for, so a
    sender hands chunk i to Kafka while it builds chunk i+1. The envelope is checked, and the checksums
    taken, before this returns (ValueError naming the field, as `encode`)."""
    run = _check(env, max_bytes)
    table, parts = [], []
    for t in env.tensors:
        entry, raw = _encode_tensor(t, sparse)
        table.append(entry)
        parts += raw
    try:
        meta = json.dumps({"m": env.meta, "t": table}, separators=(",", ":"), allow_nan=True).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"meta: not plain JSON ({exc})") from None
    flags = _FLAG_SPARSE if any(e["layout"] == "sparse" for e in table) else 0
    return _frame(KINDS.index(env.kind), flags, env.worker, env.seq, env.version, run,
                  [memoryview(_U32.pack(len(meta))), memoryview(meta), *parts], max_bytes)


def _slices(parts: Sequence[memoryview], body_len: int, max_bytes: int) -> list[list[memoryview]]:
    """The body that is `parts` concatenated, cut at `max_bytes`: per chunk, the views that make its slice."""
    n = max(1, -(-body_len // max_bytes))
    out = []
    it = iter(p for p in parts if len(p))
    cur, pos = memoryview(b""), 0
    for i in range(n):
        want = min(max_bytes, body_len - i * max_bytes)
        pieces = []
        while want:
            if pos == len(cur):
                cur, pos = next(it), 0
            take = min(want, len(cur) - pos)
            pieces.append(cur[pos:pos + take])
            pos += take
            want -= take
        out.append(pieces)
    return out


def _slice_sum(pieces: Sequence[Any]) -> int:
    """XXH3-64 of the concatenated `pieces` (seed 0), without concatenating them."""
    if len(pieces) == 1:
        return _xxh3(pieces[0])
    h = xxh3_64()
    for p in pieces:
        h.update(p)
    return h.intdigest()


def _body_sum(slice_sums: Sequence[int]) -> int:
    return _xxh3(struct.pack(f"<{len(slice_sums)}Q", *slice_sums))


def _frame(kind: int, flags: int, worker: int, seq: int, version: int, run: bytes, parts: Sequence[memoryview],
           max_bytes: int) -> Iterator[bytes]:
    """The chunks of the body that is `parts` concatenated: its bytes are read once for the checksums now,
    then copied once, into each chunk as it is asked for."""
    body_len = sum(len(p) for p in parts)
    slices = _slices(parts, body_len, max_bytes)
    sums = [_slice_sum(pieces) for pieces in slices]
    body_sum = _body_sum(sums)
    n = len(slices)

    def gen() -> Iterator[bytes]:
        for i, (pieces, ssum) in enumerate(zip(slices, sums, strict=True)):
            yield _pack_chunk([MAGIC, WIRE_VERSION, kind, flags, 0, worker, seq, version, i, n, body_len, body_sum,
                               0, sum(len(p) for p in pieces), len(run)], run, pieces, ssum)

    return gen()


def _pack_chunk(fields: list[Any], run: bytes, pieces: Sequence[Any], slice_sum: int | None = None) -> bytes:
    """One chunk: the header of `fields` with its chunk sum filled in, the run name, the body pieces."""
    ssum = _slice_sum(pieces) if slice_sum is None else slice_sum
    csum = _xxh3(_HEAD.pack(*fields[:12], 0, *fields[13:]) + run, ssum)
    return b"".join([_HEAD.pack(*fields[:12], csum, *fields[13:]), run, *pieces])


def split_buffers(tensors: list[Tensor], meta: dict[str, Any]) -> tuple[list[Tensor], list[Tensor]]:
    """(model tensors, floating buffers) of a message whose meta "buffers" says how many buffers end its
    tensors (none without the key); ValueError for a count that is not one."""
    k = meta.get("buffers", 0)
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= len(tensors):
        raise ValueError(f"meta buffers: {k!r} is not a count of the message's {len(tensors)} tensors")
    return (tensors[:len(tensors) - k], tensors[len(tensors) - k:]) if k else (list(tensors), [])


# ---------------------------------------------------------------------------------------------- decode
def peek(value: bytes) -> Header:
    """The chunk's fixed header and run name, checked (magic, version, kind, flags, sizes, run name utf-8);
    WireError with the reason otherwise. The slice and the checksums are checked by `Reassembler.add`."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise WireError(f"not bytes: {type(value).__name__}")
    if isinstance(value, memoryview):
        try:
            value = value.cast("B")
        except TypeError as exc:
            raise WireError(f"not a flat byte buffer: {exc}") from None
    if len(value) < 5:
        raise WireError(f"truncated header: {len(value)} of at least {_HEAD.size} bytes")
    if bytes(value[:4]) != MAGIC:
        raise WireError("bad magic: not a parameter-server message")
    if value[4] != WIRE_VERSION:
        raise WireError(f"unknown wire version {value[4]} (this edgestream reads {WIRE_VERSION})")
    if len(value) < _HEAD.size:
        raise WireError(f"truncated header: {len(value)} of at least {_HEAD.size} bytes")
    (_magic, version, kind, flags, _res, worker, seq, mver, chunk, nchunks, body_len, body_sum, chunk_sum,
     chunk_len, run_len) = _HEAD.unpack_from(value)
    if kind >= len(KINDS):
        raise WireError(f"unknown kind {kind}")
    if flags & ~_FLAG_SPARSE:
        raise WireError(f"unknown flags 0x{flags:02x}")
    if not 1 <= nchunks <= max(1, body_len) or chunk >= nchunks:
        raise WireError(f"chunk {chunk} of {nchunks}: out of range for a body of {body_len} bytes")
    if chunk_len > body_len:
        raise WireError(f"chunk size mismatch: a chunk of {chunk_len} bytes in a body of {body_len}")
    if not 1 <= run_len <= _MAX_RUN:
        raise WireError(f"bad run name length {run_len}")
    end = _HEAD.size + run_len
    if len(value) < end:
        raise WireError(f"truncated header: run name of {run_len} bytes cut short at {len(value) - _HEAD.size}")
    try:
        run = bytes(value[_HEAD.size:end]).decode()
    except UnicodeDecodeError:
        raise WireError("run name is not utf-8") from None
    return Header(version, KINDS[kind], worker, seq, mver, chunk, nchunks, body_len, body_sum, chunk_sum, run,
                  bool(flags & _FLAG_SPARSE), chunk_len, end)


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
