"""Rate models S_i(t): presets, per-device determinism, variation kinds, traces, integral and inverse."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.config import RatesConfig, VariationConfig
from edgestream.streams import PRESETS, build_rate_model, preset

VARIATIONS = [
    {"kind": "none"},
    {"kind": "sinusoid", "period_s": 7.0, "amplitude": 0.8},
    {"kind": "random_walk", "sigma": 0.3, "step_s": 0.5},
    {"kind": "bursts", "every_s": 6.0, "duration_s": 1.5, "factor": 4.0},
    {"kind": "bursts", "every_s": 3.0, "duration_s": 2.0, "factor": 0.2},
]
SQ3 = math.sqrt(3.0)


TRACE = "time,device,rate\n0,0,10\n5,0,40\n12.5,0,2\n2,1,100\n3,1,0.2\n0,2,7\n"


@pytest.fixture
def trace_csv(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_text(TRACE)
    return path


def _models(trace_csv):
    models = [build_rate_model({"preset": "S1"}, v, 4, seed=5) for v in VARIATIONS]
    models.append(build_rate_model({"distribution": "trace", "path": str(trace_csv)}, {"kind": "none"}, 3, 0))
    return models


# ---------------------------------------------------------------- presets and base rates


def test_presets_have_table_one_parameters():
    assert {n: (p.distribution, p.mean, p.std) for n, p in PRESETS.items()} == {
        "S1": ("uniform", 38.0, 24.0), "S2": ("uniform", 300.0, 112.0),
        "S1'": ("normal", 64.0, 24.0), "S2'": ("normal", 256.0, 28.0),
    }
    s1 = PRESETS["S1"].spec(min_rate=1.0)
    assert s1["low"] == 1.0 and s1["high"] == pytest.approx(38 + SQ3 * 24)  # derived low -3.57 clipped
    s2 = PRESETS["S2"].spec(min_rate=1.0)
    assert (s2["low"], s2["high"]) == pytest.approx((300 - SQ3 * 112, 300 + SQ3 * 112))
    assert (s2["high"] - s2["low"]) / math.sqrt(12) == pytest.approx(112)
    assert preset("S1p") is PRESETS["S1'"] and preset("S2prime") is PRESETS["S2'"]
    with pytest.raises(ValueError, match="rates.preset: 'S3' is not allowed; must be one of S1, S2"):
        preset("S3")


@pytest.mark.parametrize("name,low,high", [("S1", 1.0, 38 + SQ3 * 24), ("S2", 300 - SQ3 * 112, 300 + SQ3 * 112)])
def test_uniform_preset_rates_in_range(name, low, high):
    b = build_rate_model({"preset": name}, {"kind": "none"}, 300, seed=1).base_rates
    assert b.min() >= low and b.max() <= high
    assert b.max() - b.min() > 0.8 * (high - low)  # spread over the range, not one value
    assert b.mean() == pytest.approx((low + high) / 2, rel=0.1)


@pytest.mark.parametrize("name,mean,std", [("S1'", 64, 24), ("S2p", 256, 28)])
def test_normal_preset_rates(name, mean, std):
    b = build_rate_model({"preset": name}, None, 400, seed=2).base_rates
    assert b.min() >= 1.0
    assert b.mean() == pytest.approx(mean, abs=4 * std / 20)
    assert b.std() == pytest.approx(std, rel=0.2)


def test_truncation_at_min_rate_redraws():
    b = build_rate_model({"distribution": "normal", "mean": 5, "std": 20}, None, 300, seed=0, min_rate=3).base_rates
    assert b.min() >= 3 and np.mean(b == 3.0) < 0.05  # redrawn, not piled at the floor
    e = build_rate_model({"distribution": "exponential", "mean": 10}, None, 300, seed=0, min_rate=2).base_rates
    assert e.min() >= 2 and e.mean() == pytest.approx(12, rel=0.2)  # memoryless: 2 + Exp(10)


def test_lognormal_mean_is_the_rate_mean():
    b = build_rate_model({"distribution": "lognormal", "mean": 50, "sigma": 0.5}, None, 800, seed=3).base_rates
    assert b.mean() == pytest.approx(50, rel=0.08)
    assert np.log(b).std() == pytest.approx(0.5, rel=0.15)


def test_constant_and_uniform_bounds():
    m = build_rate_model({"distribution": "constant", "rate": 100}, {"kind": "none"}, 3, seed=0)
    assert list(m.base_rates) == [100.0] * 3 and m.rate(2, 9.0) == 100.0 and m.cumulative(1, 2.5) == 250.0
    u = build_rate_model({"distribution": "uniform", "low": 0, "high": 4}, None, 200, seed=0, min_rate=2)
    assert u.base_rates.min() >= 2 and u.base_rates.max() <= 4
    with pytest.raises(ValueError, match=r"rates.rate: 0.5 is not allowed; must be >= min_rate \(1.0\)"):
        build_rate_model({"distribution": "constant", "rate": 0.5}, None, 2, 0)


@pytest.mark.parametrize("variation", VARIATIONS)
def test_deterministic_per_seed(variation):
    a = build_rate_model({"preset": "S1'"}, variation, 6, seed=11)
    b = build_rate_model({"preset": "S1'"}, variation, 6, seed=11)
    c = build_rate_model({"preset": "S1'"}, variation, 6, seed=12)
    ts = [0.0, 1.3, 17.0, 250.0]
    assert np.array_equal(a.base_rates, b.base_rates)
    assert all(np.array_equal(a.rates(t), b.rates(t)) for t in ts)
    assert not np.array_equal(a.base_rates, c.base_rates)


@pytest.mark.parametrize("variation", VARIATIONS)
def test_adding_devices_keeps_existing_rates(variation):
    small = build_rate_model({"preset": "S2"}, variation, 4, seed=7)
    large = build_rate_model({"preset": "S2"}, variation, 32, seed=7)
    assert np.array_equal(small.base_rates, large.base_rates[:4])
    for t in (0.0, 2.2, 40.0, 123.4):
        assert np.array_equal(small.rates(t), large.rates(t)[:4])
        assert [small.cumulative(d, t) for d in range(4)] == [large.cumulative(d, t) for d in range(4)]


def test_random_walk_independent_of_query_order():
    spec, var = {"preset": "S1"}, {"kind": "random_walk", "sigma": 0.2, "step_s": 0.01}
    a, b = build_rate_model(spec, var, 2, 3), build_rate_model(spec, var, 2, 3)
    late = a.rate(1, 50.0)  # extends a's table past several blocks first
    assert [b.rate(1, t) for t in (0.0, 5.0, 50.0)] == [a.rate(1, 0.0), a.rate(1, 5.0), late]
    assert a.rate(1, 0.0) == a.base_rate(1)  # factor 1 on the first interval
    assert len({a.rate(1, t) for t in np.arange(0, 1, 0.01)}) > 50  # it does walk


# ---------------------------------------------------------------- variation shapes and the floor


def test_sinusoid_integral_matches_numeric_integration():
    m = build_rate_model({"distribution": "uniform", "low": 20, "high": 80},
                         {"kind": "sinusoid", "period_s": 9.0, "amplitude": 0.6}, 3, seed=4)
    ts = np.linspace(0.0, 31.7, 200_001)
    for d in range(3):
        s = np.array([m.rate(d, t) for t in ts[::50]])
        assert s.max() == pytest.approx(m.base_rate(d) * 1.6, rel=1e-3)
        assert s.min() == pytest.approx(m.base_rate(d) * 0.4, rel=1e-3)
        b, A, w, phi = m.base_rate(d), 0.6, 2 * math.pi / 9.0, m._profiles[d].phi
        dense = b * (1 + A * np.sin(w * ts + phi))
        numeric = np.concatenate([[0.0], np.cumsum((dense[1:] + dense[:-1]) / 2 * np.diff(ts))])
        for i in (1_000, 77_777, 200_000):
            assert m.cumulative(d, ts[i]) == pytest.approx(numeric[i], rel=1e-7, abs=1e-7)
        assert m.cumulative(d, 9.0 * 3) == pytest.approx(b * 27.0)  # whole periods average to base


def test_bursts_shape_and_integral():
    m = build_rate_model({"distribution": "constant", "rate": 10},
                         {"kind": "bursts", "every_s": 10.0, "duration_s": 2.0, "factor": 5.0}, 2, seed=0)
    ts = np.arange(0.0, 40.0, 0.001)
    for d in range(2):
        s = np.array([m.rate(d, t) for t in ts])
        assert set(np.unique(s)) == {10.0, 50.0}
        assert np.mean(s == 50.0) == pytest.approx(0.2, abs=0.01)
        assert m.cumulative(d, 40.0) == pytest.approx(4 * (2 * 50 + 8 * 10))
        assert m.cumulative(d, 17.3) == pytest.approx(np.sum(s[ts < 17.3]) * 0.001, rel=1e-3)
    assert m._profiles[0].offset != m._profiles[1].offset  # per-device offset


@pytest.mark.parametrize("variation", VARIATIONS)
def test_rates_never_below_min_rate(variation):
    m = build_rate_model({"distribution": "uniform", "low": 1, "high": 6}, variation, 8, seed=9, min_rate=1.5)
    rates = np.array([m.rates(t) for t in np.linspace(0, 60, 601)])
    assert rates.min() >= 1.5 - 1e-12
    assert m.base_rates.min() >= 1.5


def test_sinusoid_amplitude_lowered_for_slow_devices():
    m = build_rate_model({"distribution": "constant", "rate": 2},
                         {"kind": "sinusoid", "period_s": 4.0, "amplitude": 0.9}, 1, 0, min_rate=1.0)
    rates = [m.rate(0, t) for t in np.linspace(0, 4, 4001)]
    assert min(rates) == pytest.approx(1.0, abs=1e-5) and max(rates) == pytest.approx(3.0, abs=1e-5)
    assert m.cumulative(0, 4.0) == pytest.approx(8.0)  # period mean still the base rate


# ---------------------------------------------------------------- traces


def test_trace_piecewise_constant(trace_csv):
    m = build_rate_model({"distribution": "trace", "path": str(trace_csv)}, {"kind": "none"}, 3, seed=0)
    assert [m.rate(0, t) for t in (0, 4.99, 5, 12.4, 12.5, 1e4)] == [10, 10, 40, 40, 2, 2]
    assert m.rate(1, 0.5) == 100  # first rate covers [0, first time)
    assert m.rate(1, 3.0) == 1.0  # 0.2 raised to min_rate
    assert m.cumulative(0, 14.5) == pytest.approx(5 * 10 + 7.5 * 40 + 2 * 2)
    assert m.due_time(0, 50 + 40) == pytest.approx(6.0)
    assert list(m.base_rates) == [10, 100, 7]


def test_trace_errors(tmp_path, trace_csv):
    with pytest.raises(ValueError, match=r"has no rows for device\(s\) 3, 4 of the 5 configured"):
        build_rate_model({"distribution": "trace", "path": str(trace_csv)}, None, 5, 0)
    with pytest.raises(ValueError, match="variation.kind: 'sinusoid' is not allowed with a rate trace"):
        build_rate_model({"distribution": "trace", "path": str(trace_csv)}, {"kind": "sinusoid"}, 3, 0)
    bad = tmp_path / "bad.csv"
    bad.write_text("t,dev,rate\n0,0,1\n")
    with pytest.raises(ValueError, match="header must be time,device,rate"):
        build_rate_model({"distribution": "trace", "path": str(bad)}, None, 1, 0)
    bad.write_text("time,device,rate\n0,0,1\n0,0,2\n")
    with pytest.raises(ValueError, match="bad.csv:3: device 0 has two rows for time 0"):
        build_rate_model({"distribution": "trace", "path": str(bad)}, None, 1, 0)
    with pytest.raises(ValueError, match="does not exist"):
        build_rate_model({"distribution": "trace", "path": "nope.csv"}, None, 1, 0, base_dir=tmp_path)
    m = build_rate_model({"distribution": "trace", "path": trace_csv.name}, None, 3, 0, base_dir=tmp_path)
    assert m.rate(2, 1.0) == 7


# ---------------------------------------------------------------- integral and inverse


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "rates.csv"
    path.write_text(TRACE)
    return _models(path)


@settings(max_examples=60, deadline=None)
@given(which=st.integers(0, len(VARIATIONS)), device=st.integers(0, 2),
       k=st.floats(0.0, 2e5, allow_nan=False), dk=st.floats(0.0, 500.0, allow_nan=False))
def test_due_time_inverts_cumulative(models, which, device, k, dk):
    m = models[which]
    t = m.due_time(device, k)
    assert m.cumulative(device, t) == pytest.approx(k, rel=1e-6, abs=1e-6)
    assert t == 0.0 or m.cumulative(device, t * (1 - 1e-6) - 1e-9) < k  # smallest such t
    assert m.due_time(device, k + dk) >= t
    vec = m.due_times(device, np.array([k, k + dk, 0.0]))
    assert vec[0] == pytest.approx(t, rel=1e-9, abs=1e-9) and vec[2] == 0.0


@pytest.mark.parametrize("which", range(len(VARIATIONS) + 1))
def test_due_times_monotone_and_consistent(models, which):
    m = models[which]
    ks = np.linspace(0, 3_000, 2_001)
    for d in range(3):
        ts = m.due_times(d, ks)
        assert np.all(np.diff(ts) > 0) and ts[0] == 0.0
        cums = np.array([m.cumulative(d, t) for t in ts])
        assert np.allclose(cums, ks, rtol=1e-6, atol=1e-6)
        assert np.allclose(ts[::97], [m.due_time(d, k) for k in ks[::97]], rtol=1e-9, atol=1e-9)


def test_edges_and_errors():
    m = build_rate_model({"preset": "S1"}, None, 2, 0)
    assert m.cumulative(0, -3.0) == 0.0 and m.due_time(0, 0) == 0.0 and m.due_time(0, -1) == 0.0
    assert m.rate(0, -1.0) == m.rate(0, 0.0)
    with pytest.raises(IndexError, match=r"device 2 is out of range; this model has devices 0..1"):
        m.rate(2, 0.0)
    d = m.describe()
    assert d["num_devices"] == 2 and len(d["base_rates"]) == 2
    assert d["rates"] == {"preset": "S1"} and d["distribution"]["low"] == 1.0
    assert d["mean"] == pytest.approx(float(np.mean(m.base_rates)))


@pytest.mark.parametrize("rates,variation,message", [
    ({"preset": "S1", "mean": 3}, None, "rates.mean: unknown field; allowed fields for a preset: preset"),
    ({"distribution": "uniform", "low": 1, "high": 9, "mean": 3}, None,
     "rates.mean: unknown field; allowed fields for distribution 'uniform': distribution, low, high"),
    ({"distribution": "gamma", "mean": 3}, None, "rates.distribution: 'gamma' is not allowed; must be one of"),
    ({"distribution": "normal", "mean": 3}, None, "rates.std: required field is missing"),
    ({"distribution": "uniform", "low": 9, "high": 3}, None, r"rates.low: 9 is not allowed; must be < high \(3\)"),
    ({"preset": "S1", "distribution": "normal"}, None, "give exactly one of 'preset' or 'distribution'"),
    ({"preset": "S1"}, {"kind": "sinusoid", "amplitude": 1.0},
     "variation.amplitude: 1.0 is not allowed; must be < 1"),
    ({"preset": "S1"}, {"kind": "sinusoid", "sigma": 0.1},
     "variation.sigma: unknown field; allowed fields for kind 'sinusoid': kind, period_s, amplitude"),
    ({"preset": "S1"}, {"kind": "bursts", "every_s": 5, "duration_s": 5},
     "variation.duration_s: 5 is not allowed; must be < 5"),
    ({"preset": "S1"}, {"kind": "wave"}, "variation.kind: 'wave' is not allowed; must be one of none, sinusoid"),
])
def test_bad_specs_name_the_field(rates, variation, message):
    with pytest.raises(ValueError, match=message):
        build_rate_model(rates, variation, 2, 0)


@pytest.mark.parametrize("rates,variation", [
    ({"preset": "S2p"}, {"kind": "random_walk", "sigma": 0.1}),
    ({"distribution": "lognormal", "mean": 40, "sigma": 0.3}, {"kind": "bursts", "every_s": 20.0}),
    ({"distribution": "exponential", "mean": 40}, {"kind": "sinusoid", "period_s": 30, "amplitude": 0.3}),
])
def test_config_sections_build(rates, variation):
    r, v = RatesConfig(**rates), VariationConfig(**variation)
    m = build_rate_model(r.spec(), v.spec(), 4, seed=0, min_rate=r.min_rate)
    assert m.num_devices == 4 and np.all(m.rates(3.0) >= r.min_rate)
    assert m.variation["kind"] == variation["kind"]
