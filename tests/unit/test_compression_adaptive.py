"""ScaDLES adaptive Top-k decision rule on hand-made gradients."""

from __future__ import annotations

import pytest
import torch

from edgestream.compression import (
    AdaptiveTopKCompressor,
    AdaptiveTopKState,
    build_compressor,
    cnc_ratio,
    compression_loss,
    compression_loss_reference,
    group_compress,
)


def test_all_mass_in_top_decile_gives_zero_loss_and_votes_compress() -> None:
    a = torch.zeros(100)
    a[:10] = torch.arange(1.0, 11.0)  # all mass in the top 10 of 100
    b = torch.zeros(50)
    b[[3, 17, 22, 40, 49]] = torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0])  # top 5 of 50
    grads = [a, b.reshape(5, 10)]
    c = compression_loss(grads, 0.1)
    assert c == pytest.approx(0.0, abs=1e-12)
    st = AdaptiveTopKState(delta=0.3)
    st.observe(c)
    assert st.vote() is True


def test_flat_gradient_loses_ninety_percent_and_votes_dense() -> None:
    grads = [torch.ones(100), -torch.ones(20)]
    c = compression_loss(grads, 0.1)
    assert c == pytest.approx(0.9)
    st = AdaptiveTopKState(delta=0.3)
    st.observe(c)
    assert st.vote() is False


def test_loss_is_per_layer_squared_and_whole_model() -> None:
    # layer a: [3, 4] top-1 keeps 16 of 25; layer b: [1, 0, 0, 0] keeps 1 of 1 -> c = 9 / 26
    grads = [torch.tensor([3.0, 4.0]), torch.tensor([1.0, 0.0, 0.0, 0.0])]
    assert compression_loss(grads, 0.25) == pytest.approx(9 / 26)
    assert compression_loss([torch.zeros(3)], 0.1) == 0.0


def test_reference_statistic_non_squared_with_residual() -> None:
    grads = [torch.tensor([3.0, 4.0]), torch.tensor([1.0, 0.0, 0.0, 0.0])]
    # N(g) = 5 + 1 = 6; top-1 of g + e: layer a g+e = [3, 4] + [0, 2] -> keep 6; layer b keeps 1 -> 7
    residuals = [torch.tensor([0.0, 2.0]), None]
    assert compression_loss_reference(grads, residuals, 0.25) == pytest.approx(1 / 6)
    assert compression_loss_reference(grads, None, 0.25) == pytest.approx(1 - 5 / 6)


def test_ewma_arithmetic_by_hand() -> None:
    st = AdaptiveTopKState(delta=0.3, beta=0.9)
    assert st.value is None and st.vote() is False
    st.observe(0.1)
    assert st.value == pytest.approx(0.1) and st.vote()
    st.observe(0.9)  # 0.9 * 0.1 + 0.1 * 0.9 = 0.18
    assert st.value == pytest.approx(0.18) and st.vote()
    st.observe(2.0)  # 0.9 * 0.18 + 0.1 * 2.0 = 0.362
    assert st.value == pytest.approx(0.362) and not st.vote()
    st.new_epoch()  # no effect on the EWMA
    assert st.value == pytest.approx(0.362)
    edge = AdaptiveTopKState(delta=0.25)
    edge.observe(0.25)
    assert edge.vote()  # <= delta compresses


def test_reference_cumulative_mean_resets_each_epoch() -> None:
    st = AdaptiveTopKState(delta=0.3, statistic="reference")
    for c in (0.1, 0.2, 0.9):
        st.observe(c)
    assert st.value == pytest.approx(0.4) and not st.vote()
    st.new_epoch()
    assert st.value is None
    st.observe(0.2)
    assert st.value == pytest.approx(0.2) and st.vote()
    with pytest.raises(ValueError):
        AdaptiveTopKState(statistic="median")  # type: ignore[arg-type]


def test_group_vote_ties_compress() -> None:
    assert group_compress([True, False]) is True
    assert group_compress([True, False, False]) is False
    assert group_compress([True, True, False]) is True
    assert group_compress([False, False]) is False
    assert group_compress([]) is False


def test_cnc_ratio() -> None:
    assert cnc_ratio(3, 12) == 0.25
    assert cnc_ratio(0, 0) == 0.0
    with pytest.raises(ValueError):
        cnc_ratio(5, 4)


def test_adaptive_compressor_is_topk_with_knobs() -> None:
    comp = build_compressor({"name": "adaptive-topk", "ratio": 0.1, "delta": 0.2, "statistic": "reference"})
    assert isinstance(comp, AdaptiveTopKCompressor)
    assert comp.name == "adaptive-topk" and comp.sparse and comp.delta == 0.2
    st = comp.new_state()
    assert st.delta == 0.2 and st.statistic == "reference"
    t = torch.arange(20.0)
    c = comp.compress(t, "w")
    assert sorted(c.payload[1].tolist()) == [18, 19]
    grads = [torch.ones(10)]
    assert comp.loss(grads) == pytest.approx(1 - 1 / 10**0.5)
    ewma = AdaptiveTopKCompressor(0.1)
    assert ewma.loss(grads) == pytest.approx(0.9)
