"""Property tests of the compressors (edgestream/compression) and the gradient exchange (edgestream/sync/exchange.py)
over shapes (ranks 0-4, empty and size-1 dimensions included) and floating dtypes (float32, float64, float16,
bfloat16).

* every compressor: decompress(compress(x)) has x's shape and dtype; the wire counts are the payload's bytes;
* none: exact; fp16: exactly x rounded to float16 (exact where x is representable);
* topk / adaptive-topk: k = max(1, ceil(ratio * numel)) entries (at most numel), kept exactly, zeros elsewhere,
  no dropped magnitude above a kept one; randomk: k distinct coordinates kept exactly, zeros elsewhere;
* qsgd: |Q(v)_i - v_i| <= ||v|| / s per coordinate (plus the dtype's rounding of the result), signs kept;
* exchange, 2-4 workers, any compressor: every worker's update is sum_i w_i d_i / sum_i w_i with d_i what worker
  i's compressor decodes (d_i = g_i for dense), computed in float64, within the dtype's rounding.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.compression import COMPRESSOR_NAMES, build_compressor, k_of
from edgestream.runner.lockstep import run_lockstep
from edgestream.sync import Codec, exchange

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
RATIOS = [0.01, 0.1, 0.25, 0.5, 1.0]

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)  # ranks 0-4, empty and size-1 dims
dtypes = st.sampled_from(DTYPES)
seeds = st.integers(0, 2**31 - 1)


def _tensor(shape: tuple[int, ...], dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def _eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps


def _round_trip(name: str, x: torch.Tensor, **spec):
    comp = build_compressor({"name": name, **spec})
    c = comp.compress(x, "layer")
    return comp, c, comp.decompress(c)


# ---------------------------------------------------------------------------------------------- compressors


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(COMPRESSOR_NAMES), shape=shapes, dtype=dtypes, seed=seeds,
       ratio=st.sampled_from(RATIOS))
def test_every_compressor_keeps_shape_dtype_and_counts_its_payload(name, shape, dtype, seed, ratio) -> None:
    x = _tensor(shape, dtype, seed)
    _, c, out = _round_trip(name, x, ratio=ratio)
    assert out.shape == x.shape and out.dtype == x.dtype, (name, shape, dtype)
    assert c.nbytes == sum(p.numel() * p.element_size() for p in c.payload)
    assert c.floats == math.ceil(c.nbytes / 4)
    assert torch.isfinite(out.double()).all()


@settings(max_examples=40, deadline=None)
@given(shape=shapes, dtype=dtypes, seed=seeds)
def test_none_is_exact(shape, dtype, seed) -> None:
    x = _tensor(shape, dtype, seed)
    assert torch.equal(_round_trip("none", x)[2], x)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, dtype=dtypes, seed=seeds, scale=st.sampled_from([1e-3, 1.0, 100.0]))
def test_fp16_is_x_rounded_to_half_and_exact_where_representable(shape, dtype, seed, scale) -> None:
    x = _tensor(shape, dtype, seed, scale)
    half = x.to(torch.float16).to(dtype)
    assert torch.equal(_round_trip("fp16", x)[2], half)
    assert torch.equal(_round_trip("fp16", half)[2], half)  # representable: bit for bit


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["topk", "adaptive-topk"]), shape=shapes, dtype=dtypes, seed=seeds,
       ratio=st.sampled_from(RATIOS))
def test_topk_keeps_the_k_largest_magnitudes_exactly(name, shape, dtype, seed, ratio) -> None:
    x = _tensor(shape, dtype, seed)
    comp, c, out = _round_trip(name, x, ratio=ratio)
    n = x.numel()
    values, indices = c.payload
    assert len(indices) == k_of(ratio, n)  # 0 of an empty tensor
    kept = torch.zeros(n, dtype=torch.bool)
    kept[indices.long()] = True
    assert int(kept.sum()) == len(indices)  # distinct
    flat, dec = x.reshape(-1), out.reshape(-1)
    assert torch.equal(dec[kept], flat[kept]) and not dec[~kept].any()
    if kept.any() and (~kept).any():
        assert flat[kept].abs().min() >= flat[~kept].abs().max()
    # the error bound Top-k gives: the dropped energy is at most the average share of the n - k smallest
    err = (flat.double() - dec.double()).pow(2).sum()
    assert err <= (1 - len(indices) / max(n, 1)) * flat.double().pow(2).sum() + 1e-12


@settings(max_examples=40, deadline=None)
@given(shape=shapes, dtype=dtypes, seed=seeds, ratio=st.sampled_from(RATIOS), comp_seed=st.integers(0, 99))
def test_randomk_keeps_k_distinct_coordinates_exactly(shape, dtype, seed, ratio, comp_seed) -> None:
    x = _tensor(shape, dtype, seed)
    _, c, out = _round_trip("randomk", x, ratio=ratio, seed=comp_seed)
    n = x.numel()
    _, indices = c.payload
    assert len(indices) == k_of(ratio, n)
    kept = torch.zeros(n, dtype=torch.bool)
    kept[indices.long()] = True
    assert int(kept.sum()) == len(indices)
    flat, dec = x.reshape(-1), out.reshape(-1)
    assert torch.equal(dec[kept], flat[kept]) and not dec[~kept].any()


@settings(max_examples=60, deadline=None)
@given(shape=shapes, dtype=dtypes, seed=seeds, levels=st.sampled_from([1, 2, 16, 127, 256, 40000]),
       scale=st.sampled_from([1e-2, 1.0, 30.0]))
def test_qsgd_error_is_at_most_the_norm_over_s_per_coordinate(shape, dtype, seed, levels, scale) -> None:
    x = _tensor(shape, dtype, seed, scale)
    _, c, out = _round_trip("qsgd", x, levels=levels, seed=seed % 1000)
    v, q = x.double().reshape(-1), out.double().reshape(-1)
    norm = float(x.reshape(-1).float().norm())
    step = norm / levels
    # one quantisation step, computed in float32, the result rounded to the dtype
    rounding = max(_eps(dtype), _eps(torch.float32))
    bound = step + 4 * rounding * (v.abs() + step) + 1e-30
    assert ((q - v).abs() <= bound).all(), float(((q - v).abs() - bound).max())
    assert (q * v >= 0).all()  # no sign flips


# ------------------------------------------------------------------------------------------------ exchange

EXCHANGE_SPECS = [None, {"name": "none"}, {"name": "fp16"}, {"name": "topk", "ratio": 1.0},
                  {"name": "topk", "ratio": 0.3}, {"name": "randomk", "ratio": 0.5, "seed": 4},
                  {"name": "qsgd", "levels": 64, "seed": 2}, {"name": "adaptive-topk", "ratio": 0.3, "delta": 1.0}]


def _no_local_requests(rank: int, req: object) -> None:
    raise AssertionError(f"exchange yielded a non-collective request {req!r}")


@settings(max_examples=60, deadline=None)
@given(spec=st.sampled_from(EXCHANGE_SPECS), layers=st.lists(shapes, min_size=1, max_size=3), dtype=dtypes,
       weights=st.lists(st.sampled_from([1.0, 2.0, 3.0, 8.0, 32.0, 0.5, 7.25]), min_size=2, max_size=4),
       seed=seeds)
def test_exchange_is_the_weighted_mean_of_what_each_worker_sends(spec, layers, dtype, weights, seed) -> None:
    world = len(weights)
    grads = [[_tensor(s, dtype, seed + 7 * w + i) for i, s in enumerate(layers)] for w in range(world)]
    # what worker i's codec decodes of its own gradients: a fresh codec per worker, as in the exchange (its
    # first step: no residual yet), compressing the same tensors under the same names in the same order
    sent = []
    for g in grads:
        codec = Codec.from_spec(spec)
        comp = codec.compressor
        sent.append([t if comp is None else comp.decompress(comp.compress(t, str(i))) for i, t in enumerate(g)])
    codecs = [Codec.from_spec(spec) for _ in grads]
    programs = [exchange(g, w, c.compressor, c.memory, adaptive=c.adaptive)
                for g, w, c in zip(grads, weights, codecs, strict=True)]
    results = run_lockstep(programs, _no_local_requests)

    total = sum(weights)
    for layer, shape in enumerate(layers):
        parts = [w * s[layer].double() for w, s in zip(weights, sent, strict=True)]
        want = sum(parts) / total
        scale = sum(p.abs() for p in parts) / total  # the magnitude the dtype's rounding applies to
        for r in results:
            got = r.update[layer]
            assert got.shape == shape and got.dtype == dtype, (spec, shape, dtype)
            tol = 4 * (world + 2) * _eps(dtype) * (scale + want.abs()) + 1e-300
            assert ((got.double() - want).abs() <= tol).all(), (spec, shape, dtype,
                                                                  float((got.double() - want).abs().max()))
    for r in results:
        assert r.total_weight == pytest.approx(total, rel=4 * _eps(dtype))
