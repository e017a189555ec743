"""Prequential (test-then-train) evaluation: the counters against a plain recomputation, their checkpoint, the same
figures from every in-process compute path (per-device, batched, lockstep) on the same sample order, summary.json's
`prequential`, and bad settings refused in one line naming the field."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.config import validate_dict
from edgestream.config.errors import ConfigError
from edgestream.metrics.events import EventLog
from edgestream.metrics.prequential import PrequentialCounter, pooled
from edgestream.runner import run_config
from edgestream.runner.lockstep_run import run_lockstep
from edgestream.sim.engine import SimEngine
from edgestream.tasks import CLASSIFICATION, REGRESSION


def _naive(task: Any, rows: np.ndarray, window: int, alpha: float | None) -> dict[str, Any]:
    keys = task.sum_keys
    n = len(rows)
    cum = task.finish(dict(zip(keys, rows.sum(axis=0), strict=True)), n)
    last = rows[max(0, n - window):]
    win = task.finish(dict(zip(keys, last.sum(axis=0), strict=True)), len(last))
    fade = None
    if alpha is not None:
        w = alpha ** np.arange(n - 1, -1, -1, dtype=np.float64)
        fade = task.finish(dict(zip(keys, (w @ rows) / w.sum(), strict=True)), 1)
    return {"cumulative": cum, "window": win, "fading": fade}


def _rows(task: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    if task.labels:
        return np.stack([rng.integers(0, 2, n).astype(float), rng.exponential(1.0, n)], axis=1)
    k = 3.0
    se = rng.exponential(1.0, n) * k
    return np.stack([se, np.sqrt(se) * k / 2, np.full(n, k), se / k], axis=1)


def _close(a: dict | None, b: dict | None) -> None:
    assert (a is None) == (b is None)
    if a is not None:
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-12), k


@settings(max_examples=60, deadline=None)
@given(task=st.sampled_from([CLASSIFICATION, REGRESSION]), window=st.integers(1, 40),
       alpha=st.one_of(st.none(), st.floats(0.5, 0.999)), sizes=st.lists(st.integers(0, 50), min_size=1, max_size=12),
       seed=st.integers(0, 2**16))
def test_the_counters_equal_a_plain_recomputation_whatever_the_batches(task, window, alpha, sizes, seed) -> None:
    rng = np.random.default_rng(seed)
    counter = PrequentialCounter(task, window, alpha)
    seen = []
    for b in sizes:
        rows = _rows(task, b, rng)
        counter.update(rows)
        seen.append(rows)
        allrows = np.concatenate(seen)
        if len(allrows) == 0:
            continue
        got, want = counter.figures(), _naive(task, allrows, window, alpha)
        assert got["samples"] == len(allrows) and got["window_samples"] == min(window, len(allrows))
        for key in ("cumulative", "window", "fading"):
            _close(got[key], want[key])


def test_a_restored_counter_continues_exactly_through_a_weights_only_checkpoint() -> None:
    rng = np.random.default_rng(3)
    batches = [_rows(REGRESSION, int(b), rng) for b in rng.integers(1, 30, 20)]
    whole = PrequentialCounter(REGRESSION, 25, 0.97)
    part = PrequentialCounter(REGRESSION, 25, 0.97)
    for rows in batches[:9]:
        whole.update(rows)
        part.update(rows)
    buf = io.BytesIO()
    torch.save({"watch": part.state_dict()}, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)["watch"]
    resumed = PrequentialCounter(REGRESSION, 25, 0.97)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    for rows in batches[9:]:
        whole.update(rows)
        resumed.update(rows)
    assert resumed.figures() == whole.figures()
    with pytest.raises(ValueError, match="eval.prequential.window"):
        PrequentialCounter(REGRESSION, 30).load_state_dict(state)


def test_pooled_figures_are_those_of_all_devices_samples_together() -> None:
    rng = np.random.default_rng(5)
    parts, rows_all, last_all = {}, [], []
    for d in range(3):
        c = PrequentialCounter(CLASSIFICATION, 10)
        rows = _rows(CLASSIFICATION, 15 + d, rng)
        c.update(rows)
        parts[d] = c.sums()
        rows_all.append(rows)
        last_all.append(rows[-10:])
    out = pooled(CLASSIFICATION, parts, fading=False)
    every, last = np.concatenate(rows_all), np.concatenate(last_all)
    assert out["samples"] == len(every)
    assert out["cumulative"]["accuracy"] == pytest.approx(every[:, 0].mean())
    assert out["window"]["accuracy"] == pytest.approx(last[:, 0].mean())
    assert set(out["devices"]) == {"0", "1", "2"}


def _raw(task: str, devices: int, **extra: Any) -> dict[str, Any]:
    data = {"dataset": "synthetic", "num_classes": 5, "shape": [12], "n_train": 900, "n_test": 200}
    if task == "regression":
        data = {"dataset": "synthetic", "shape": [12], "n_train": 900, "n_test": 200, "kwargs": {"target_dim": 2}}
    raw = {"name": "pq", "seed": 7, "task": task, "data": data,
           "devices": {"count": devices, "rates": {"distribution": "constant", "rate": 200},
                       "compute": {"base_s": 0.01, "per_sample_s": 0.0001}},
           "model": {"name": "mlp"}, "optim": {"lr": 0.05, "momentum": 0.0, "weight_decay": 0.0},
           "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 16}, "buffer": "persist"},
           "stop": {"max_steps": 30, "target_accuracy": None}, "eval": {"every_s": 100.0,
                                                                       "prequential": {"window": 50, "fading": 0.99}}}
    raw.update(extra)
    return raw


def _sim_lines(cfg: Any, batch_compute: bool) -> tuple[SimEngine, list[dict]]:
    log = EventLog(None, keep=True)
    engine = SimEngine(cfg, log, batch_compute=batch_compute)
    engine.run()
    log.close()
    return engine, log.records


PREQ_KEYS = ("device", "step", "preq_n", "preq_err")


@pytest.mark.parametrize("task,devices", [("classification", 2), ("classification", 3), ("regression", 2)])
def test_every_in_process_compute_path_scores_the_same_samples_the_same(task: str, devices: int) -> None:
    try:
        cfg = validate_dict(_raw(task, devices))
    except ConfigError as exc:  # pragma: no cover - the test's own config
        pytest.fail(str(exc))
    per, lines_a = _sim_lines(cfg, False)
    bat, lines_b = _sim_lines(cfg, True)
    assert per.compute_mode == "per-device" and bat.compute_mode == "batched"
    steps_a = [r for r in lines_a if r["kind"] == "step"]
    steps_b = [r for r in lines_b if r["kind"] == "step"]
    assert len(steps_a) == len(steps_b) == 30 * devices
    metric = "preq_accuracy" if task == "classification" else "preq_rmse"
    for a, b in zip(steps_a, steps_b, strict=True):
        assert [a.get(k) for k in ("device", "step", "preq_n")] == [b.get(k) for k in ("device", "step", "preq_n")]
        assert a[metric] == pytest.approx(b[metric], rel=1e-4, abs=1e-5)
        assert a["preq_err"] == pytest.approx(b["preq_err"], rel=1e-4, abs=1e-5)
    # samples scored = samples trained, on every device; the first step is scored by the initial model
    assert {a["device"]: a["preq_n"] for a in steps_a[-devices:]} == {d: 30 * 16 for d in range(devices)}
    final = {r["device"]: r for r in lines_a if r["kind"] == "prequential"}
    assert set(final) == set(range(devices)) and all(f["sums"]["n"] == 480 for f in final.values())


def test_the_lockstep_engine_scores_every_trained_sample_once(tmp_path) -> None:
    """The lockstep engine draws its own sample order (edgestream.runner.array_stream), so its figures are its
    own; it scores every sample it trains on, once, before the step (tests/system/test_prequential_real.py
    compares the local engine with the simulator on the same order)."""
    cfg = validate_dict(_raw("classification", 2))
    lock_dir, lock = run_lockstep(cfg, out=tmp_path)
    records = [json.loads(x) for x in (lock_dir / "events.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "step"]
    for d in range(2):
        mine = [r for r in steps if r["device"] == d]
        assert [r["preq_n"] for r in mine] == [16 * (i + 1) for i in range(30)]
        assert all(0.0 <= r["preq_accuracy"] <= 1.0 and 0.0 <= r["preq_err"] <= 1.0 for r in mine)
    assert lock["prequential"]["samples"] == 2 * 30 * 16


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_summary_json_carries_the_pooled_and_per_device_figures(task: str, tmp_path) -> None:
    cfg = validate_dict(_raw(task, 3))
    _, summary = run_config(cfg, "sim", out=tmp_path, progress=False)
    pq = summary["prequential"]
    assert pq["samples"] == 3 * 30 * 16 and pq["window_samples"] == 3 * 50
    assert set(pq["devices"]) == {"0", "1", "2"}
    names = {"accuracy", "loss"} if task == "classification" else {"rmse", "mae", "loss"}
    for part in ("cumulative", "window", "fading"):
        assert set(pq[part]) == names and all(math.isfinite(v) for v in pq[part].values())
    if task == "classification":  # it learns: the recent window beats the whole run's average
        assert pq["window"]["accuracy"] > pq["cumulative"]["accuracy"]
    else:
        assert pq["window"]["rmse"] < pq["cumulative"]["rmse"]
    assert "drift" not in summary  # no detector configured


@pytest.mark.parametrize("prequential,field", [({"window": 0}, "eval.prequential.window"),
                                               ({"fading": 1.0}, "eval.prequential.fading"),
                                               ({"fading": 0}, "eval.prequential.fading"),
                                               ({"windw": 10}, "eval.prequential.windw")])
def test_bad_prequential_settings_are_refused_naming_the_field(prequential: dict, field: str) -> None:
    raw = _raw("classification", 2)
    raw["eval"]["prequential"] = prequential
    with pytest.raises(ConfigError) as err:
        validate_dict(raw)
    assert len(err.value.problems) == 1 and err.value.problems[0].startswith(field), err.value.problems
