"""The PS tensor wire format (edgestream.ps.wire): bit-exact round trips over dtypes, shapes, sparsity and
chunk sizes, chunking of large models, and every kind of bad chunk rejected with its reason."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgestream.ps.wire import DEFAULT_CHUNK_BYTES, Envelope, Reassembler, WireError, decode_one, encode, peek

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8,
          torch.bool]


@st.composite
def tensors(draw) -> torch.Tensor:
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(0, 6), min_size=0, max_size=3))
    seed = draw(st.integers(0, 2**31 - 1))
    zeros = draw(st.sampled_from([0.0, 0.5, 0.95]))
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=g) * 10
    t[torch.rand(shape, generator=g) < zeros] = 0
    return t.to(dtype)


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
                                    for x, y in zip(a, b, strict=True))


meta_values = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
                           | st.text(max_size=8), lambda kids: st.lists(kids, max_size=3)
                           | st.dictionaries(st.text(max_size=5), kids, max_size=3), max_leaves=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ts=st.lists(tensors(), max_size=5), max_bytes=st.integers(1, 5000), shuffle=st.booleans(),
       meta=st.dictionaries(st.text(max_size=6), meta_values, max_size=4), sparse=st.booleans(),
       kind=st.sampled_from(["push", "pull", "hello", "reply"]), worker=st.integers(0, 2**20),
       seq=st.integers(0, 2**62), version=st.integers(-5, 2**40))
def test_round_trip_is_bit_exact_in_any_chunking(ts, max_bytes, shuffle, meta, sparse, kind, worker, seq,
                                                 version) -> None:
    env = Envelope("run-a", kind, worker, seq, version, meta, ts)
    values = encode(env, max_bytes, sparse=sparse)
    assert all(len(v) - peek(v).offset <= max_bytes for v in values)
    if shuffle:
        random.Random(seq).shuffle(values)
    r = Reassembler("run-a")
    outs = [r.add(v) for v in values]
    assert all(o is None for o in outs[:-1]) and r.pending() == 0
    out = outs[-1]
    assert (out.run, out.kind, out.worker, out.seq, out.version) == ("run-a", kind, worker, seq, version)
    assert out.meta == meta and _same(out.tensors, ts)
    out.tensors and out.tensors[0].numel() and out.tensors[0].reshape(-1)[:1].zero_()  # writable, independent


def test_meta_keeps_infinities_and_nan() -> None:
    out = decode_one(encode(Envelope("r", "push", 0, 1, 0, {"a": float("inf"), "b": [float("-inf")]}))[0], "r")
    assert out.meta == {"a": float("inf"), "b": [float("-inf")]}
    nan = decode_one(encode(Envelope("r", "push", 0, 1, 0, {"n": float("nan")}))[0], "r").meta["n"]
    assert nan != nan


def test_a_45_mb_model_goes_in_8_mib_chunks() -> None:
    big = [torch.randn(11_500_000), torch.randn(3, 7)]
    values = encode(Envelope("r", "reply", 2, 9, 4, {}, big))
    body = sum(len(v) - peek(v).offset for v in values)
    assert len(values) == -(-body // DEFAULT_CHUNK_BYTES) == 6
    assert all(len(v) <= DEFAULT_CHUNK_BYTES + 200 for v in values)
    r = Reassembler("r")
    out = [r.add(v) for v in values][-1]
    assert _same(out.tensors, big)


@pytest.mark.parametrize("density", [0.001, 0.01, 0.2])
def test_sparse_updates_cost_their_compressed_size(density: float) -> None:
    t = torch.zeros(40_000)
    idx = torch.randperm(40_000)[: int(40_000 * density)]
    t[idx] = torch.randn(len(idx))
    sparse = sum(map(len, encode(Envelope("r", "push", 0, 1, 0, {}, [t]))))
    dense = sum(map(len, encode(Envelope("r", "push", 0, 1, 0, {}, [t]), sparse=False)))
    assert sparse <= 8 * len(idx) + 400 < dense
    assert peek(encode(Envelope("r", "push", 0, 1, 0, {}, [t]))[0]).sparse
    assert torch.equal(decode_one(encode(Envelope("r", "push", 0, 1, 0, {}, [t]))[0], "r").tensors[0], t)


def _chunks(n: int = 5, run: str = "r", seq: int = 1, worker: int = 0) -> list[bytes]:
    values = encode(Envelope(run, "push", worker, seq, 0, {"lr": 0.1}, [torch.randn(50)]), 60)
    assert len(values) >= n
    return values


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda v: v[: len(v) - 3], "truncated chunk"),
    (lambda v: v[:20], "truncated header"),
    (lambda v: v[:-1] + bytes([v[-1] ^ 0x40]), "bad checksum"),
    (lambda v: b"XXXX" + v[4:], "bad magic"),
    (lambda v: v[:4] + bytes([9]) + v[5:], "unknown wire version 9"),
    (lambda v: v[:5] + bytes([17]) + v[6:], "unknown kind"),
])
def test_a_damaged_chunk_is_rejected_with_its_reason(damage, reason) -> None:
    r = Reassembler("r")
    values = _chunks()
    with pytest.raises(WireError, match=reason):
        r.add(damage(values[1]))
    assert r.pending() == 0  # nothing of it kept


def test_foreign_run_and_inconsistent_chunks_are_rejected() -> None:
    with pytest.raises(WireError, match="foreign run: header says other, this is r"):
        Reassembler("r").add(_chunks(run="other")[0])
    r = Reassembler("r")
    a = _chunks(seq=3)
    r.add(a[0])
    other = encode(Envelope("r", "push", 0, 3, 0, {"lr": 0.2, "x": 1}, [torch.randn(60)]), 60)
    with pytest.raises(WireError, match="inconsistent chunk"):
        r.add(other[1])


def test_a_lost_chunk_is_reported_and_the_next_message_still_completes() -> None:
    r = Reassembler("r")
    first, second = _chunks(seq=1), _chunks(seq=2)
    for v in first[:-1]:  # the last chunk of message 1 never arrives
        assert r.add(v) is None
    outs = [r.add(v) for v in second]
    lost = r.drain_lost()
    assert len(lost) == 1 and "incomplete: message push worker 0 seq 1" in lost[0] and f"of {len(first)}" in lost[0]
    assert outs[-1] is not None and outs[-1].seq == 2 and r.drain_lost() == []


def test_interleaved_workers_reassemble_independently_and_repeats_are_ignored() -> None:
    r = Reassembler("r")
    a, b = _chunks(worker=0), _chunks(worker=5)
    outs = []
    for x, y in zip(a, b, strict=False):
        outs += [r.add(x), r.add(y), r.add(x)]  # a repeated chunk is ignored
    done = [o for o in outs if o is not None]
    assert sorted(o.worker for o in done) == [0, 5]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise_anything_but_wire_error(data: bytes) -> None:
    try:
        Reassembler("r").add(data)
    except WireError:
        pass


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(0, 10_000), flip=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_any_truncation_or_bit_flip_of_a_valid_chunk_is_rejected(cut: int, flip: int, bit: int) -> None:
    value = encode(Envelope("r", "push", 1, 2, 3, {"k": [1, 2]}, [torch.randn(17), torch.arange(5)]))[0]
    cut %= len(value)
    with pytest.raises(WireError):
        Reassembler("r").add(value[:cut])
    broken = bytearray(value)
    broken[flip % len(value)] ^= 1 << bit  # header, run name or body: the chunk's checksum covers them all
    with pytest.raises(WireError):
        Reassembler("r").add(bytes(broken))


def test_encode_names_the_bad_field() -> None:
    for kwargs, field in [({"kind": "nope"}, "kind"), ({"worker": -1}, "worker"), ({"seq": -2}, "seq"),
                          ({"run": ""}, "run")]:
        base = {"run": "r", "kind": "push", "worker": 0, "seq": 0} | kwargs
        with pytest.raises(ValueError, match=field):
            encode(Envelope(**base))
    with pytest.raises(ValueError, match="max_bytes"):
        encode(Envelope("r", "push", 0, 0), 0)
