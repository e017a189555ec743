"""The drift detectors (edgestream.drift; docs/stream-learning.md, "Drift detectors") as the engines and a user use
them: built through the `detectors` registry (a built-in, or a user's package by import path or entry point), fed
prequential errors one at a time or a batch at a time (the same detections), checkpointed through JSON and
torch.load(weights_only=True) mid-stream (the same later detections), and refusing bad params and bad values in
one line. Which changes count as drift (`direction`) and the warm-up are checked on streams that show them.
River is the reference of tests/unit/test_drift_detectors_vs_river.py."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream import plugins
from edgestream.drift import ADWIN, DDM, Detector, DetectorError, PageHinkley, make_detector

BUILTINS = ("adwin", "page_hinkley", "ddm")


def _bernoulli(rng: np.random.Generator, parts: list[tuple[float, int]]) -> np.ndarray:
    """0/1 errors: `n` values at error rate `p` for each (p, n) in turn."""
    return np.concatenate([(rng.random(n) < p).astype(np.float64) for p, n in parts])


def _hits(det, values) -> list[int]:
    return [i for i, v in enumerate(np.asarray(values, dtype=float).tolist()) if det.update(v)]


# ---------------------------------------------------------------- the registry and the defaults
def test_builtins_are_registered_by_import_path_and_a_lookup_imports_none():
    assert plugins.DETECTORS.builtins == BUILTINS
    assert plugins.REGISTRIES["detectors"] is plugins.DETECTORS and plugins.DETECTORS.group == "edgestream.detectors"
    code = ("import sys; from edgestream import plugins; assert plugins.DETECTORS.knows('adwin'); "
            "print(sorted(m for m in sys.modules if m.startswith('edgestream.drift')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert type(make_detector("adwin")) is ADWIN and type(make_detector("ddm")) is DDM
    assert type(make_detector("page_hinkley", {}, labels=False)) is PageHinkley


def test_defaults_are_rivers_and_the_direction_is_up():
    assert make_detector("adwin").params == {"delta": 0.002, "clock": 32, "max_buckets": 5, "min_window_length": 5,
                                             "grace_period": 10, "direction": "up"}
    assert make_detector("page_hinkley").params == {"min_instances": 30, "delta": 0.005, "threshold": 50.0,
                                                    "alpha": 1 - 0.0001, "direction": "up"}
    assert make_detector("ddm").params == {"warm_start": 30, "drift_threshold": 3.0}
    assert make_detector("adwin", {"delta": 0.1, "clock": 1}).params["clock"] == 1


# ---------------------------------------------------------------- refusals, one line each
@pytest.mark.parametrize(("name", "params", "labels", "line"), [
    ("adwin", {"delta": 2}, True, "drift.params.delta: 2 is not allowed; must be < 1"),
    ("adwin", {"delta": 0}, True, "drift.params.delta: 0 is not allowed; must be > 0"),
    ("adwin", {"clock": 0}, False, "drift.params.clock: 0 is not allowed; must be >= 1"),
    ("adwin", {"clock": 2.5}, True, "drift.params.clock: 2.5 is not allowed; must be a whole number"),
    ("adwin", {"min_window_length": 0}, True, "drift.params.min_window_length: 0 is not allowed; must be >= 1"),
    ("adwin", {"direction": "sideways"}, True,
     "drift.params.direction: 'sideways' is not allowed; must be one of 'up', 'down', 'both'"),
    ("adwin", {"delt": 0.1}, True, "drift.params.delt: unknown field; allowed fields: delta, clock, max_buckets, "
                                   "min_window_length, grace_period, direction"),
    ("page_hinkley", {"alpha": 1.5}, False, "drift.params.alpha: 1.5 is not allowed; must be <= 1"),
    ("page_hinkley", {"threshold": 0}, True, "drift.params.threshold: 0 is not allowed; must be > 0"),
    ("page_hinkley", {"mode": "up"}, True, "drift.params.mode: unknown field; allowed fields: min_instances, delta, "
                                           "threshold, alpha, direction"),
    ("page_hinkley", {"delta": "small"}, True, "drift.params.delta: 'small' is not allowed; must be a number"),
    ("ddm", {"warm_start": -1}, True, "drift.params.warm_start: -1 is not allowed; must be >= 0"),
    ("ddm", {"drift_threshold": float("nan")}, True, "drift.params.drift_threshold: nan is not allowed; must be finite"),
    ("ddm", {"direction": "up"}, True, "drift.params.direction: unknown field; allowed fields: warm_start, "
                                       "drift_threshold"),
    ("ddm", {}, False, "drift.detector: ddm reads 0/1 errors (classification); for regression use adwin or "
                       "page_hinkley"),
    ("adwin", [("delta", 0.1)], True, "drift.params: must be a mapping, got list"),
])
def test_bad_params_are_refused_in_one_line(name, params, labels, line):
    with pytest.raises(DetectorError) as exc:
        make_detector(name, params, labels)
    assert str(exc.value) == line


def test_every_bad_param_gets_its_line_and_an_unknown_detector_lists_the_builtins():
    with pytest.raises(DetectorError) as exc:
        make_detector("adwin", {"delta": -1, "grace_period": -3})
    assert str(exc.value).splitlines() == ["drift.params.delta: -1 is not allowed; must be > 0",
                                           "drift.params.grace_period: -3 is not allowed; must be >= 0"]
    with pytest.raises(ValueError) as exc:
        make_detector("kswin")
    assert str(exc.value) == ("drift.detector: 'kswin' is not a built-in drift detector or an installed plugin; "
                              "built-ins: adwin, page_hinkley, ddm; or give an import path 'package.module:attribute' "
                              "(or an entry point in the group 'edgestream.detectors')")
    with pytest.raises(DetectorError, match=r"^drift.params.delta: 2 is not allowed; must be < 1$"):
        ADWIN(delta=2)  # built directly: the same check


@pytest.mark.parametrize("name", ["adwin", "page_hinkley"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_value_that_is_not_finite_is_refused_naming_it(name, bad):
    det = make_detector(name)
    det.update(0.5)
    with pytest.raises(DetectorError, match=rf"^drift detector {name}: the error {bad!r} is not a finite number"):
        det.update(bad)
    with pytest.raises(DetectorError, match=r"at position 2 is not a finite number"):
        make_detector(name).update_many([0.1, 0.2, bad, 0.3])


@pytest.mark.parametrize("bad", [0.5, -1.0, 2.0, float("nan")])
def test_ddm_reads_0_1_errors_only(bad):
    with pytest.raises(DetectorError, match=r"^drift detector ddm: reads 0/1 errors \(classification\), got"):
        make_detector("ddm").update(bad)
    with pytest.raises(DetectorError, match=r"at position 1$"):
        make_detector("ddm").update_many(np.array([1.0, bad, 0.0]))


# ---------------------------------------------------------------- update_many is update in a loop
_DETECTORS = [("adwin", {"direction": "both", "clock": 4}), ("adwin", {}), ("adwin", {"max_buckets": 1, "clock": 1}),
              ("page_hinkley", {"threshold": 8.0, "direction": "both"}), ("page_hinkley", {"threshold": 5.0}),
              ("ddm", {}), ("ddm", {"warm_start": 0, "drift_threshold": 1.5})]


@settings(max_examples=40, deadline=None)
@given(data=st.data(), which=st.sampled_from(range(len(_DETECTORS))))
def test_update_many_gives_what_update_gives(data, which):
    name, params = _DETECTORS[which]
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    parts = data.draw(st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 400)), min_size=1, max_size=5))
    values = _bernoulli(rng, parts)
    if name != "ddm" and data.draw(st.booleans()):  # regression: absolute errors of a changing scale
        values = np.abs(rng.normal(0.0, 1.0 + 3.0 * values))
    one, many = make_detector(name, params), make_detector(name, params)
    expected, stats = [], []
    for i, v in enumerate(values.tolist()):
        if one.update(v):
            expected.append(i)
            stats.append(one.statistic())
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(values)), max_size=6))) | {0, len(values)})
    got, got_stats = [], []
    for a, b in zip(cuts, cuts[1:], strict=False):
        got += [a + i for i in many.update_many(values[a:b])]
        got_stats += many.last_statistics
    assert got == expected and got_stats == stats
    assert many.n == one.n == len(values) and many.detections == one.detections == len(expected)
    assert many.state_dict() == one.state_dict()


# ---------------------------------------------------------------- checkpoints
def _roundtrip_json(state: dict) -> dict:
    return json.loads(json.dumps(state, allow_nan=False))


def _roundtrip_torch(state: dict) -> dict:
    import torch

    buf = io.BytesIO()
    torch.save({"drift": state}, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)["drift"]


@pytest.mark.parametrize(("name", "params"), [("adwin", {}), ("adwin", {"direction": "both"}),
                                              ("page_hinkley", {"threshold": 20.0}), ("ddm", {})])
@pytest.mark.parametrize("roundtrip", [_roundtrip_json, _roundtrip_torch], ids=["json", "torch"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_detector_restored_mid_stream_detects_what_the_uninterrupted_one_does(name, params, roundtrip, seed):
    rng = np.random.default_rng(seed)
    values = _bernoulli(rng, [(0.1, 1500), (0.5, 700), (0.2, 1300), (0.6, 900)])
    whole = make_detector(name, params)
    expected = _hits(whole, values)
    assert len(expected) >= 2, expected
    for stop in (expected[0], expected[0] + 1, int(rng.integers(1, len(values)))):
        first = make_detector(name, params)
        before = _hits(first, values[:stop])
        state = roundtrip(first.state_dict())
        resumed = make_detector(name, params)
        resumed.load_state_dict(state)
        after = [stop + i for i in _hits(resumed, values[stop:])]
        assert before + after == expected, (stop, before, after)
        assert resumed.state_dict() == whole.state_dict()


@pytest.mark.parametrize("name", BUILTINS)
def test_a_state_is_plain_python_whatever_the_values_were(name):
    """Values fed as numpy scalars or ints (as an engine may hand them) leave no numpy object in the state: a
    checkpoint read with weights_only=True takes it, and the restored detector goes on as the fed one."""
    rng = np.random.default_rng(5)
    values = _bernoulli(rng, [(0.1, 700), (0.6, 300)])
    fed = make_detector(name)
    for v in values:
        fed.update(np.float64(v) if v else 0)
    state = fed.state_dict()
    assert state == _roundtrip_json(state) == _roundtrip_torch(state)
    restored = make_detector(name)
    restored.load_state_dict(_roundtrip_torch(state))
    more = _bernoulli(rng, [(0.1, 500), (0.7, 300)])
    assert _hits(restored, more) == _hits(fed, more) != []


def test_a_state_is_refused_by_another_detector_or_other_params():
    state = make_detector("adwin").state_dict()
    with pytest.raises(DetectorError, match=r"^drift detector page_hinkley: the state is of 'adwin' version 1, not of "
                                            r"'page_hinkley' version 1$"):
        make_detector("page_hinkley").load_state_dict(state)
    with pytest.raises(DetectorError, match=r"^drift detector adwin: the state was saved with params .*'delta': 0.002"
                                            r".*, this detector has .*'delta': 0.01"):
        make_detector("adwin", {"delta": 0.01}).load_state_dict(state)
    with pytest.raises(DetectorError, match=r"the state lacks sums, sqdev"):
        make_detector("adwin").load_state_dict({k: v for k, v in state.items() if k not in ("sums", "sqdev")})


# ---------------------------------------------------------------- which changes count as drift, the warm-up
@pytest.mark.parametrize("seed", range(4))
def test_up_reports_a_rise_of_the_error_and_not_a_fall(seed):
    rng = np.random.default_rng(seed)
    fall = _bernoulli(rng, [(0.5, 3000), (0.1, 3000)])
    rise = _bernoulli(rng, [(0.1, 3000), (0.5, 3000)])
    def after(hits: list[int]) -> list[int]:  # what a stationary stream's false alarms before the change leave
        return [h for h in hits if h >= 3000]

    for name in BUILTINS:
        assert after(_hits(make_detector(name), fall)) == [], name
        hits = after(_hits(make_detector(name), rise))
        assert hits and hits[0] < 3400, (name, hits)
    for name in ("adwin", "page_hinkley"):
        for direction, stream in (("both", fall), ("down", fall), ("both", rise)):
            hits = after(_hits(make_detector(name, {"direction": direction}), stream))
            assert hits and hits[0] < 3400, (name, direction, hits)
        assert after(_hits(make_detector(name, {"direction": "down"}), rise)) == []


def _learning_curve(rng: np.random.Generator, n: int, start: float, end: float) -> np.ndarray:
    """0/1 errors of a model that learns: the error rate falls from `start` to `end` over `n` values."""
    p = end + (start - end) * np.exp(-np.arange(n) / (n / 6))
    return (rng.random(n) < p).astype(np.float64)


@pytest.mark.parametrize("seed", range(4))
def test_the_models_own_warm_up_is_no_drift_and_a_later_rise_is(seed):
    rng = np.random.default_rng(100 + seed)
    warm = _learning_curve(rng, 3000, 0.9, 0.1)
    later = _bernoulli(rng, [(0.1, 2000), (0.5, 1500)])
    stream = np.concatenate([warm, later])
    both = _hits(make_detector("adwin", {"direction": "both"}), stream)
    assert both and both[0] < 3000, both  # River's two-sided ADWIN calls the warm-up a drift
    for name in ("adwin", "ddm"):
        hits = _hits(make_detector(name), stream)
        assert hits and all(h >= 5000 for h in hits) and hits[0] < 5400, (name, hits)
    # page_hinkley's mean is every value's since it started, warm-up included: the rise is seen, later
    hits = _hits(make_detector("page_hinkley"), stream)
    assert hits and all(h >= 5000 for h in hits), hits


def test_the_grace_values_hold_detection_back():
    jump = np.concatenate([np.zeros(3), np.ones(300)])  # a rise at the 4th value
    later = np.concatenate([np.zeros(60), np.ones(300)])  # a rise at the 61st: ADWIN cuts once W1 is significant
    assert _hits(make_detector("adwin", {"clock": 1, "grace_period": 0}), later)[0] == 78
    assert _hits(make_detector("adwin", {"clock": 1, "grace_period": 120}), later)[0] == 120
    assert _hits(make_detector("page_hinkley", {"min_instances": 1, "threshold": 1.0}), jump)[0] == 4
    assert _hits(make_detector("page_hinkley", {"min_instances": 90, "threshold": 1.0}), jump)[0] == 89
    assert _hits(make_detector("ddm", {"warm_start": 2}), jump)[0] == 3
    assert _hits(make_detector("ddm", {"warm_start": 40}), jump) == []  # p_min is taken after the rise: no drift


@pytest.mark.parametrize("name", BUILTINS)
def test_n_counts_every_value_and_a_detection_starts_afresh(name):
    rng = np.random.default_rng(7)
    values = _bernoulli(rng, [(0.05, 2000), (0.6, 1000), (0.05, 1000), (0.7, 1000)])
    det = make_detector(name)
    hits = _hits(det, values)
    assert det.n == len(values) and det.detections == len(hits) >= 2
    fresh = {"adwin": 32, "page_hinkley": 30, "ddm": 31}[name]  # the values a fresh start needs before a report
    assert all(b - a >= fresh for a, b in zip(hits, hits[1:], strict=False)), hits


def test_what_a_detection_reports():
    rng = np.random.default_rng(3)
    values = _bernoulli(rng, [(0.1, 2000), (0.6, 500)])
    adwin, ph, ddm = make_detector("adwin"), make_detector("page_hinkley"), make_detector("ddm")
    assert set(adwin.statistic()) == {"width", "mean"}
    for det in (adwin, ph, ddm):
        at = [(i, det.statistic()) for i, v in enumerate(values.tolist()) if det.update(v)]
        hit, stat = next((i, s) for i, s in at if i >= 2000)  # (a false alarm before the change starts afresh)
        assert hit < 2300, at
        assert all(isinstance(v, float) for v in stat.values()), stat
        if det is adwin:
            assert set(stat) == {"width", "mean", "mean_old", "mean_new", "n_old", "n_new", "epsilon"}
            assert stat["n_old"] + stat["n_new"] == stat["width"] <= hit + 1
            assert stat["mean_new"] - stat["mean_old"] > stat["epsilon"] > 0 and stat["mean_old"] < 0.15
        elif det is ph:
            assert set(stat) == {"statistic", "threshold", "mean"}
            assert stat["statistic"] > stat["threshold"] == 50.0
        else:
            assert set(stat) == {"p", "s", "p_plus_s", "p_min_plus_s_min", "drift_level"}
            assert stat["p_plus_s"] > stat["drift_level"] > stat["p_min_plus_s_min"]
        json.dumps(stat, allow_nan=False)


# ---------------------------------------------------------------- a user's detector, from outside the package
USER_DETECTORS = """
from edgestream.drift import Detector
from edgestream.sync.hyperparams import Param


class Threshold:
    '''A detector written without edgestream: a drift when `run` errors in a row exceed `level`.'''

    def __init__(self, level=0.5, run=3):
        self.level, self.run, self.streak = level, run, 0

    def update(self, value):
        self.streak = self.streak + 1 if value > self.level else 0
        if self.streak >= self.run:
            self.streak = 0
            return True
        return False

    def statistic(self):
        return {"streak": float(self.streak)}

    def state_dict(self):
        return {"streak": self.streak}

    def load_state_dict(self, d):
        self.streak = int(d["streak"])


def threshold(level=0.5, run=3):
    return Threshold(level, run)


class Mean(Detector):
    '''A subclass of edgestream's Detector: a drift when the mean of the last `k` errors exceeds `level`.'''

    name = "mean"
    PARAMS = (Param("k", 4, "int", ge=1), Param("level", 0.5, "float", gt=0))
    STATE = ("recent",)

    def _reset(self):
        self.recent = []

    def update(self, value):
        self.n += 1
        self.recent = (self.recent + [float(value)])[-self.params["k"]:]
        if len(self.recent) == self.params["k"] and sum(self.recent) / len(self.recent) > self.params["level"]:
            self.detections += 1
            self._reset()
            return True
        return False


def half_a_detector(**params):
    return "a detector"


def exploding(**params):
    raise RuntimeError("no sensor attached")
"""


@pytest.fixture
def userpkg(tmp_path, monkeypatch):
    """A user package `userdrift` in a temporary folder on sys.path, and an installed distribution's entry point."""
    pkg = tmp_path / "userdrift"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "detectors.py").write_text(textwrap.dedent(USER_DETECTORS))
    info = tmp_path / "userdrift_dist-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: userdrift-dist\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[edgestream.detectors]\nstreak = userdrift.detectors:threshold\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in [m for m in sys.modules if m.split(".")[0] == "userdrift"]:
        monkeypatch.delitem(sys.modules, mod)
    return tmp_path


@pytest.mark.parametrize("name", ["userdrift.detectors:threshold", "userdrift.detectors:Threshold", "streak"])
def test_a_users_detector_by_import_path_or_entry_point(userpkg, name):
    det = make_detector(name, {"run": 2}, labels=False)
    values = [0.9, 0.1, 0.9, 0.9, 0.2, 0.8, 0.7, 0.6]
    assert det.update_many(values) == [3, 6] and det.n == 8 and det.detections == 2
    assert det.last_statistics == [{"streak": 0.0}, {"streak": 0.0}]
    assert det.name == name
    state = json.loads(json.dumps(det.state_dict()))
    again = make_detector(name, {"run": 2}, labels=False)
    again.load_state_dict(state)
    assert again.n == 8 and again.update_many([0.9]) == [0] and again.detections == 3
    assert plugins.DETECTORS.source("streak") == "entry point (userdrift-dist 0.1)"


def test_a_users_detector_subclass_is_checked_against_its_own_params(userpkg):
    det = make_detector("userdrift.detectors:Mean", {"k": 2})
    assert isinstance(det, Detector) and det.update_many([0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]) == [2, 6]
    with pytest.raises(DetectorError, match=r"^drift.params.k: 0 is not allowed; must be >= 1$"):
        make_detector("userdrift.detectors:Mean", {"k": 0})
    fresh = make_detector("userdrift.detectors:Mean", {"k": 2})
    fresh.load_state_dict(json.loads(json.dumps(det.state_dict())))
    assert fresh.recent == det.recent == [] and fresh.n == 7


@pytest.mark.parametrize(("name", "params", "line"), [
    ("userdrift.detectors:threshold", {"width": 3}, "drift.params.width: unknown field; allowed fields: level, run"),
    ("userdrift.detectors:half_a_detector", {}, "drift.detector: 'userdrift.detectors:half_a_detector' returned a "
     "str without update, state_dict, load_state_dict; a detector has update(value) -> bool, state_dict() and "
     "load_state_dict(d)"),
    ("userdrift.detectors:exploding", {"a": 1}, "drift.detector: 'userdrift.detectors:exploding' could not be built "
     "as factory(**{'a': 1}) (RuntimeError: no sensor attached)"),
    ("userdrift.detectors:nosuch", {}, "drift.detector: module 'userdrift.detectors' has no attribute 'nosuch'"),
    ("userdrift.nosuch:f", {}, "drift.detector: cannot import module 'userdrift.nosuch' (ModuleNotFoundError: No "
     "module named 'userdrift.nosuch'); searched installed packages, PYTHONPATH and the config file's folder"),
])
def test_a_users_detector_that_cannot_be_used_is_refused_in_one_line(userpkg, name, params, line):
    with pytest.raises(ValueError) as exc:
        make_detector(name, params)
    assert str(exc.value) == line
