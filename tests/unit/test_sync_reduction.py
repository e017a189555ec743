"""reduce_all's sum, vectorised over the workers (edgestream.sync.reduction): bit for bit the rank-order loop of
in-place adds, whatever the workers' tensors are (rows of one stacked tensor as the simulator's batched compute
hands them out, in rank order or not, a subset of the rows, separate tensors, small or large, one element,
float32, float64 or integer), and the vectorised path is the one taken where it applies."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.sync import reduction
from edgestream.sync.reduction import _leading_block, reduce_all
from edgestream.sync.requests import AllReduce


def loop_sum(per_worker: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """The reference: the first worker's tensors cloned, then every other worker's added in rank order."""
    acc = [t.detach().clone() for t in per_worker[0]]
    for tensors in per_worker[1:]:
        for a, t in zip(acc, tensors, strict=True):
            a.add_(t)
    return acc


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) and (
        not a.is_floating_point() or torch.equal(torch.signbit(a), torch.signbit(b)))


SHAPES = st.sampled_from([(1,), (2,), (3,), (7,), (8,), (9,), (17,), (2, 3), (10, 4), (1, 1), (4, 1, 3)])
LAYOUTS = st.sampled_from(["rows", "rows-offset", "rows-permuted", "two-stacks", "separate"])


@st.composite
def workers(draw: st.DrawFn) -> tuple[list[list[torch.Tensor]], list[str]]:
    """Per-worker tensor lists: per position a dtype, a shape and a layout, values over many magnitudes
    (rounding depends on the order), negative zeros included."""
    k = draw(st.integers(2, 40))
    positions = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    columns, layouts = [], []
    for _ in range(positions):
        shape = draw(SHAPES)
        dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.int64]))
        layout = draw(LAYOUTS)
        extra = 3 if layout == "rows-offset" else 0
        if dtype == torch.int64:
            base = torch.randint(-1000, 1000, (k + extra, *shape), generator=gen)
        else:
            scale = torch.logspace(-6, 6, k + extra, dtype=dtype)[torch.randperm(k + extra, generator=gen)]
            base = torch.randn((k + extra, *shape), generator=gen, dtype=dtype) * scale.reshape(-1, *[1] * len(shape))
            base.view(k + extra, -1)[:, 0] = -0.0
        rows = list(base.unbind(0))
        if layout == "rows-offset":
            rows = rows[extra:]
        elif layout == "rows-permuted":
            order = torch.randperm(k, generator=gen).tolist()
            if order == list(range(k)):
                order = order[::-1]
            rows = [rows[i] for i in order]
        elif layout == "two-stacks":  # a step served by two passes: the leading rows of one, the rest of another
            cut = draw(st.integers(0, k))
            rows = rows[:cut] + list(base[cut:].clone().unbind(0))
        elif layout == "separate":
            rows = [r.clone() for r in rows]
        columns.append(rows)
        layouts.append(layout)
    return [list(ts) for ts in zip(*columns, strict=True)], layouts


@settings(max_examples=150, deadline=None)
@given(workers())
def test_sum_is_the_rank_order_loop_bit_for_bit(case) -> None:
    per_worker, _ = case
    expected = loop_sum(per_worker)
    got = reduce_all([AllReduce(ts, op="sum") for ts in per_worker])
    assert len(got) == len(expected)
    for j, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert same_bits(g, e), f"position {j}: {g} vs {e}"


@settings(max_examples=60, deadline=None)
@given(workers())
def test_the_inputs_are_unchanged_and_the_results_fresh(case) -> None:
    per_worker, _ = case
    before = [[t.clone() for t in ts] for ts in per_worker]
    got = reduce_all([AllReduce(ts, op="sum") for ts in per_worker])
    for ts, was in zip(per_worker, before, strict=True):
        assert all(same_bits(t, w) for t, w in zip(ts, was, strict=True))
    inputs = {t.untyped_storage().data_ptr() for ts in per_worker for t in ts}
    assert not any(g.untyped_storage().data_ptr() in inputs for g in got)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 64), SHAPES.filter(lambda s: torch.Size(s).numel() >= 2),
       st.sampled_from([torch.float32, torch.float64]), st.integers(0, 5), st.integers(0, 64))
def test_consecutive_rows_are_summed_as_one_block(k: int, shape: tuple[int, ...], dtype: torch.dtype,
                                                  skip: int, cut: int) -> None:
    """Rows of one stacked tensor in order: the block is a view of that tensor (no copy); the leading rows of
    one and the rest of another (two passes): the leading ones; out of order: not vectorised unless small
    enough to stack; one element per worker: never (numpy would sum a single column pairwise)."""
    stacked = torch.randn((k + skip, *shape), dtype=dtype)
    rows = list(stacked.unbind(0))[skip:]
    block, n = _leading_block(rows)
    assert n == k and block.data_ptr() == rows[0].data_ptr() and block.shape == (k, *shape)
    cut = min(cut, k)
    two = rows[:cut] + list(torch.randn((k - cut, *shape), dtype=dtype).unbind(0))
    small = k * torch.Size(shape).numel() <= reduction.STACK_SMALL_ELEMENTS
    lead = _leading_block(two)
    if cut >= 2:
        assert lead is not None and lead[1] == cut and lead[0].data_ptr() == rows[0].data_ptr()
    else:
        assert (lead is not None) == small
    permuted = rows[1:] + rows[:1]
    moved = _leading_block(permuted)
    if k > 2:  # rows 1..k-1 lead in order: a view of them
        assert moved is not None and moved[1] == k - 1 and moved[0].data_ptr() == rows[1].data_ptr()
    reversed_rows = rows[::-1]
    back = _leading_block(reversed_rows)
    assert (back is not None) == small
    if back is not None:
        assert back[1] == k and back[0].data_ptr() != stacked.data_ptr()
    assert _leading_block([torch.randn(1, dtype=dtype) for _ in range(k)]) is None


def test_large_separate_tensors_are_added_worker_by_worker() -> None:
    """Separate tensors too large to stack (a whole model per worker) are not copied into a block."""
    n = reduction.STACK_SMALL_ELEMENTS // 2 + 1
    per_worker = [[torch.randn(n)] for _ in range(2)]
    assert _leading_block([ts[0] for ts in per_worker]) is None
    assert same_bits(reduce_all([AllReduce(ts, op="sum") for ts in per_worker])[0], loop_sum(per_worker)[0])


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 40), SHAPES.filter(lambda s: torch.Size(s).numel() >= 2), st.integers(0, 7))
def test_rows_of_a_flat_buffer_are_one_block(k: int, shape: tuple[int, ...], spare: int) -> None:
    """Rows of a [K, ...] view of a larger flat buffer (the simulator's reused gradient memory) are one
    block too, summed bit for bit in rank order; a row out of place ends the block."""
    numel = torch.Size(shape).numel()
    flat = torch.randn(k * numel + spare)
    rows = list(flat[:k * numel].view(k, *shape).unbind(0))
    block, n = _leading_block(rows)
    assert n == k and block.data_ptr() == flat.data_ptr() and block.shape == (k, *shape)
    per_worker = [[r] for r in rows]
    assert same_bits(reduce_all([AllReduce(ts, op="sum") for ts in per_worker])[0], loop_sum(per_worker)[0])
    if k > 2:
        swapped = rows[:1] + rows[2:3] + rows[1:2] + rows[3:]
        lead = _leading_block(swapped)
        small = k * numel <= reduction.STACK_SMALL_ELEMENTS  # then a stacked copy, never a view of flat
        assert (lead is not None) == small and (lead is None or lead[0].data_ptr() != flat.data_ptr())
