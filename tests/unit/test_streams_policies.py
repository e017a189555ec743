"""Batch, buffer and injection policies: pure decisions on sample counts (paper 004, ScaDLES)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.config import BatchConfig, InjectionConfig
from edgestream.streams import (
    AvailableBatch,
    FixedBatch,
    PersistBuffer,
    RateBatch,
    TakeRule,
    TruncateBuffer,
    arrived_in_window,
    build_batch_policy,
    build_buffer_policy,
    build_injection,
    build_rate_model,
    injection_count,
    injection_targets,
    persist_buffer_size,
    samples_arrived,
    time_until_available,
)

# ---------------------------------------------------------------- batch size


def test_fixed_batch():
    p = build_batch_policy({"policy": "fixed", "size": 32})
    assert p == FixedBatch(32) and p.target(rate=500.0, available=3) == 32
    assert not p.ready(32, 31) and p.ready(32, 32)
    assert build_batch_policy({"policy": "fixed"}).size == 64 and build_batch_policy(None) == FixedBatch(64)


def test_rate_batch_is_last_second_of_stream_clipped():
    p = build_batch_policy({"policy": "rate", "min": 8, "max": 1024})
    assert p == RateBatch(8, 1024)
    assert [p.target(r, 0) for r in (0.0, 3.2, 7.5, 8.4, 63.5, 64.49, 1023.6, 5000.0)] == \
        [8, 8, 8, 8, 64, 64, 1024, 1024]
    assert p.ready(64, 64) and not p.ready(64, 63)


def test_available_batch():
    p = build_batch_policy({"policy": "available", "max": 100})
    assert p == AvailableBatch(100)
    assert [p.target(1.0, a) for a in (0, 1, 57, 100, 4000)] == [1, 1, 57, 100, 100]
    assert p.ready(100, 1) and not p.ready(1, 0)
    assert build_batch_policy({"policy": "available"}).max == 512


@pytest.mark.parametrize("spec,message", [
    ({"policy": "rate", "min": 0}, "batch.min: 0 is not allowed; must be >= 1"),
    ({"policy": "rate", "min": 64, "max": 32}, r"batch.min: 64 is not allowed; must be <= batch.max \(32\)"),
    ({"policy": "fixed", "size": 2.5}, "batch.size: 2.5 is not allowed; must be a whole number"),
    ({"policy": "fixed", "min": 2}, "batch.min: unknown field; allowed fields for policy 'fixed': policy, size"),
    ({"policy": "greedy"}, "batch.policy: 'greedy' is not allowed; must be one of fixed, rate, available"),
    ({"size": 3}, "batch.policy: None is not allowed"),
])
def test_bad_batch_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        build_batch_policy(spec)


@pytest.mark.parametrize("raw", [{"policy": "fixed", "size": 16}, {"policy": "rate"}, {"policy": "available"}])
def test_batch_config_sections_build(raw):
    policy = build_batch_policy(BatchConfig(**raw).spec())
    assert policy.name == raw["policy"]


# ---------------------------------------------------------------- arrivals and waiting under a rate model


def test_arrivals_and_wait_constant_rate():
    m = build_rate_model({"distribution": "constant", "rate": 10}, None, 1, 0)
    assert arrived_in_window(m, 0, 5.0, 1.0) == 10
    assert arrived_in_window(m, 0, 0.35, 1.0) == 3  # nothing before the start
    assert samples_arrived(m, 0, 2.0, 2.0) == 0
    assert time_until_available(m, 0, 0.05, 3) == pytest.approx(0.25)  # samples 1, 2, 3 at 0.1 .. 0.3
    assert time_until_available(m, 0, 0.3, 1) == pytest.approx(0.1)  # sample 3 already counted at 0.3
    assert time_until_available(m, 0, 7.0, 0) == 0.0


@settings(max_examples=40, deadline=None)
@given(t=st.floats(0.0, 100.0), need=st.integers(1, 500), kind=st.sampled_from(["none", "sinusoid", "bursts"]))
def test_time_until_available_is_exactly_enough(t, need, kind):
    m = _VARIED[kind]
    w = time_until_available(m, 0, t, need)
    assert w > 0
    assert samples_arrived(m, 0, t, t + w) >= need
    assert samples_arrived(m, 0, t, t + w * (1 - 1e-6) - 1e-9) < need


_VARIED = {k: build_rate_model({"distribution": "constant", "rate": 37.3}, {"kind": k}, 1, seed=1)
           for k in ("none", "sinusoid", "bursts")}


# ---------------------------------------------------------------- buffer policies


def test_persist_never_truncates():
    p = build_buffer_policy("persist")
    assert p.name == "persist" and p.window_s == 1.0
    assert [p.truncate(a, w) for a, w in ((0, 0), (500, 40), (40, 500))] == [0, 0, 0]


def test_truncate_skips_oldest_backlog():
    p = build_buffer_policy("truncate", window_s=2.0)
    assert p.window_s == 2.0
    assert p.truncate(available=500, arrived_in_window=40) == 460
    assert p.truncate(available=40, arrived_in_window=40) == 0
    assert p.truncate(available=10, arrived_in_window=40) == 0  # consumed part of the window already
    with pytest.raises(ValueError, match="must be >= 0"):
        p.truncate(-1, 0)


def test_truncate_under_rate_model_keeps_one_window():
    m = build_rate_model({"distribution": "constant", "rate": 120}, None, 1, 0)
    p = build_buffer_policy("truncate", window_s=1.0)
    available = math.floor(m.cumulative(0, 30.0))  # nothing consumed for 30 s
    skip = p.truncate(available, arrived_in_window(m, 0, 30.0, 1.0))
    assert available - skip == 120 and skip == 3480


def test_bad_buffer_specs():
    with pytest.raises(ValueError, match="algorithm.buffer: 'drop' is not allowed; must be one of persist, truncate"):
        build_buffer_policy("drop")
    with pytest.raises(ValueError, match="buffer.window_s: 0 is not allowed; must be > 0"):
        build_buffer_policy("truncate", window_s=0)


def test_persist_buffer_eq2_hand_computed():
    # S = 100 samples/s, t_i = 1.5 s, b_i = 64: each step adds t S - b = 86 on top of the first S.
    assert persist_buffer_size(100, 1.5, 64, 0) == 100
    assert persist_buffer_size(100, 1.5, 64, 1) == 186  # (S - b) + t S, the paper's T = 1 case
    assert persist_buffer_size(100, 1.5, 64, 10) == 960
    assert persist_buffer_size(50, 0.5, 25, 1000) == 50  # b = t S: buffer stays at S (paper, section III)
    q = 100.0
    for _ in range(25):
        q += 1.5 * 100 - 64
    assert persist_buffer_size(100, 1.5, 64, 25) == pytest.approx(q)
    with pytest.raises(ValueError, match="T: -1 is not allowed"):
        persist_buffer_size(1, 1, 1, -1)


# ---------------------------------------------------------------- injection


@settings(max_examples=60, deadline=None)
@given(num_devices=st.integers(1, 80), alpha=st.floats(0.01, 1.0), seed=st.integers(0, 2**32), data=st.data())
def test_injection_targets_distinct_others(num_devices, alpha, seed, data):
    device = data.draw(st.integers(0, num_devices - 1))
    targets = injection_targets(np.random.default_rng(seed), device, num_devices, alpha)
    assert len(targets) == min(math.ceil(alpha * num_devices - 1e-9), num_devices - 1)
    assert len(set(targets)) == len(targets) and device not in targets
    assert all(0 <= t < num_devices for t in targets)


def test_injection_counts_and_float_edges():
    rng = np.random.default_rng(0)
    assert len(injection_targets(rng, 0, 30, 0.1)) == 3  # 0.1 * 30 = 3.0000000000000004 in floats
    assert len(injection_targets(rng, 0, 10, 0.25)) == 3
    assert len(injection_targets(rng, 0, 4, 1.0)) == 3
    assert injection_targets(rng, 0, 1, 0.5) == []
    assert [injection_count(b, n) for b, n in ((0.1, 64), (0.25, 64), (0.3, 10), (0.5, 1), (1.0, 7))] == [6, 16, 3, 0, 7]
    picks = {tuple(injection_targets(np.random.default_rng(s), 2, 20, 0.1)) for s in range(30)}
    assert len(picks) > 10  # random, not a fixed neighbourhood


def test_build_injection_and_shared_rng():
    assert build_injection(None) is None
    inj = build_injection(InjectionConfig(alpha=0.2, beta=0.25).model_dump())
    assert (inj.alpha, inj.beta, inj.mode) == (0.2, 0.25, "samples")
    plan = inj.plan(seed=3, device=1, step=7, num_devices=10, b_i=40)
    assert plan == inj.plan(seed=3, device=1, step=7, num_devices=10, b_i=40)
    assert len(plan.targets) == 2 and 1 not in plan.targets
    assert len(plan.indices) == 10 == len(set(plan.indices)) and plan.samples_sent == 20
    assert plan.targets == inj.targets(3, 1, 7, 10)
    # the consumer's own sequence on the same step RNG picks the same peers and samples
    rng = np.random.default_rng([3, 1, 7])
    assert injection_targets(rng, 1, 10, 0.2) == plan.targets
    assert sorted(rng.choice(40, size=10, replace=False).tolist()) == sorted(plan.indices)
    steps = {tuple(inj.targets(3, 1, s, 10)) for s in range(20)}
    assert len(steps) > 5


@pytest.mark.parametrize("spec,message", [
    ({"alpha": 0}, "injection.alpha: 0 is not allowed; must be > 0"),
    ({"alpha": 0.1, "beta": 1.5}, "injection.beta: 1.5 is not allowed; must be <= 1"),
    ({"alpha": 0.1, "gamma": 1}, "injection.gamma: unknown field; allowed fields: alpha, beta, mode"),
    ({"mode": "pixels"}, "injection.mode: 'pixels' is not allowed; must be one of samples, labels"),
])
def test_bad_injection_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        build_injection(spec)


# ---------------------------------------------------------------- the shared take sequence (TakeRule)


def test_take_rule_truncates_once_measures_and_sizes():
    rule = TakeRule(TruncateBuffer(2.0), RateBatch(8, 64))
    assert rule.window_s == 2.0 and rule.measures_window
    d = rule.decide(available=500, arrived_in_window=90)
    assert (d.skip, d.rate, d.target, d.available, d.explicit) == (410, 45.0, 45, 90, False)
    assert d.ready(45) and not d.ready(44) and d.missing(40) == 5 and d.missing(50) == 0
    d = rule.decide(available=500, arrived_in_window=90, size=100)  # an explicit size overrides b_i
    assert (d.skip, d.target, d.explicit) == (410, 100, True) and not d.ready(90) and d.missing(90) == 10


def test_take_rule_without_a_window_and_explicit_readiness():
    rule = TakeRule(PersistBuffer(), AvailableBatch(16), window_s=0.5)
    assert not rule.measures_window and rule.window_s == 0.5
    d = rule.decide(available=0, arrived_in_window=None)
    assert (d.skip, d.rate, d.target) == (0, 0.0, 1) and d.missing(0) == 1 and d.ready(1)
    d = rule.decide(available=40, arrived_in_window=None)
    assert d.target == 16 and d.ready(3)  # the available policy takes what is there
    assert not rule.decide(40, None, size=16).ready(3)  # an explicit size waits for all of it
    assert TakeRule(PersistBuffer(), RateBatch()).measures_window
    with pytest.raises(ValueError, match="needs the arrivals"):
        TakeRule(TruncateBuffer(), FixedBatch(4)).decide(10, None)
    with pytest.raises(ValueError, match="window_s"):
        TakeRule(PersistBuffer(), FixedBatch(4), window_s=0.0)


@settings(max_examples=200, deadline=None)
@given(buffer=st.sampled_from(["persist", "truncate"]), window=st.sampled_from([0.25, 1.0, 3.0]),
       batch=st.sampled_from([{"policy": "fixed", "size": 32}, {"policy": "rate", "min": 2, "max": 50},
                              {"policy": "available", "max": 20}]),
       available=st.integers(0, 400), arrived=st.integers(0, 400), size=st.none() | st.integers(0, 100))
def test_take_rule_is_the_policies_composed(buffer, window, batch, available, arrived, size):
    buf, bat = build_buffer_policy(buffer, window_s=window), build_batch_policy(batch)
    d = TakeRule(buf, bat).decide(available, arrived, size)
    skip = buf.truncate(available, arrived)
    assert d.skip == skip and d.available == available - skip and d.rate == arrived / window
    assert d.target == (size if size is not None else bat.target(arrived / window, available - skip))
    for buffered in (0, d.available, d.target, d.target + 3):
        ready = buffered >= d.target if size is not None else bat.ready(d.target, buffered)
        assert d.ready(buffered) == ready and (d.missing(buffered) == 0) == ready
        assert d.ready(buffered + d.missing(buffered))  # waiting for the missing samples is enough
