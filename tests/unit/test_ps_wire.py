"""The PS tensor wire format (edgestream.ps.wire): bit-exact round trips over dtypes, shapes, sparsity, meta and
chunk sizes (in order and shuffled), chunking of a resnet18-sized model, the sparse layout's size, and every kind
of bad chunk rejected with its reason (random bytes never raise anything but WireError)."""

from __future__ import annotations

import json
import random
import struct

import pytest
import torch
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgestream.ps import wire
from edgestream.ps.wire import (
    DEFAULT_CHUNK_BYTES,
    KINDS,
    MAGIC,
    WIRE_VERSION,
    Envelope,
    Reassembler,
    WireError,
    decode_one,
    encode,
    peek,
    tensor_bytes,
)

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]
FIELDS = ["magic", "version", "kind", "flags", "reserved", "worker", "seq", "model_version", "chunk", "nchunks",
          "body_len", "body_sum", "chunk_sum", "chunk_len", "run_len"]


def _fast(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])


# ------------------------------------------------------------------------------------------------ helpers
def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Same count, dtypes, shapes and bits (NaN payloads and -0.0 included)."""
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and torch.equal(_bits(x), _bits(y))
                                    for x, y in zip(a, b, strict=True))


def _feed(r: Reassembler, values: list[bytes]) -> Envelope:
    outs = [r.add(v) for v in values]
    assert all(o is None for o in outs[:-1])
    assert outs[-1] is not None
    return outs[-1]


def _slice_len(v: bytes) -> int:
    return len(v) - peek(v).offset


def _forge(value: bytes, piece: bytes | None = None, run: bytes | None = None, **changes) -> bytes:
    """`value` with header fields changed and its chunk checksum recomputed (so only the change is wrong)."""
    h = peek(value)
    fields = dict(zip(FIELDS, wire._HEAD.unpack_from(value), strict=True))
    run = value[wire._HEAD.size:h.offset] if run is None else run
    piece = value[h.offset:] if piece is None else piece
    fields.update(chunk_len=len(piece), run_len=len(run))
    fields.update(changes)
    return wire._pack_chunk([fields[k] for k in FIELDS], run, [piece])


def _body(meta: object, *raw: bytes, text: bytes | None = None) -> bytes:
    m = json.dumps(meta).encode() if text is None else text
    return struct.pack("<I", len(m)) + m + b"".join(raw)


def _framed(body: bytes, max_bytes: int = 1 << 20, run: bytes = b"r") -> list[bytes]:
    """`body` (possibly invalid) framed as a push with correct chunk and body checksums."""
    return wire._frame(0, 0, 0, 1, 0, run, [memoryview(body)], max_bytes)


def _chunks(run: str = "r", seq: int = 1, worker: int = 0, kind: str = "push", n: int = 50,
            max_bytes: int = 60) -> list[bytes]:
    values = encode(Envelope(run, kind, worker, seq, 0, {"lr": 0.1}, [torch.randn(n)]), max_bytes)
    assert len(values) >= 4
    return values


@st.composite
def tensors(draw) -> torch.Tensor:
    dtype = draw(st.sampled_from(FLOATS + INTS))
    shape = draw(st.one_of(st.lists(st.integers(0, 7), max_size=4), st.tuples(st.integers(0, 700)).map(list)))
    zeros = draw(st.sampled_from([0.0, 0.5, 0.7, 0.95, 1.0]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    if dtype.is_floating_point:
        t = (torch.randn(shape, generator=g, dtype=torch.float64) * 10 ** draw(st.integers(-3, 3))).to(dtype)
        if t.numel() and draw(st.booleans()):  # NaN, +-inf and -0.0 must survive bit for bit
            flat = t.view(-1)
            for v in draw(st.lists(st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.0]), max_size=4)):
                flat[int(torch.randint(flat.numel(), (), generator=g))] = v
    elif dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=g).bool()
    else:
        info = torch.iinfo(dtype)
        t = torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)
    t[torch.rand(shape, generator=g) < zeros] = 0
    if t.dim() >= 2 and draw(st.booleans()):
        t = t.transpose(0, -1)  # non-contiguous input
    return t


meta_leaves = (st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=True)
               | st.text(max_size=8))
meta_values = st.recursive(meta_leaves, lambda kids: st.lists(kids, max_size=3)
                           | st.dictionaries(st.text(max_size=5), kids, max_size=3), max_leaves=10)
metas = st.dictionaries(st.text(max_size=6), meta_values, max_size=4)


# ------------------------------------------------------------------------------------------------ round trips
@_fast(80)
@given(ts=st.lists(tensors(), max_size=5), max_bytes=st.one_of(st.integers(1, 64), st.integers(65, 5000)),
       order=st.sampled_from(["in order", "shuffled", "reversed"]), meta=metas, sparse=st.booleans(),
       kind=st.sampled_from(KINDS), worker=st.integers(0, 2**32 - 1), seq=st.integers(0, 2**64 - 1),
       version=st.integers(-(2**63), 2**63 - 1), run=st.text(min_size=1, max_size=20))
def test_round_trip_is_bit_exact_in_any_chunking(ts, max_bytes, order, meta, sparse, kind, worker, seq, version,
                                                 run) -> None:
    env = Envelope(run, kind, worker, seq, version, meta, ts)
    values = encode(env, max_bytes, sparse=sparse)
    heads = [peek(v) for v in values]
    body_len = heads[0].body_len
    assert len(values) == max(1, -(-body_len // max_bytes))
    assert [h.chunk for h in heads] == list(range(len(values)))
    assert all(_slice_len(v) <= max_bytes for v in values) and sum(map(_slice_len, values)) == body_len
    assert all((h.kind, h.worker, h.seq, h.model_version, h.run, h.nchunks) == (kind, worker, seq, version, run,
                                                                                  len(values)) for h in heads)
    if order == "shuffled":
        random.Random(seq).shuffle(values)
    elif order == "reversed":
        values.reverse()
    r = Reassembler(run)
    out = _feed(r, values)
    assert r.pending() == 0
    assert (out.run, out.kind, out.worker, out.seq, out.version) == (run, kind, worker, seq, version)
    assert json.dumps(out.meta) == json.dumps(meta)  # also equal where NaN makes == fail
    assert _same(out.tensors, ts)
    assert all(t.device.type == "cpu" for t in out.tensors)
    ptrs = [t.untyped_storage().data_ptr() for t in out.tensors if t.numel()]
    assert len(set(ptrs)) == len(ptrs)  # each tensor owns its memory
    for t in out.tensors:  # and it is writable
        if t.numel():
            t.reshape(-1)[:1] = 0
    assert r.add(values[0]) is None or len(values) == 1  # a late repeat starts over, it is not an error


def test_meta_round_trips_infinities_nan_none_and_nesting() -> None:
    meta = {"a": float("inf"), "b": [float("-inf"), None, {"c": {"d": [1, 2.5, True, "x"]}}], "n": float("nan"),
            "e": {}, "f": [], "g": -0.0, "big": 2**62, "s": "ünïcødé"}
    out = decode_one(encode(Envelope("r", "hello", 3, 0, 0, meta))[0], "r")
    assert json.dumps(out.meta) == json.dumps(meta)
    assert out.meta["n"] != out.meta["n"] and out.meta["a"] == float("inf") and out.meta["b"][1] is None
    assert out.tensors == []


def test_zero_dim_empty_noncontiguous_grad_and_coo_tensors() -> None:
    w = torch.randn(4, 5, requires_grad=True)
    ts = [torch.tensor(2.5), torch.tensor(7, dtype=torch.int64), torch.tensor(True), torch.empty(0),
          torch.empty(3, 0, 2, dtype=torch.bfloat16), torch.randn(6, 8)[:, ::3], w * 2,
          torch.zeros(10, 10).index_put_((torch.tensor([1, 5]), torch.tensor([2, 9])), torch.tensor([1.0, -3.0]))]
    coo = ts[-1].to_sparse()
    for max_bytes in (1, 3, 17, DEFAULT_CHUNK_BYTES):
        out = _feed(Reassembler("r"), encode(Envelope("r", "reply", 1, 4, 2, {}, [*ts, coo]), max_bytes))
        assert _same(out.tensors, [t.detach() for t in ts] + [ts[-1]])
        assert not any(t.requires_grad for t in out.tensors)


def test_header_layout_is_the_documented_one() -> None:
    values = encode(Envelope("run-a", "reply", 7, 2**40 + 3, -2, {"k": 1}, [torch.arange(6.0)]), 50)
    v = values[1]
    (magic, version, kind, flags, reserved, worker, seq, mver, chunk, nchunks, body_len, body_sum, chunk_sum, chunk_len,
     run_len) = struct.unpack_from("<4sBBBBIQqIIQQQIH", v)
    assert (magic, version, kind, flags, reserved) == (MAGIC, WIRE_VERSION, KINDS.index("reply"), 0, 0) == \
        (b"ESPS", 2, 3, 0, 0)
    assert (worker, seq, mver, chunk, chunk_len, run_len) == (7, 2**40 + 3, -2, 1, 50, 5)
    assert v[66:71] == b"run-a" and len(v) == 66 + 5 + 50 and nchunks == -(-body_len // 50) == len(values)
    # the documented checksums, recomputed here from their definitions
    slice_sums = [xxhash.xxh3_64_intdigest(x[71:]) for x in values]
    assert chunk_sum == xxhash.xxh3_64_intdigest(v[:wire._SUM_AT] + bytes(8) + v[wire._SUM_AT + 8:71], seed=slice_sums[1])
    assert body_sum == xxhash.xxh3_64_intdigest(b"".join(struct.pack("<Q", x) for x in slice_sums))
    assert b"".join(x[71:] for x in values)[4:].startswith(b'{"m":{"k":1},"t":[')
    h = peek(v)
    assert (h.version, h.kind, h.worker, h.seq, h.model_version, h.chunk, h.nchunks, h.body_len, h.body_sum,
            h.chunk_sum, h.run, h.sparse) == (2, "reply", 7, 2**40 + 3, -2, 1, nchunks, body_len, body_sum, chunk_sum,
                                              "run-a", False)


def test_a_45_mb_model_goes_in_8_mib_chunks() -> None:
    big = [torch.randn(11_500_000), torch.randn(3, 7), torch.randn(512)]
    values = encode(Envelope("r", "reply", 2, 9, 4, {"step": 9}, big))
    body = peek(values[0]).body_len
    assert body > tensor_bytes(big) == 4 * (11_500_000 + 21 + 512)
    assert len(values) == -(-body // DEFAULT_CHUNK_BYTES) == 6
    assert all(_slice_len(v) == DEFAULT_CHUNK_BYTES for v in values[:-1])
    assert all(len(v) <= DEFAULT_CHUNK_BYTES + wire._HEAD.size + 1 for v in values)
    r = Reassembler("r")
    out = _feed(r, values[::-1])
    assert _same(out.tensors, big) and out.meta == {"step": 9}


@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_layout_shrinks_a_one_percent_dense_tensor(dtype: torch.dtype) -> None:
    t = torch.zeros(200, 200, dtype=dtype)
    idx = torch.randperm(t.numel())[:400]
    t.view(-1)[idx] = torch.randn(400).to(dtype)
    t.view(-1)[idx[0]] = -0.0  # bitwise non-zero: kept as a value
    env = Envelope("r", "push", 0, 1, 0, {}, [t])
    sparse, dense = encode(env), encode(env, sparse=False)
    assert peek(sparse[0]).sparse and not peek(dense[0]).sparse
    assert sum(map(len, sparse)) < 0.05 * tensor_bytes([t]) < sum(map(len, dense))
    out = decode_one(sparse[0], "r").tensors[0]
    assert _same([out], [t]) and out.view(-1)[idx[0]].item() == 0 and torch.signbit(out.view(-1)[idx[0]])
    assert _same(_feed(Reassembler("r"), encode(env, 97)).tensors, [t])


@pytest.mark.parametrize(("t", "is_sparse"), [
    (torch.cat([torch.randn(34), torch.zeros(66)]), True),       # 34 % non-zero: dense
    (torch.cat([torch.randn(33), torch.zeros(67)]), True),       # a third: sparse
    (torch.cat([torch.ones(10), torch.zeros(90)]).long(), False),  # integers stay dense
    (torch.zeros(50, dtype=torch.float16), True),
    (torch.empty(0), False),
])
def test_sparse_layout_only_where_it_pays(t: torch.Tensor, is_sparse: bool) -> None:
    nz = int(torch.count_nonzero(t)) if t.numel() else 0
    expected = is_sparse and nz * 3 <= t.numel()
    v = encode(Envelope("r", "push", 0, 1, 0, {}, [t]))[0]
    assert peek(v).sparse == expected
    assert _same(decode_one(v, "r").tensors, [t])


def test_tensor_bytes_counts_dense_bytes() -> None:
    assert tensor_bytes([]) == 0
    assert tensor_bytes([torch.zeros(3, 4), torch.zeros(5, dtype=torch.float16), torch.tensor(True)]) == 48 + 10 + 1


# ------------------------------------------------------------------------------------------------ rejections
@pytest.mark.parametrize(("damage", "reason"), [
    (lambda v: v[: len(v) - 3], r"^truncated chunk: 57 of 60 bytes \(chunk 1 of \d+, push worker 0 seq 1\)$"),
    (lambda v: v[:30], r"^truncated header: 30 of at least 66 bytes$"),
    (lambda v: v[:66], r"^truncated header: run name of 1 bytes cut short"),
    (lambda v: v[:3], r"^truncated header"),
    (lambda v: v + b"x", r"^chunk size mismatch: 61 bytes, the header says 60"),
    (lambda v: v[:-1] + bytes([v[-1] ^ 0x40]), r"^bad checksum: chunk 1 of \d+"),
    (lambda v: v[:14] + bytes([v[14] ^ 1]) + v[15:], r"^bad checksum"),  # seq in the header
    (lambda v: b"XXXX" + v[4:], r"^bad magic"),
    (lambda v: v[:4] + bytes([9]) + v[5:], r"^unknown wire version 9"),
    (lambda v: _forge(v, kind=17), r"^unknown kind 17$"),
    (lambda v: _forge(v, flags=0x82), r"^unknown flags 0x82$"),
    (lambda v: _forge(v, chunk=99), r"^chunk 99 of \d+: out of range"),
    (lambda v: _forge(v, nchunks=0), r"out of range"),
    (lambda v: _forge(v, run=b"\xff\xfe"), r"^run name is not utf-8$"),
    (lambda v: _forge(v, run=b"other"), r"^foreign run: header says other, this is r$"),
    (lambda v: _forge(v, run_len=0), r"^bad run name length 0$"),
    (lambda v: _forge(v, body_len=10), r"^chunk size mismatch: a chunk of 60 bytes in a body of 10$"),
])
def test_a_damaged_chunk_is_rejected_with_its_reason(damage, reason) -> None:
    r = Reassembler("r")
    values = _chunks()
    assert r.add(values[0]) is None
    with pytest.raises(WireError, match=reason):
        r.add(damage(values[1]))
    assert r.pending() == 1  # the message collected so far is kept, nothing of the bad chunk
    assert _feed(r, values[1:]).seq == 1


def test_a_header_for_another_run_is_rejected() -> None:
    with pytest.raises(WireError, match=r"^foreign run: header says run-b, this is run-a$"):
        Reassembler("run-a").add(encode(Envelope("run-b", "push", 0, 1))[0])


def test_a_chunk_disagreeing_with_its_message_is_rejected() -> None:
    env = Envelope("r", "push", 0, 3, 0, {"lr": 0.2}, [torch.randn(60)])
    a, b = encode(env, 60), encode(env, 70)  # same message, cut differently: nchunks disagree
    assert len(a) != len(b)
    r = Reassembler("r")
    r.add(a[0])
    with pytest.raises(WireError, match=rf"^inconsistent chunk: chunk 1 of \d+, .* says {len(b)} chunks"):
        r.add(b[1])
    with pytest.raises(WireError, match="inconsistent chunk"):  # same seq, another body
        r.add(encode(Envelope("r", "push", 0, 3, 0, {"lr": 0.3}, [torch.randn(60)]), 60)[1])
    with pytest.raises(WireError, match="inconsistent chunk"):  # same body, another model version
        r.add(encode(Envelope("r", "push", 0, 3, 5, {"lr": 0.2}, env.tensors), 60)[1])
    assert r.pending() == 1
    assert _same(_feed(r, a[1:]).tensors, env.tensors)


def test_a_body_failing_its_checksum_is_rejected_after_reassembly() -> None:
    values = _chunks()
    h = peek(values[2])
    piece = bytearray(values[2][h.offset:])
    piece[0] ^= 0xFF
    values[2] = _forge(values[2], piece=bytes(piece))  # the chunk's own checksum is right
    r = Reassembler("r")
    with pytest.raises(WireError, match=r"^bad checksum: body of push worker 0 seq 1$"):
        _feed(r, values)
    assert r.pending() == 0


@pytest.mark.parametrize(("body", "reason"), [
    (b"\x01\x00", r"^body size mismatch: 2 bytes"),
    (_body(None, text=b"{not json"), r"^bad meta: "),
    (_body(None, text=b"\xff\xfe"), r"^bad meta: "),
    (_body(None, text=b"[" * 20_000), r"^bad meta: "),
    (_body([1, 2]), r"^bad meta: "),
    (_body({"m": 1, "t": []}), r"^bad meta: "),
    (_body({"m": {}}), r"^bad meta: "),
    (struct.pack("<I", 1000) + b"{}", r"^body size mismatch: meta of 1000 bytes"),
    (_body({"m": {}, "t": []}, b"extra"), r"^body size mismatch: 5 bytes left after the tensors$"),
    (_body({"m": {}, "t": [{"dtype": "float32", "shape": [4], "layout": "dense"}]}, b"\0" * 15),
     r"^body size mismatch: tensor 0 needs 16 bytes, 15 left$"),
    (_body({"m": {}, "t": [{"dtype": "float32", "shape": [2**40, 2**40], "layout": "dense"}]}),
     r"^body size mismatch: tensor 0 needs"),
    (_body({"m": {}, "t": [{"dtype": "complex64", "shape": [1], "layout": "dense"}]}, b"\0" * 8),
     r"^tensor 0: unknown dtype 'complex64'$"),
    (_body({"m": {}, "t": [{"dtype": "float32", "shape": [1], "layout": "csr"}]}, b"\0" * 4),
     r"^tensor 0: unknown layout 'csr'$"),
    (_body({"m": {}, "t": [{"dtype": "float32", "shape": [-1], "layout": "dense"}]}), r"^bad tensor table entry 0"),
    (_body({"m": {}, "t": [{"dtype": "float32", "shape": [1.5], "layout": "dense"}]}), r"^bad tensor table entry 0"),
    (_body({"m": {}, "t": [{"dtype": "float32", "shape": "3", "layout": "dense"}]}), r"^bad tensor table entry 0"),
    (_body({"m": {}, "t": [7]}), r"^bad tensor table entry 0: 7$"),
    (_body({"m": {}, "t": [{"dtype": "int32", "shape": [4], "layout": "sparse", "nnz": 1}]}, b"\0" * 8),
     r"^tensor 0: sparse int32"),
    (_body({"m": {}, "t": [{"dtype": "float32", "shape": [4], "layout": "sparse", "nnz": 5}]}, b"\0" * 40),
     r"^tensor 0: sparse float32 with nnz 5 of 4$"),
    (_body({"m": {}, "t": [{"dtype": "float32", "shape": [4], "layout": "sparse", "nnz": 1}]},
           struct.pack("<i", 4), b"\0" * 4), r"^tensor 0: sparse index out of range 0 \.\. 3$"),
    (_body({"m": {}, "t": [{"dtype": "float32", "shape": [4], "layout": "sparse", "nnz": 1}]},
           struct.pack("<i", -1), b"\0" * 4), r"^tensor 0: sparse index out of range"),
    (_body({"m": {}, "t": [{"dtype": "bool", "shape": [2], "layout": "dense"}]}, b"\x01\x02"),
     r"^tensor 0: bool bytes other than 0 and 1$"),
])
def test_a_malformed_body_is_rejected_with_its_reason(body: bytes, reason: str) -> None:
    for max_bytes in (7, 1 << 20):
        with pytest.raises(WireError, match=reason):
            _feed(Reassembler("r"), _framed(body, max_bytes))


def test_a_well_formed_hand_built_body_decodes() -> None:  # the format is the documented one, not just encode's
    body = _body({"m": {"x": 1}, "t": [{"dtype": "float32", "shape": [2, 2], "layout": "sparse", "nnz": 2},
                                       {"dtype": "int16", "shape": [3], "layout": "dense", "nnz": 0}]},
                 struct.pack("<ii", 1, 3), struct.pack("<ff", 1.5, -2.0), struct.pack("<hhh", 1, -2, 3))
    out = _feed(Reassembler("r"), _framed(body, 11))
    assert out.meta == {"x": 1}
    assert _same(out.tensors, [torch.tensor([[0, 1.5], [0, -2.0]]), torch.tensor([1, -2, 3], dtype=torch.int16)])


@_fast(400)
@given(st.one_of(st.binary(max_size=300), st.binary(max_size=300).map(lambda b: MAGIC + bytes([WIRE_VERSION]) + b)))
def test_arbitrary_bytes_never_raise_anything_but_wire_error(data: bytes) -> None:
    r = Reassembler("r")
    try:
        r.add(data)
    except WireError as exc:
        assert "\n" not in str(exc)
    with pytest.raises(WireError):
        peek(data) if not data.startswith(MAGIC + bytes([WIRE_VERSION])) else decode_one(data, "r")


@_fast(200)
@given(body=st.binary(max_size=200), table=st.lists(st.fixed_dictionaries(
    {"dtype": st.sampled_from(["float32", "bfloat16", "bool", "int64", "uint8", "x"]),
     "shape": st.lists(st.integers(-1, 5), max_size=3), "layout": st.sampled_from(["dense", "sparse", "?"]),
     "nnz": st.integers(-1, 6)}), max_size=3), raw=st.binary(max_size=80))
def test_any_checksummed_body_decodes_or_raises_wire_error(body: bytes, table: list, raw: bytes) -> None:
    for candidate in (body, _body({"m": {}, "t": table}, raw)):  # random, and a random table over random bytes
        try:
            _feed(Reassembler("r"), _framed(candidate, 13))
        except WireError:
            pass


@_fast(200)
@given(cut=st.integers(0, 10_000), flip=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_any_truncation_or_bit_flip_of_a_valid_chunk_is_rejected(cut: int, flip: int, bit: int) -> None:
    value = encode(Envelope("r", "push", 1, 2, 3, {"k": [1, 2]}, [torch.randn(17), torch.arange(5)]))[0]
    with pytest.raises(WireError):
        Reassembler("r").add(value[:cut % len(value)])
    broken = bytearray(value)
    broken[flip % len(value)] ^= 1 << bit  # header, run name or body: the chunk checksum covers them all
    with pytest.raises(WireError):
        Reassembler("r").add(bytes(broken))


# ------------------------------------------------------------------------------------------------ lost chunks
def test_a_lost_chunk_is_reported_when_a_newer_message_starts_which_still_completes() -> None:
    r = Reassembler("r")
    first, second = _chunks(seq=1), _chunks(seq=2)
    for i, v in enumerate(first):
        if i not in (1, 3):  # chunks 1 and 3 of message 1 never arrive
            assert r.add(v) is None
    assert r.pending() == 1
    with pytest.raises(WireError, match=rf"^incomplete: message push worker 0 seq 1 lost chunk\(s\) \[1, 3\] of {len(first)}$"):
        r.add(second[0])
    assert r.pending() == 1  # the newer message's first chunk was kept
    out = _feed(r, second[1:])
    assert out.seq == 2 and r.pending() == 0 and r.drain_lost() == []


def test_a_lost_chunk_followed_by_a_single_chunk_message_loses_neither_the_message_nor_the_reason() -> None:
    r = Reassembler("r")
    first = _chunks(seq=1)
    for v in first[:-1]:
        r.add(v)
    (single,) = encode(Envelope("r", "push", 0, 2, 0, {}, [torch.ones(3)]))
    out = r.add(single)
    assert out is not None and out.seq == 2 and r.pending() == 0
    assert r.drain_lost() == [f"incomplete: message push worker 0 seq 1 lost chunk(s) [{len(first) - 1}] of "
                              f"{len(first)}"]
    assert r.drain_lost() == []


def test_a_redelivered_chunk_of_a_completed_message_is_not_reported_lost() -> None:
    r = Reassembler("r")
    first, second = _chunks(seq=1), _chunks(seq=2)
    assert _feed(r, first).seq == 1
    assert r.add(first[2]) is None  # Kafka delivered it twice
    assert _feed(r, second).seq == 2 and r.drain_lost() == []


def test_many_lost_chunks_are_listed_on_one_line() -> None:
    r = Reassembler("r")
    r.add(encode(Envelope("r", "pull", 4, 1, 0, {}, [torch.randn(100)]), 10)[0])
    with pytest.raises(WireError, match=r"^incomplete: message pull worker 4 seq 1 lost chunk\(s\) "
                                        r"\[1, 2, 3, 4, 5, 6, 7, 8, \.\.\. \(\+\d+\)\] of \d+$"):
        r.add(encode(Envelope("r", "pull", 4, 2, 0, {}, [torch.randn(100)]), 10)[0])


def test_interleaved_workers_and_kinds_reassemble_independently() -> None:
    r = Reassembler("r")
    streams = [_chunks(worker=0, seq=5), _chunks(worker=7, seq=5, n=70), _chunks(worker=0, seq=5, kind="pull"),
               _chunks(worker=2, seq=9, kind="hello", max_bytes=33)]
    queues = [list(s) for s in streams]
    rng = random.Random(0)
    done = []
    while any(queues):
        q = rng.choice([q for q in queues if q])
        v = q.pop(rng.randrange(len(q)))
        out = r.add(v)
        if out is None:
            assert r.add(v) is None  # a repeated chunk is ignored
        else:
            done.append((out.kind, out.worker, out.seq, out.tensors[0].numel()))
        assert r.pending() <= 4
    assert sorted(done) == [("hello", 2, 9, 50), ("pull", 0, 5, 50), ("push", 0, 5, 50), ("push", 7, 5, 70)]
    assert r.pending() == 0


def test_decode_one_wants_a_complete_single_chunk() -> None:
    with pytest.raises(WireError, match=r"^incomplete: chunk 0 of \d+ of a multi-chunk message$"):
        decode_one(_chunks()[0], "r")
    out = decode_one(encode(Envelope("r", "pull", 1, 8, 3, {"want": "model"}))[0], "r")
    assert (out.kind, out.worker, out.seq, out.version, out.meta, out.tensors) == ("pull", 1, 8, 3, {"want": "model"},
                                                                                   [])


# ------------------------------------------------------------------------------------------------ encode checks
@pytest.mark.parametrize(("changes", "field"), [
    ({"kind": "nope"}, "kind"), ({"worker": -1}, "worker"), ({"worker": 2**32}, "worker"), ({"seq": -2}, "seq"),
    ({"seq": 2**64}, "seq"), ({"version": 2**63}, "version"), ({"run": ""}, "run"), ({"run": "é" * 128}, "run"),
    ({"meta": {"x": object()}}, "meta"), ({"meta": [1]}, "meta"),
    ({"tensors": [torch.zeros(2, dtype=torch.complex64)]}, "tensors"), ({"tensors": [[1.0]]}, "tensors"),
])
def test_encode_names_the_bad_field(changes: dict, field: str) -> None:
    base = {"run": "r", "kind": "push", "worker": 0, "seq": 0} | changes
    with pytest.raises(ValueError, match=f"^{field}"):
        encode(Envelope(**base))


@pytest.mark.parametrize("max_bytes", [0, -5])
def test_encode_wants_a_positive_chunk_size(max_bytes: int) -> None:
    with pytest.raises(ValueError, match="^max_bytes"):
        encode(Envelope("r", "push", 0, 0), max_bytes)
    assert len(encode(Envelope("r", "push", 0, 0, 0, {}, []), 1)) == peek(encode(Envelope("r", "push", 0, 0))[0]).body_len


@pytest.mark.parametrize(("sizes", "max_bytes"), [([5], 7), ([300, 2, 41], 64), ([1000], 4096), ([0, 3], 1)])
def test_chunks_are_built_one_at_a_time_and_equal_encode(sizes: list[int], max_bytes: int) -> None:
    from edgestream.ps.wire import chunks

    ts = [torch.randn(n) for n in sizes]
    env = Envelope("r", "push", 1, 3, 2, {"lr": 0.5}, ts)
    it = chunks(env, max_bytes)
    assert not isinstance(it, list)
    first = next(it)
    assert peek(first).chunk == 0 and [first, *it] == encode(env, max_bytes)
    with pytest.raises(ValueError, match=r"^kind: 'nope'"):  # checked before the first chunk is asked for
        chunks(Envelope("r", "nope", 0, 1), max_bytes)
