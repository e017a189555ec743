"""Compressors: exact Top-k, bit-exact dense paths, unbiased QSGD, honest floats/bytes, sparse decode."""

from __future__ import annotations

import math

import pytest
import torch

from edgestream.compression import (
    COMPRESSOR_NAMES,
    Compressed,
    Compressor,
    build_compressor,
    k_of,
    scatter_add_sparse,
)
from edgestream.compression.randomk import RandomKCompressor
from edgestream.compression.topk import TopKCompressor


def _layers(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "conv.weight": torch.randn(16, 3, 3, 3, generator=gen),
        "conv.bias": torch.randn(16, generator=gen),
        "fc.weight": torch.randn(10, 30, generator=gen),
        "fc.bias": torch.randn(3, generator=gen),
    }


@pytest.mark.parametrize("name", COMPRESSOR_NAMES)
def test_every_compressor_round_trips_shape_and_dtype(name: str) -> None:
    comp = build_compressor({"name": name, "ratio": 0.25})
    assert isinstance(comp, Compressor)
    for lname, t in _layers().items():
        c = comp.compress(t, lname)
        assert isinstance(c, Compressed)
        out = comp.decompress(c)
        assert out.shape == t.shape and out.dtype == t.dtype
        assert c.nbytes == sum(p.numel() * p.element_size() for p in c.payload)
        assert c.floats == math.ceil(c.nbytes / 4)


def test_build_compressor_ignores_config_knobs_and_rejects_unknown() -> None:
    full = {"name": "topk", "ratio": 0.1, "delta": 0.3, "levels": 256, "memory": "residual", "statistic": "ewma"}
    comp = build_compressor(full)
    assert comp.name == "topk" and comp.ratio == 0.1
    with pytest.raises(ValueError, match="^compression.name: 'zip' is not a built-in compressor or an installed plugin"):
        build_compressor({"name": "zip"})
    with pytest.raises(ValueError, match="unknown compression option"):
        build_compressor({"name": "topk", "ratoi": 0.1})


def test_k_of_rounding_and_bounds() -> None:
    assert k_of(0.1, 30) == 3  # 0.1 * 30 = 3.0000000000000004 in floating point
    assert k_of(0.1, 31) == 4
    assert k_of(0.01, 5) == 1
    assert k_of(1.0, 7) == 7
    with pytest.raises(ValueError):
        k_of(0.0, 10)


def test_topk_keeps_exactly_the_k_largest_magnitudes_per_layer() -> None:
    comp = TopKCompressor(0.1)
    for lname, t in _layers(1).items():
        c = comp.compress(t, lname)
        values, indices = c.payload
        k = max(1, math.ceil(0.1 * t.numel()))
        assert values.numel() == k and indices.numel() == k
        assert indices.dtype == torch.int32
        assert len(set(indices.tolist())) == k
        flat = t.reshape(-1)
        kept = set(indices.tolist())
        threshold = min(flat.abs()[list(kept)])
        others = [i for i in range(flat.numel()) if i not in kept]
        assert all(flat[i].abs() <= threshold for i in others)
        assert torch.equal(values, flat[indices.long()])
        dense = comp.decompress(c).reshape(-1)
        assert torch.count_nonzero(dense) == k
        assert torch.equal(dense[indices.long()], flat[indices.long()])
        assert c.floats == 2 * k and c.nbytes == 8 * k


def test_topk_hand_made() -> None:
    t = torch.tensor([0.1, -5.0, 0.3, 2.0, -0.2, 0.0, 1.0, -3.0, 0.05, 0.4])
    comp = TopKCompressor(0.3)
    c = comp.compress(t, "x")
    assert sorted(c.payload[1].tolist()) == [1, 3, 7]
    assert comp.decompress(c).tolist() == [0, -5.0, 0, 2.0, 0, 0, 0, -3.0, 0, 0]


def test_none_is_exact_and_counts_numel() -> None:
    comp = build_compressor({"name": "none"})
    t = torch.randn(7, 5)
    c = comp.compress(t, "w")
    assert torch.equal(comp.decompress(c), t)
    assert c.floats == 35 and c.nbytes == 140


def test_fp16_bit_exact_for_representable_values_and_half_the_floats() -> None:
    comp = build_compressor({"name": "fp16"})
    t = torch.randn(11, 3).to(torch.float16).to(torch.float32)  # fp16-representable by construction
    t[0, 0] = 65504.0
    t[0, 1] = 2.0**-24  # smallest subnormal
    c = comp.compress(t, "w")
    out = comp.decompress(c)
    assert torch.equal(out.view(torch.int32), t.view(torch.int32))
    assert c.floats == math.ceil(33 / 2) and c.nbytes == 66
    inexact = torch.tensor([1.0 + 2.0**-12])
    assert comp.decompress(comp.compress(inexact, "x")).item() != inexact.item()


def test_qsgd_unbiased_and_smaller_than_dense() -> None:
    t = torch.randn(200, generator=torch.Generator().manual_seed(3))
    comp = build_compressor({"name": "qsgd", "levels": 4, "seed": 7})
    draws = torch.stack([comp.decompress(comp.compress(t, "w")) for _ in range(2000)])
    mean = draws.mean(0)
    # per-coordinate std of one draw <= norm / s; the mean of 2000 draws is ~45x tighter
    bound = 5 * t.norm() / 4 / math.sqrt(2000)
    assert (mean - t).abs().max() < bound
    assert not torch.equal(draws[0], draws[1])  # it is stochastic
    c = comp.compress(t, "w")
    assert c.payload[1].dtype == torch.int8
    assert c.nbytes == 4 + 200 < 200 * 4
    c256 = build_compressor({"name": "qsgd"}).compress(t, "w")
    assert c256.payload[1].dtype == torch.int16 and c256.nbytes == 4 + 400 < 800
    assert c256.floats == math.ceil(404 / 4)


def test_qsgd_levels_exact_on_extremes_and_zero() -> None:
    comp = build_compressor({"name": "qsgd", "levels": 127})
    t = torch.tensor([0.0, 3.0, 0.0, -4.0])  # |v_i| / ||v|| in {0, 0.6, 0.8}: 0 and the max are exact
    out = comp.decompress(comp.compress(t, "w"))
    assert out[0] == 0 and out[2] == 0
    z = torch.zeros(5)
    assert torch.equal(comp.decompress(comp.compress(z, "z")), z)
    one = torch.tensor([0.0, -2.5])
    assert torch.equal(comp.decompress(comp.compress(one, "o")), one)


def test_qsgd_same_seed_same_draws() -> None:
    t = torch.randn(50)
    a = build_compressor({"name": "qsgd", "seed": 1})
    b = build_compressor({"name": "qsgd", "seed": 1})
    assert torch.equal(a.compress(t, "w").payload[1], b.compress(t, "w").payload[1])


def test_randomk_agrees_across_workers_and_changes_per_call() -> None:
    a, b = RandomKCompressor(0.2, seed=5), RandomKCompressor(0.2, seed=5)
    ta, tb = torch.randn(100), torch.randn(100)
    ca1, cb1 = a.compress(ta, "w"), b.compress(tb, "w")
    assert torch.equal(ca1.payload[1], cb1.payload[1])  # same indices on both workers
    assert torch.equal(ca1.payload[0], ta[ca1.payload[1].long()])
    ca2 = a.compress(ta, "w")
    assert not torch.equal(ca1.payload[1], ca2.payload[1])  # a new draw per call
    assert ca1.payload[1].numel() == 20 and len(set(ca1.payload[1].tolist())) == 20
    assert ca1.floats == 40
    other = RandomKCompressor(0.2, seed=6).compress(ta, "w")
    assert not torch.equal(ca1.payload[1], other.payload[1])


def test_scatter_add_of_allgathered_topk_equals_sum_of_decompressed() -> None:
    comp = TopKCompressor(0.2)
    grads = [torch.randn(6, 7, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    cs = [comp.compress(g, "w") for g in grads]
    parts = [(c.payload[0], c.payload[1]) for c in cs]
    dense_sum = sum(comp.decompress(c) for c in cs)
    got = scatter_add_sparse(42, parts, None, torch.float32).reshape(6, 7)
    assert torch.allclose(got, dense_sum, atol=1e-6)
    w = [0.1, 0.2, 0.3, 0.4]
    weighted = sum(wi * comp.decompress(c) for wi, c in zip(w, cs, strict=True))
    got_w = scatter_add_sparse(42, parts, w, torch.float32).reshape(6, 7)
    assert torch.allclose(got_w, weighted, atol=1e-6)
    # overlapping indices add up
    dup = scatter_add_sparse(3, [(torch.tensor([1.0, 2.0]), torch.tensor([2, 2], dtype=torch.int32))], None, torch.float32)
    assert dup.tolist() == [0.0, 0.0, 3.0]
    with pytest.raises(ValueError):
        scatter_add_sparse(3, parts, [1.0], torch.float32)
