"""The model-version format (docs/model-format.md is its spec; this module is one implementation of it, in
plain Python: no torch, no numpy).

A version is one *body*: a u32 little-endian length, the metadata JSON (utf-8), then the files' bytes
concatenated in the order the metadata's "files" lists them. The body travels as 1..n *chunks* on the
run's compacted models topic, one Kafka message each, keyed `v<version>.<chunk>` (ASCII, decimal):

    header  struct "<4sBBHQIIQ32s32sH" (98 bytes, little-endian)
        magic          4s   b"ESMV"
        format         u8   FORMAT_VERSION (1)
        flags          u8   0
        reserved       u16  0
        version        u64  the model version (1, 2, ...)
        chunk          u32  this chunk's index, 0 .. nchunks-1
        nchunks        u32  1 .. max(1, body_len)
        body_len       u64  the whole body's length
        body_sha256    32s  SHA-256 of the whole body
        chunk_sha256   32s  SHA-256 of this value with this field zeroed (header, run name, slice)
        run_len        u16  1 .. 255
    run name (utf-8, run_len bytes), then the slice: body[chunk * C : (chunk + 1) * C] for the chunk size C
    the writer chose (every chunk but the last holds C bytes).

Only standard hashes and JSON, so a reader in C, Go or Java needs no edgestream. Whatever bytes arrive,
reading raises nothing but `FormatError` (str(): one line, the reason) and keeps nothing of a refused chunk.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

MAGIC = b"ESMV"
FORMAT_VERSION = 1
FORMAT_NAME = "edgestream.model"
HEADER = struct.Struct("<4sBBHQIIQ32s32sH")
_SUM_AT = struct.calcsize("<4sBBHQIIQ32s")  # offset of chunk_sha256
_U32 = struct.Struct("<I")
MAX_RUN = 255
#: the chunk size (body bytes per message) writers use unless told otherwise
DEFAULT_CHUNK_BYTES = 1024 * 1024
#: file names a version may carry (model.onnx: the ONNX graph; model.safetensors: the weights)
ONNX_FILE, WEIGHTS_FILE, META_FILE = "model.onnx", "model.safetensors", "meta.json"
#: Kafka record headers a writer sets (informational: the value is authoritative)
HEADER_RUN, HEADER_VERSION, HEADER_CHUNK = "es-model-run", "es-model-version", "es-model-chunk"


class FormatError(ValueError):
    """Bytes that are not a valid model version (or chunk of one); str() is the one-line reason."""


def chunk_key(version: int, chunk: int) -> bytes:
    """The Kafka key of chunk `chunk` of version `version`: distinct per chunk, so compaction keeps them."""
    return f"v{int(version)}.{int(chunk)}".encode()


@dataclass(frozen=True)
class ChunkHeader:
    version: int
    chunk: int
    nchunks: int
    body_len: int
    body_sha256: bytes
    chunk_sha256: bytes
    run: str
    offset: int  # where the slice starts in the value


@dataclass
class ModelVersion:
    """A complete, checked version: `meta` (the metadata JSON) and `files` (name -> bytes)."""

    version: int
    meta: dict[str, Any]
    files: dict[str, bytes] = field(repr=False)

    @property
    def run(self) -> str:
        return str(self.meta["run"])

    @property
    def step(self) -> int:
        return int(self.meta.get("step", 0))


# ------------------------------------------------------------------------------------------------ writing
def file_entries(files: Mapping[str, bytes]) -> list[dict[str, Any]]:
    """The metadata's "files" list for `files` (in their order): name, size, sha256 (hex)."""
    return [{"name": n, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in files.items()]


def metadata(run: str, version: int, meta: Mapping[str, Any], files: Mapping[str, bytes]) -> dict[str, Any]:
    """A version's whole metadata: `meta` with its run, version, format and "files" filled in."""
    return {**meta, "run": run, "version": int(version), "format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "files": file_entries(files)}


def body_of(doc: Mapping[str, Any], files: Mapping[str, bytes]) -> bytes:
    """The body of a version: its metadata `doc` (`metadata`) as compact JSON and the files."""
    raw = json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False).encode()
    return b"".join([_U32.pack(len(raw)), raw, *files.values()])


def encode(run: str, version: int, meta: Mapping[str, Any], files: Mapping[str, bytes],
           chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    """The messages of a version as (key, value, headers). ValueError naming the argument that cannot be sent."""
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version < 2**63:
        raise ValueError(f"version: must be an int >= 1, got {version!r}")
    return chunk_body(run, version, body_of(metadata(run, version, meta, files), files), chunk_bytes)


def chunk_body(run: str, version: int, body: bytes, chunk_bytes: int = DEFAULT_CHUNK_BYTES
               ) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    """A body cut into the messages (key, value, headers) of version `version` of run `run`."""
    raw_run = run.encode() if isinstance(run, str) else b""
    if not 1 <= len(raw_run) <= MAX_RUN:
        raise ValueError(f"run: must be 1-{MAX_RUN} utf-8 bytes, got {run!r}")
    if not isinstance(chunk_bytes, int) or chunk_bytes < 1:
        raise ValueError(f"chunk_bytes: must be an int >= 1, got {chunk_bytes!r}")
    body_sum = hashlib.sha256(body).digest()
    n = max(1, -(-len(body) // chunk_bytes))
    out = []
    for i in range(n):
        piece = body[i * chunk_bytes:(i + 1) * chunk_bytes]
        fields = [MAGIC, FORMAT_VERSION, 0, 0, version, i, n, len(body), body_sum]
        zeroed = HEADER.pack(*fields, bytes(32), len(raw_run))
        csum = hashlib.sha256(zeroed + raw_run + piece).digest()
        value = HEADER.pack(*fields, csum, len(raw_run)) + raw_run + piece
        headers = [(HEADER_RUN, raw_run), (HEADER_VERSION, str(version).encode()), (HEADER_CHUNK, f"{i}/{n}".encode())]
        out.append((chunk_key(version, i), value, headers))
    return out


# ------------------------------------------------------------------------------------------------ reading
def peek(value: Any) -> ChunkHeader:
    """A chunk's header and run name, checked (magic, format, sizes, its checksum); FormatError otherwise."""
    if not isinstance(value, (bytes, bytearray)):
        raise FormatError(f"not bytes: {type(value).__name__}")
    if len(value) < 5 or bytes(value[:4]) != MAGIC:
        raise FormatError("bad magic: not a model-version chunk")
    if value[4] != FORMAT_VERSION:
        raise FormatError(f"unknown format version {value[4]} (this reader reads {FORMAT_VERSION})")
    if len(value) < HEADER.size:
        raise FormatError(f"truncated header: {len(value)} of at least {HEADER.size} bytes")
    _m, _f, flags, res, version, chunk, nchunks, body_len, body_sum, csum, run_len = HEADER.unpack_from(value)
    if flags or res:
        raise FormatError(f"unknown flags 0x{flags:02x} / reserved {res}")
    if not 1 <= run_len <= MAX_RUN or len(value) < HEADER.size + run_len:
        raise FormatError(f"bad run name length {run_len}")
    if not 1 <= nchunks <= max(1, body_len) or chunk >= nchunks:
        raise FormatError(f"chunk {chunk} of {nchunks}: out of range for a body of {body_len} bytes")
    if hashlib.sha256(bytes(value[:_SUM_AT]) + bytes(32) + bytes(value[_SUM_AT + 32:])).digest() != csum:
        raise FormatError(f"bad checksum: chunk {chunk} of {nchunks} of version {version}")
    try:
        run = bytes(value[HEADER.size:HEADER.size + run_len]).decode()
    except UnicodeDecodeError:
        raise FormatError("run name is not utf-8") from None
    return ChunkHeader(version, chunk, nchunks, body_len, body_sum, csum, run, HEADER.size + run_len)


def _int(meta: dict, key: str) -> int:
    v = meta.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise FormatError(f"metadata {key}: {v!r} is not an integer")
    return v


def decode_body(body: bytes, run: str, version: int) -> ModelVersion:
    """A whole body (its SHA-256 already checked) -> a ModelVersion, every file's size and SHA-256 and the
    metadata's run, version and format checked; FormatError with the reason otherwise."""
    if len(body) < 4:
        raise FormatError(f"body of {len(body)} bytes: no room for the metadata length")
    (mlen,) = _U32.unpack_from(body)
    if 4 + mlen > len(body):
        raise FormatError(f"metadata of {mlen} bytes in a body of {len(body)}")
    try:
        meta = json.loads(body[4:4 + mlen].decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"metadata is not JSON: {exc}"[:200]) from None
    if not isinstance(meta, dict):
        raise FormatError("metadata is not a JSON object")
    if meta.get("format") != FORMAT_NAME or _int(meta, "format_version") != FORMAT_VERSION:
        raise FormatError(f"metadata format {meta.get('format')!r} {meta.get('format_version')!r}: this reader "
                          f"reads {FORMAT_NAME} {FORMAT_VERSION}")
    if meta.get("run") != run:
        raise FormatError(f"metadata run {meta.get('run')!r} is not the chunks' run {run!r}")
    if _int(meta, "version") != version:
        raise FormatError(f"metadata version {meta.get('version')!r} is not the chunks' version {version}")
    entries = meta.get("files")
    if not isinstance(entries, list):
        raise FormatError("metadata files: not a list")
    files: dict[str, bytes] = {}
    pos = 4 + mlen
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not isinstance(e.get("sha256"), str):
            raise FormatError(f"metadata files: bad entry {str(e)[:80]}")
        size = _int(e, "size")
        if size < 0 or pos + size > len(body) or e["name"] in files:
            raise FormatError(f"file {e['name']}: {size} bytes do not fit the body")
        data = body[pos:pos + size]
        if hashlib.sha256(data).hexdigest() != e["sha256"]:
            raise FormatError(f"file {e['name']}: sha256 mismatch")
        files[e["name"]] = data
        pos += size
    if pos != len(body):
        raise FormatError(f"{len(body) - pos} bytes left in the body after the files")
    return ModelVersion(version, meta, files)


@dataclass
class _Partial:
    head: ChunkHeader
    pieces: dict[int, bytes] = field(default_factory=dict)


class Assembler:
    """Collects the chunks of run `run`'s versions; `add(value)` returns the ModelVersion its last chunk
    completes, else None, and raises FormatError for a chunk (or a version) it refuses: malformed, a bad
    checksum, another run (once per version), chunks that disagree, files whose checksums fail. A repeated chunk
    is ignored.
    Partial versions older than the newest one seen are dropped (bounded memory: at most `keep` partials)."""

    def __init__(self, run: str, keep: int = 2) -> None:
        self.run, self.keep = run, keep
        self._parts: dict[int, _Partial] = {}
        self._foreign: set[tuple[str, int, bytes]] = set()  # the foreign versions refused lately

    def add(self, value: Any) -> ModelVersion | None:
        h = peek(value)
        if h.run != self.run:  # said once per version (its other chunks are dropped silently)
            if (h.run, h.version, h.body_sha256) in self._foreign:
                return None
            self._foreign = {*list(self._foreign)[-15:], (h.run, h.version, h.body_sha256)}
            raise FormatError(f"foreign run: version {h.version} is of run {h.run}, this is {self.run}")
        piece = bytes(value[h.offset:])
        held = self._parts.get(h.version)
        if held is None:
            held = self._parts[h.version] = _Partial(h)
            for old in sorted(self._parts)[:-self.keep]:
                del self._parts[old]
            if h.version not in self._parts:
                return None
        elif (held.head.nchunks, held.head.body_len, held.head.body_sha256) != (h.nchunks, h.body_len, h.body_sha256):
            del self._parts[h.version]
            raise FormatError(f"inconsistent chunk {h.chunk} of version {h.version}: its header disagrees with the "
                              "version's earlier chunks (version dropped)")
        held.pieces[h.chunk] = piece
        if len(held.pieces) < h.nchunks:
            return None
        del self._parts[h.version]
        body = b"".join(held.pieces[i] for i in range(h.nchunks))
        if len(body) != h.body_len or hashlib.sha256(body).digest() != h.body_sha256:
            raise FormatError(f"bad checksum: body of version {h.version}")
        return decode_body(body, self.run, h.version)


def read_all(values: Iterator[Any], run: str) -> tuple[dict[int, ModelVersion], list[str]]:
    """Every complete version in `values` (a topic's message values in order; None tombstones skipped) ->
    version -> ModelVersion, and the reasons of what was refused."""
    asm, out, refused = Assembler(run, keep=1 << 30), {}, []
    for value in values:
        if value is None:
            continue
        try:
            got = asm.add(value)
        except FormatError as exc:
            refused.append(str(exc))
            continue
        if got is not None:
            out[got.version] = got
    return out, refused
