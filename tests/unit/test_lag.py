"""Lag visible and bounded (issue 32 item 3), without a broker: the shared take decision with a lag bound
(`TakeRule`, `algorithm.max_lag_s`), the replacement of rejected samples (`TakeDecision.refill`), the
lag-growth warning (`LagWatch`, `runtime.lag_warning_s`), the simulator's lag figures and its bound,
the TensorBoard series and the fields' validation. The Kafka side: tests/system/test_lag_real.py."""

from __future__ import annotations

import io

import numpy as np
import pytest
from factories import digits_config  # tests/factories.py
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.config import ConfigError, validate_dict
from edgestream.metrics.tensorboard import scalars
from edgestream.runner import run_config
from edgestream.sim.stream import VirtualStream
from edgestream.streams import (
    AvailableBatch,
    FixedBatch,
    PersistBuffer,
    RateBatch,
    TakeRule,
    TruncateBuffer,
    build_rate_model,
)
from edgestream.streams.lag import LagWatch


def constant(rate: float):
    return build_rate_model({"distribution": "constant", "rate": rate}, None, 1, seed=0)


# ---------------------------------------------------------------- TakeRule: the lag bound
def test_the_lag_bound_skips_what_is_older_than_max_lag_s():
    rule = TakeRule(PersistBuffer(), FixedBatch(16), max_lag_s=2.0)
    assert rule.needs_recent(None) and rule.needs_recent(2.5) and not rule.needs_recent(2.0)
    d = rule.decide(available=500, arrived_in_window=None, recent=120)
    assert (d.skip, d.lag_skip, d.available, d.target) == (380, 380, 120, 16)
    d = rule.decide(available=100, arrived_in_window=None, recent=120)  # nothing older than the bound
    assert (d.skip, d.lag_skip, d.available) == (0, 0, 100)
    d = rule.decide(available=100, arrived_in_window=None)  # the source saw nothing that old: no count
    assert d.skip == 0
    # with truncate, the tighter of the two wins; the bound's share is what it skipped beyond it
    rule = TakeRule(TruncateBuffer(1.0), RateBatch(8, 64), max_lag_s=3.0)
    d = rule.decide(available=500, arrived_in_window=90, recent=300)
    assert (d.skip, d.lag_skip) == (410, 0)
    rule = TakeRule(TruncateBuffer(5.0), RateBatch(8, 64), max_lag_s=3.0)
    d = rule.decide(available=500, arrived_in_window=400, recent=240)
    assert (d.skip, d.lag_skip, d.available) == (260, 160, 240)
    unbounded = TakeRule(PersistBuffer(), FixedBatch(16))
    assert not unbounded.needs_recent(None) and unbounded.decide(500, None, recent=10).skip == 0
    with pytest.raises(ValueError, match="algorithm.max_lag_s: 0 is not allowed; must be > 0"):
        TakeRule(PersistBuffer(), FixedBatch(16), max_lag_s=0)


@settings(max_examples=200, deadline=None)
@given(available=st.integers(0, 400), recent=st.integers(0, 400), window=st.integers(0, 400),
       buffer=st.sampled_from(["persist", "truncate"]))
def test_the_bound_never_keeps_more_than_arrived_in_its_seconds(available, recent, window, buffer):
    buf = PersistBuffer() if buffer == "persist" else TruncateBuffer(1.0)
    d = TakeRule(buf, FixedBatch(8), max_lag_s=2.0).decide(available, window, recent=recent)
    assert d.available == available - d.skip and 0 <= d.available <= min(available, recent)
    assert d.skip == max(buf.truncate(available, window), available - recent)
    assert d.lag_skip == d.skip - buf.truncate(available, window)


# ---------------------------------------------------------------- refill: rejected samples are replaced
def test_rejected_samples_are_replaced_as_each_policy_says():
    fixed = TakeRule(PersistBuffer(), FixedBatch(16)).decide(40, None)
    assert fixed.refill(16) == (0, 0) and fixed.refill(10) == (6, 6) and fixed.refill(0) == (16, 16)
    rate = TakeRule(TruncateBuffer(1.0), RateBatch(8, 64)).decide(90, 30)
    assert rate.target == 30 and rate.refill(25) == (5, 5)  # b_i is a demanded size too
    explicit = TakeRule(PersistBuffer(), AvailableBatch(48)).decide(40, None, size=12)
    assert explicit.refill(3) == (9, 9)  # an algorithm's explicit size: all of it
    available = TakeRule(PersistBuffer(), AvailableBatch(48)).decide(30, None)
    assert available.target == 30
    assert available.refill(5) == (25, 0)  # top up from what is buffered, without waiting
    assert available.refill(0) == (30, 1)  # nothing valid: wait for one, as for the first
    assert TakeRule(PersistBuffer(), FixedBatch(16)).decide(40, None, size=0).refill(0) == (0, 0)


# ---------------------------------------------------------------- LagWatch
def _fired(watch: LagWatch, series) -> list[float]:
    return [t for t, lag in series if watch.update(t, lag)]


def test_a_steadily_growing_lag_warns_once_after_lag_warning_s():
    watch = LagWatch(60.0)
    # caught up for 100 s (0-32 samples, as batches come and go), then the stream outruns training by
    # 300 samples/s with the same ups and downs
    series = [(t, (t * 7) % 33) for t in np.arange(0, 100, 0.05)]
    series += [(t, 300 * (t - 100) + (t * 7) % 33) for t in np.arange(100, 400, 0.05)]
    fired = _fired(watch, series)
    assert len(fired) == 1 and 160 <= fired[0] <= 100 + 1.25 * 60 + 0.05


def test_a_fluctuating_or_flat_lag_never_warns():
    rng = np.random.default_rng(3)
    t = np.arange(0, 3600, 0.02)
    noisy = LagWatch(60.0)
    assert _fired(noisy, zip(t, rng.integers(0, 5000, len(t)), strict=True)) == []
    wander = LagWatch(60.0)  # training keeps up, with swings of seconds: a lag that returns to its level
    lag = np.zeros(len(t))
    for k in range(1, len(t)):
        lag[k] = max(0.0, 0.99 * lag[k - 1] + 10.0 + rng.normal(0, 100))
    assert lag.max() > 3 * lag.mean() > 1000  # it swings widely around ~1,000
    assert _fired(wander, zip(t, lag, strict=True)) == []
    assert _fired(LagWatch(60.0), ((x, 12345) for x in t)) == []


def test_a_lag_that_climbs_to_its_bound_and_holds_does_not_warn():
    """A lag bounded by max_lag_s (2 s) climbs for 2 s, then holds with small ups and downs: it has not
    kept growing for lag_warning_s (3 s); one that goes on climbing has."""
    rng = np.random.default_rng(5)
    t = np.arange(0, 30, 0.01)
    held = np.minimum(t, 2.0) - rng.uniform(0, 0.02, len(t)) * (t > 2)
    assert _fired(LagWatch(3.0), zip(t, held, strict=True)) == []
    fired = _fired(LagWatch(3.0), zip(t, t - rng.uniform(0, 0.02, len(t)), strict=True))
    assert len(fired) == 1 and 3.0 <= fired[0] <= 3.75 + 0.01


def test_the_warning_rearms_once_the_lag_has_drained():
    watch = LagWatch(8.0)
    up = [(t, 100 * t) for t in np.arange(0, 20, 0.1)]
    down = [(t, max(0.0, 2000 - 400 * (t - 20))) for t in np.arange(20, 30, 0.1)]  # drains to 0
    again = [(t, 100 * (t - 30)) for t in np.arange(30, 50, 0.1)]
    fired = _fired(watch, up + down + again)
    assert len(fired) == 2 and 8 <= fired[0] <= 10.1 and 38 <= fired[1] <= 40.1
    with pytest.raises(ValueError, match="runtime.lag_warning_s: 0 is not allowed; must be > 0"):
        LagWatch(0)


# ---------------------------------------------------------------- the simulator's lag figures and bound
def test_virtual_stream_reports_the_lag_in_seconds_and_bounds_it():
    s = VirtualStream(0, constant(100.0), PersistBuffer(), FixedBatch(10))
    plan = s.plan(10.0, None)  # 1001 arrived, none taken
    taken = s.take_at(10.0, plan.target)
    assert taken.backlog == 991 and taken.lag_s == pytest.approx(10.0 - 10 / 100)  # sample 10 was due at 0.1 s
    s.take_at(10.0, 991)
    assert s.take_at(10.0, 0).lag_s == 0.0  # nothing buffered: no lag
    bounded = VirtualStream(0, constant(100.0), PersistBuffer(), FixedBatch(10), max_lag_s=2.0)
    plan = bounded.plan(10.0, None)  # samples arrived in (8, 10]: 200; the 801 older ones are skipped
    assert plan.dropped == 801 and bounded.dropped_total == 801
    taken = bounded.take_at(10.0, plan.target)
    assert taken.start == 801 and taken.backlog == 190 and taken.lag_s <= 2.0


def _sim_cfg(name: str, max_lag_s: float | None, batch: int = 8, buffer: str = "persist"):
    algorithm = {"name": "ddl", "batch": {"policy": "fixed", "size": batch}, "buffer": buffer}
    if max_lag_s is not None:
        algorithm["max_lag_s"] = max_lag_s
    return validate_dict(digits_config(
        name, rate=2000, compute={"base_s": 0.02, "per_sample_s": 0.0}, momentum=None, algorithm=algorithm,
        max_steps=150, max_time_s=None, eval_s=100))


def _steps(run_dir) -> list[dict]:
    import json

    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines() if '"kind":"step"' in x]


@pytest.mark.parametrize("max_lag_s", [0.5, 1.5])
def test_the_simulator_bounds_the_lag_and_counts_the_skipped_samples(tmp_path, max_lag_s):
    """2,000 samples/s against 8 samples per 20 ms step: the stream outruns training 5 to 1. Unbounded,
    the lag grows every step; bounded, it stays within max_lag_s seconds and every sample is either
    trained once, skipped (dropped) or still buffered."""
    free, _ = run_config(_sim_cfg("free", None), "sim", out=tmp_path / "a", progress=False)
    lags = [s["lag_s"] for s in _steps(free) if s["device"] == 0]
    assert lags[-1] > 2.0 and all(b >= a for a, b in zip(lags, lags[1:], strict=False))
    bound, summary = run_config(_sim_cfg("bound", max_lag_s), "sim", out=tmp_path / "b", progress=False)
    steps = _steps(bound)
    assert summary["dropped_total"] == sum(s["dropped"] for s in steps) > 0
    for d in (0, 1):
        mine = [s for s in steps if s["device"] == d]
        assert all(s["batch"] == 8 for s in mine)
        assert max(s["lag_s"] for s in mine) <= max_lag_s + 1e-9
        assert max(s["lag_s"] for s in mine) > max_lag_s - 0.1  # it reached the bound: the bound is what held
        nxt = 0  # the next sequence number not yet trained or skipped
        for s in mine:
            assert s["seq_first"] == nxt + s["dropped"] and s["seq_last"] == s["seq_first"] + 7
            nxt = s["seq_last"] + 1
        # the bound holds the backlog to the samples of the last max_lag_s seconds
        assert mine[-1]["buffer_samples"] <= 2000 * max_lag_s + 1


def test_the_live_view_shows_the_lag_and_passes_a_warning_on_once():
    from rich.console import Console

    from edgestream.launch.view import LiveState

    state = LiveState("r", 2)
    line = "warning: device 1: the stream outruns training: ..."
    state.add([(0, {"kind": "step", "device": 0, "step": 3, "batch": 16, "buffer_samples": 900, "lag_s": 4.25}),
               (1, {"kind": "step", "device": 1, "step": 3, "batch": 16, "buffer_samples": 2000, "lag_s": 12.5,
                    "lag_warning": line})])
    assert state.pop_warnings() == [line] and state.pop_warnings() == []
    assert "buffer max 2000 | lag max 12.5 s" in state.line()
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(state.table())
    cells = [[c.strip() for c in r.strip("│┃").split("│" if "│" in r else "┃")] for r in
             console.export_text().splitlines() if r.startswith(("│", "┃"))]
    header, rows = cells[0], {r[0]: dict(zip(cells[0], r, strict=True)) for r in cells[1:]}
    assert header[5:7] == ["buffer", "lag s"]
    assert (rows["0"]["buffer"], rows["0"]["lag s"], rows["1"]["lag s"]) == ("900", "4.2", "12.5")


def test_the_lag_in_seconds_is_a_tensorboard_series():
    records = [{"kind": "step", "device": 0, "step": 0, "time": 1.0, "lag_s": 0.25, "buffer_samples": 40},
               {"kind": "step", "device": 0, "step": 1, "time": 2.0, "lag_s": 0.75, "buffer_samples": 90}]
    got = [(tag, v, step) for tag, v, step, _ in scalars(records) if tag.startswith(("lag_seconds", "buffer"))]
    assert got == [("buffer/device_0", 40.0, 0), ("lag_seconds/device_0", 0.25, 0),
                   ("buffer/device_0", 90.0, 1), ("lag_seconds/device_0", 0.75, 1)]


# ---------------------------------------------------------------- config
@pytest.mark.parametrize("section,field,value,line", [
    ("algorithm", "max_lag_s", 0, "algorithm.max_lag_s: 0 is not allowed; must be > 0"),
    ("algorithm", "max_lag_s", -3, "algorithm.max_lag_s: -3 is not allowed; must be > 0"),
    ("algorithm", "max_lag_s", "soon", "algorithm.max_lag_s: soon is not allowed; input should be a valid number"),
    ("runtime", "lag_warning_s", 0, "runtime.lag_warning_s: 0 is not allowed; must be > 0"),
    ("runtime", "lag_warning_s", None, "runtime.lag_warning_s: null is not allowed; input should be a valid number"),
])
def test_the_lag_fields_are_validated_naming_the_field(section, field, value, line):
    raw = {"name": "x", "algorithm": {"name": "ddl"}, "runtime": {}}
    raw[section][field] = value
    with pytest.raises(ConfigError) as info:
        validate_dict(raw)
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith(line), info.value.problems


def test_the_lag_fields_defaults():
    cfg = validate_dict({"name": "x", "algorithm": {"name": "ddl", "max_lag_s": 30}})
    assert cfg.algorithm.max_lag_s == 30 and cfg.runtime.lag_warning_s == 60
    assert validate_dict({"name": "x"}).algorithm.max_lag_s is None
