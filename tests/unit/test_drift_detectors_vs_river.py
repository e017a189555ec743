"""The built-in drift detectors against an independent implementation, River's (a test-only dependency; edgestream
never imports it), on the same sequences: 0/1 errors with a jump in the error rate, Gaussian values with a shift in
the mean, absolute Gaussian errors with a change of scale, stationary streams; several seeds, and hypothesis's.

The same detection points, exactly, where the definitions agree:
* ADWIN with `direction: both` is River's ADWIN (both report any cut, then start afresh).
* Page-Hinkley with `direction` up / down / both is River's PageHinkley with `mode` up / down / both (River's
  default mode is both, ours up).
* DDM is River's DDM (River's warning zone is not reported).

The one difference, asserted: ADWIN's default `direction: up` reports a cut only when the newer sub-window's mean is
the higher; a cut the other way (the errors fell) makes River report a drift and start afresh, while ours drops the
window's oldest bucket without a report and keeps the rest. So up's detections are both's (River's) up to both's
first falling cut, and after it they may differ (docs/stream-learning.md, "Drift detectors")."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river import drift as river_drift  # the reference: a test-only dependency

from edgestream.drift import make_detector


def _river(name: str, params: dict):
    """River's detector matching our `name` + `params` (our `direction` is River's PageHinkley `mode`)."""
    if name == "adwin":
        assert params.get("direction") == "both"
        return river_drift.ADWIN(**{k: v for k, v in params.items() if k != "direction"})
    if name == "page_hinkley":
        p = dict(params)
        return river_drift.PageHinkley(mode=p.pop("direction", "up"), **p)
    return river_drift.binary.DDM(**params)


def _river_hits(det, values: np.ndarray) -> list[int]:
    out = []
    for i, v in enumerate(values.tolist()):
        det.update(v)
        if det.drift_detected:
            out.append(i)
    return out


def _ours(name: str, params: dict, values: np.ndarray) -> tuple[list[int], list[dict]]:
    det = make_detector(name, params, labels=True)
    hits, stats = [], []
    for i, v in enumerate(values.tolist()):
        if det.update(v):
            hits.append(i)
            stats.append(det.statistic())
    return hits, stats


def _stream(kind: str, seed: int, n: int = 6000) -> np.ndarray:
    """The sequences the comparison runs on (a change at n/2 where there is one)."""
    rng = np.random.default_rng(seed)
    half = n // 2
    if kind.startswith("bernoulli"):
        _, a, b = kind.split(":")
        p = np.where(np.arange(n) < half, float(a), float(b))
        return (rng.random(n) < p).astype(np.float64)
    if kind == "gauss_shift":      # a regression's signed residuals whose mean moves by one standard deviation
        return rng.normal(0.0, 1.0, n) + (np.arange(n) >= half)
    if kind == "abs_gauss_scale":  # a regression's absolute errors whose scale doubles
        return np.abs(rng.normal(0.0, 1.0, n)) * np.where(np.arange(n) < half, 1.0, 2.0)
    if kind == "abs_gauss":        # stationary absolute errors
        return np.abs(rng.normal(0.0, 1.0, n))
    raise AssertionError(kind)


BINARY = ["bernoulli:0.1:0.5", "bernoulli:0.2:0.4", "bernoulli:0.3:0.3", "bernoulli:0.1:0.1", "bernoulli:0.5:0.1"]
REAL = ["gauss_shift", "abs_gauss_scale", "abs_gauss"]
SEEDS = range(5)


@pytest.mark.parametrize("kind", BINARY + REAL)
@pytest.mark.parametrize("params", [{}, {"clock": 1, "delta": 0.05}, {"max_buckets": 2, "min_window_length": 12,
                                                                       "grace_period": 200, "clock": 7}],
                         ids=["defaults", "clock1", "small-buckets"])
def test_adwin_both_detects_where_rivers_adwin_does(kind, params):
    params = {**params, "direction": "both"}
    seen = 0
    for seed in SEEDS:
        values = _stream(kind, seed)
        ours, _ = _ours("adwin", params, values)
        assert ours == _river_hits(_river("adwin", params), values), (kind, seed)
        seen += len(ours)
    if kind.split(":")[1:2] != kind.split(":")[2:3]:  # a change: the comparison is not of empty lists
        assert seen >= len(SEEDS), kind


@pytest.mark.parametrize("kind", BINARY + REAL)
def test_adwin_up_is_rivers_until_rivers_first_cut_where_the_error_fell(kind):
    """The asserted difference: up = both (= River) up to both's first falling cut; on the rises it is all of it."""
    compared = 0
    for seed in SEEDS:
        values = _stream(kind, seed)
        both, stats = _ours("adwin", {"direction": "both"}, values)
        assert both == _river_hits(_river("adwin", {"direction": "both"}), values)
        up, up_stats = _ours("adwin", {"direction": "up"}, values)
        falls = [h for h, s in zip(both, stats, strict=True) if s["mean_new"] < s["mean_old"]]
        until = falls[0] if falls else len(values)
        assert [h for h in up if h < until] == [h for h in both if h < until], (kind, seed)
        assert all(s["mean_new"] > s["mean_old"] for s in up_stats)
        compared += len([h for h in both if h < until])
        if not falls:
            assert up == both, (kind, seed)
    if kind in ("bernoulli:0.1:0.5", "bernoulli:0.2:0.4", "gauss_shift", "abs_gauss_scale"):
        assert compared >= len(SEEDS), kind  # rises: every seed's detection is compared
    if kind == "bernoulli:0.5:0.1":  # the fall: River reports it, up does not
        for seed in SEEDS:
            values = _stream(kind, seed)
            assert any(h >= 3000 for h in _river_hits(_river("adwin", {"direction": "both"}), values))
            assert not any(h >= 3000 for h in _ours("adwin", {}, values)[0])


@pytest.mark.parametrize("kind", BINARY + REAL)
@pytest.mark.parametrize("params", [{"direction": "up"}, {"direction": "down"}, {"direction": "both"},
                                    {"direction": "both", "threshold": 10.0, "delta": 0.05, "alpha": 0.999,
                                     "min_instances": 5}], ids=["up", "down", "both", "tight"])
def test_page_hinkley_detects_where_rivers_does_in_each_mode(kind, params):
    for seed in SEEDS:
        values = _stream(kind, seed)
        ours, _ = _ours("page_hinkley", params, values)
        assert ours == _river_hits(_river("page_hinkley", params), values), (kind, seed)


@pytest.mark.parametrize("kind", BINARY)
@pytest.mark.parametrize("params", [{}, {"warm_start": 0}, {"warm_start": 100, "drift_threshold": 2.0}],
                         ids=["defaults", "no-warm-start", "tight"])
def test_ddm_detects_where_rivers_does(kind, params):
    for seed in SEEDS:
        values = _stream(kind, seed)
        ours, _ = _ours("ddm", params, values)
        assert ours == _river_hits(_river("ddm", params), values), (kind, seed)
        many = make_detector("ddm", params)
        assert many.update_many(values) == ours


@st.composite
def _piecewise(draw, binary: bool) -> np.ndarray:
    """A stream of 1-5 stationary pieces: 0/1 errors at a rate each, or Gaussian values of a mean and scale each."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pieces = []
    for _ in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 1500))
        if binary:
            pieces.append((rng.random(n) < draw(st.floats(0.0, 1.0))).astype(np.float64))
        else:
            pieces.append(rng.normal(draw(st.floats(-3, 3)), draw(st.floats(0.0, 3.0)), n))
    return np.concatenate(pieces)


@settings(max_examples=40, deadline=None)
@given(values=st.one_of(_piecewise(True), _piecewise(False)), clock=st.sampled_from([1, 5, 32]),
       delta=st.sampled_from([0.002, 0.05, 0.3]))
def test_adwin_both_matches_river_on_any_piecewise_stream(values, clock, delta):
    params = {"direction": "both", "clock": clock, "delta": delta}
    assert _ours("adwin", params, values)[0] == _river_hits(_river("adwin", params), values)


@settings(max_examples=40, deadline=None)
@given(values=st.one_of(_piecewise(True), _piecewise(False)), direction=st.sampled_from(["up", "down", "both"]),
       threshold=st.sampled_from([2.0, 10.0, 50.0]))
def test_page_hinkley_matches_river_on_any_piecewise_stream(values, direction, threshold):
    params = {"direction": direction, "threshold": threshold}
    assert _ours("page_hinkley", params, values)[0] == _river_hits(_river("page_hinkley", params), values)


@settings(max_examples=40, deadline=None)
@given(values=_piecewise(True), warm_start=st.sampled_from([0, 5, 30]), d=st.sampled_from([1.0, 2.0, 3.0]))
def test_ddm_matches_river_on_any_piecewise_stream(values, warm_start, d):
    params = {"warm_start": warm_start, "drift_threshold": d}
    ours, _ = _ours("ddm", params, values)
    assert ours == _river_hits(_river("ddm", params), values)
    assert make_detector("ddm", params).update_many(values) == ours
