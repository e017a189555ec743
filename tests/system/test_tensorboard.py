"""Every run directory has TensorBoard event files, read back here with TensorBoard's own reader: a
simulated run (collective and parameter-server algorithms, few and many devices) and a real one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from factories import digits_config  # tests/factories.py
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from edgestream.config import validate_dict
from edgestream.metrics.tensorboard import MAX_DEVICE_SERIES
from edgestream.runner import run_config

F32 = 1e-6  # float32's relative precision (about 6e-8), with room for one rounding step


def _cfg(name: str, algorithm: str, devices: int, params: dict | None = None, steps: int = 12) -> object:
    return validate_dict(digits_config(
        name, seed=2, devices=devices, rate={"distribution": "uniform", "low": 200, "high": 600}, lr=0.1,
        momentum=0.0, algorithm=algorithm, params=params or {}, max_steps=steps, eval_s=0.2))


def _read(run_dir: Path) -> EventAccumulator:
    folder = run_dir / "tensorboard"
    assert folder.is_dir() and any(p.name.startswith("events.out.tfevents") for p in folder.iterdir())
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines() if x.strip()]


def _check(run_dir: Path, devices: int) -> None:
    acc = _read(run_dir)
    tags = set(acc.Tags()["scalars"])
    events = _events(run_dir)
    evals = [e for e in events if e["kind"] == "eval"]
    got = acc.Scalars("eval/accuracy")
    # TensorBoard stores float32: compare values at float32's precision, never by rounding (a value on a
    # rounding boundary rounds differently as float32 and float64)
    assert [s.step for s in got] == [e["step"] for e in evals]
    assert [s.value for s in got] == pytest.approx([e["accuracy"] for e in evals], rel=F32, abs=F32)
    assert [s.wall_time for s in got] == pytest.approx([e["time"] for e in evals])
    steps = [e for e in events if e["kind"] == "step"]
    if devices <= MAX_DEVICE_SERIES:
        for d in range(devices):
            mine = [e for e in steps if e["device"] == d]
            loss = acc.Scalars(f"loss/device_{d}")
            assert [s.step for s in loss] == [e["step"] for e in mine]
            assert [s.value for s in loss] == pytest.approx([e["loss"] for e in mine], rel=F32, abs=F32)
            assert {f"batch/device_{d}", f"rate/device_{d}", f"buffer/device_{d}", f"lag_seconds/device_{d}",
                    f"share_wait/device_{d}"} <= tags
            lag = acc.Scalars(f"lag_seconds/device_{d}")
            want = [e["lag_s"] for e in mine if e.get("lag_s") is not None]
            assert [s.value for s in lag] == pytest.approx(want, rel=F32, abs=F32)
            shares = [acc.Scalars(f"share_{k}/device_{d}")[-1].value for k in ("wait", "compute", "comm")
                      if f"share_{k}/device_{d}" in tags]
            assert sum(shares) == pytest.approx(1.0, abs=1e-5)
    else:
        assert not any("/device_" in t for t in tags)
        for group in ("loss", "batch", "rate"):
            lo, mean, hi = (acc.Scalars(f"{group}/{k}") for k in ("min", "mean", "max"))
            assert all(a.value <= b.value + 1e-6 <= c.value + 2e-6 for a, b, c in zip(lo, mean, hi, strict=True))
        first = [e["loss"] for e in steps if e["step"] == 0]
        assert acc.Scalars("loss/mean")[0].value == pytest.approx(sum(first) / len(first), rel=1e-5)
    floats = sum(e.get("floats_sent", 0) for e in steps)
    if floats:
        assert acc.Scalars("run/floats_sent")[-1].value == pytest.approx(floats, rel=1e-6)


@pytest.mark.parametrize("algorithm,devices,params", [
    ("ddl", 2, None), ("scadles", 5, None), ("ssp", 3, {"s": 2}), ("ddl", MAX_DEVICE_SERIES + 8, None),
])
def test_a_simulated_run_writes_tensorboard_scalars(tmp_path, algorithm, devices, params):
    run_dir, _ = run_config(_cfg(f"tb-{algorithm}", algorithm, devices, params), "sim", out=tmp_path, progress=False)
    _check(run_dir, devices)
    acc = _read(run_dir)
    if algorithm == "ssp":
        staleness = [e["staleness"] for e in _events(run_dir) if e["kind"] == "step" and e["device"] == 0]
        assert [s.value for s in acc.Scalars("staleness/device_0")] == staleness
    if devices <= MAX_DEVICE_SERIES:  # the stream rate S_i(t) of the run's rate model
        from edgestream.runner.plan import RunPlan

        rates = RunPlan.resolve(_cfg(f"tb-{algorithm}", algorithm, devices, params)).rate_model
        for s in acc.Scalars("rate/device_1"):
            assert s.value == pytest.approx(rates.rate(1, s.wall_time), rel=1e-6)
        assert 200 <= s.value <= 600


def test_a_real_run_writes_tensorboard_scalars(bootstrap, tmp_path):
    run_dir, summary = run_config(_cfg("tb-real", "ddl", 2, steps=8), "local", out=tmp_path, bootstrap=bootstrap,
                                  progress=False)
    assert summary["stop_reason"] == "max_steps"
    _check(run_dir, 2)


def test_the_optional_mlflow_logger_never_fails_a_run(tmp_path, monkeypatch):
    """mlflow is not a dependency: with MLFLOW_TRACKING_URI set and mlflow absent (or failing), a run still
    writes its whole run directory, and the logger says it did nothing."""
    import importlib.util

    from edgestream.metrics.tensorboard import log_mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file://{tmp_path / 'mlruns'}")
    run_dir, summary = run_config(_cfg("tb-mlflow", "ddl", 2, steps=4), "sim", out=tmp_path, progress=False)
    assert (run_dir / "summary.json").is_file() and (run_dir / "tensorboard").is_dir()
    if importlib.util.find_spec("mlflow") is None:
        assert log_mlflow(run_dir, _events(run_dir), summary) is False
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert log_mlflow(run_dir, _events(run_dir), summary) is False  # not asked for: nothing done
