"""The parameter server's wire (edgestream.ps.wire, whose module doc is the format): a message's header, tables
and constants, its encoding into chunks (`encode`, `chunks`), and a chunk's header read and checked (`peek`).
Reading chunks back into messages: ps/reassembly.py."""

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


# ---------------------------------------------------------------------------------------------- read a header
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
