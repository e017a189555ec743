"""The task object in every engine (issue 29, items 2 and 4): regression trains and stops at its target
metric in the simulator (both compute paths) and the lockstep engine; classification keeps its eval lines
and summary; a user's model by import path (rank-1 inputs, with and without BatchNorm buffers) runs in
both simulator paths and in lockstep; no engine writes its own cross-entropy any more.

Small runs: a few devices, explicit compute times (repeatable), the mlp or a user's small net.
"""

from __future__ import annotations

import copy
import logging
import math
import re
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from support.sources import USERMOD

import edgestream
from edgestream.config import validate_dict
from edgestream.data import Dataset
from edgestream.metrics import EventLog, read_events
from edgestream.runner.evaluate import evaluate
from edgestream.runner.lockstep import LockstepEngine
from edgestream.runner.plan import RunPlan
from edgestream.runner.rundir import write_run
from edgestream.runner.stop import StopRule
from edgestream.sim.batchable import batch_check
from edgestream.sim.engine import COMPUTE_ENV, SimEngine
from edgestream.tasks import CLASSIFICATION, REGRESSION

TARGET_RMSE = 0.45

BASE: dict[str, Any] = {
    "name": "tasks",
    "seed": 5,
    "task": "regression",
    "data": {"dataset": "synthetic", "shape": [6]},
    "devices": {"count": 3, "rates": {"distribution": "constant", "rate": 200},
                "compute": {"base_s": 0.01, "per_sample_s": 0.0002},
                "network": {"latency_ms": 1, "bandwidth_mbps": 100}},
    "model": {"name": "mlp"},
    "optim": {"lr": 0.05, "momentum": 0.5, "weight_decay": 0.0},
    "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 32}},
    "stop": {"max_steps": 400, "max_time_s": None, "target_metric": {"name": "rmse", "value": TARGET_RMSE}},
    "eval": {"every_s": 0.5},
}


@pytest.fixture(scope="module")
def usermod(tmp_path_factory) -> Path:
    """The folder holding usermod.py (a user's module outside the package)."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "usermod.py").write_text(textwrap.dedent(USERMOD))
    return folder


@pytest.fixture
def on_path(usermod, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(usermod))
    return usermod


def merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k not in ("rates", "batch", "target_metric"):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def regression_data(shape: tuple[int, ...] = (6,), k: int | None = None, n_train: int = 600, n_test: int = 200,
                    seed: int = 0, dtype: Any = np.float32) -> Dataset:
    """Float inputs of `shape` and targets y = tanh(x w) + noise: a scalar [N] (k None) or a vector [N, k]."""
    rng = np.random.default_rng(seed)
    n, f = n_train + n_test, math.prod(shape)
    x = rng.normal(size=(n, *shape)).astype(dtype)
    w = rng.normal(size=(f, k or 1)) / math.sqrt(f)
    y = (np.tanh(x.reshape(n, f).astype(np.float64) @ w) * 1.5 + 0.05 * rng.normal(size=(n, k or 1)))
    y = (y[:, 0] if k is None else y).astype(np.float32)
    xt = x[:n_train].astype(np.float64)
    axes = (0, *range(2, xt.ndim))
    mean = tuple(float(v) for v in xt.mean(axis=axes))
    std = tuple(float(v) for v in xt.std(axis=axes))
    return Dataset("reg", x[:n_train], y[:n_train], x[n_train:], y[n_train:], 0, tuple(shape), mean, std,
                   () if k is None else (k,))


def plan_of(dataset: Dataset | None = None, **over: Any) -> RunPlan:
    """The plan of BASE + `over`, its dataset replaced by `dataset` (a Dataset built here)."""
    plan = RunPlan.resolve(validate_dict(merge(BASE, over)))
    if dataset is not None:
        plan._cache["dataset"] = dataset
    return plan


def sim_run(plan: RunPlan, tmp_path: Path, compute: str, monkeypatch) -> tuple[Path, dict, list[dict]]:
    monkeypatch.setenv(COMPUTE_ENV, compute)
    path, summary = write_run(plan, "sim", lambda events: SimEngine(plan, events), out=tmp_path)
    return path, summary, read_events(path / "events.jsonl")


def evals_of(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kind"] == "eval"]


# ---------------------------------------------------------------- regression in the simulator

@pytest.mark.parametrize("k", [None, 3], ids=["scalar", "vector"])
@pytest.mark.parametrize("compute", ["batched", "per-device"])
def test_regression_in_the_simulator_reaches_its_rmse_target(k, compute, tmp_path, monkeypatch):
    plan = plan_of(regression_data(k=k))
    assert plan.task is REGRESSION and plan.num_outputs == (k or 1) and plan.target == ("rmse", TARGET_RMSE)
    path, summary, records = sim_run(plan, tmp_path, compute, monkeypatch)
    evals = evals_of(records)
    assert summary["compute_path"] == compute, summary["compute_reason"]
    assert summary["stop_reason"] == "target_metric" and summary["task"] == "regression"
    assert all(e["accuracy"] is None and {"rmse", "mae", "loss"} <= set(e) for e in evals)
    assert evals[-1]["rmse"] <= TARGET_RMSE < evals[0]["rmse"]
    assert summary["final_metrics"] == pytest.approx({m: evals[-1][m] for m in ("rmse", "mae", "loss")}, abs=1e-6)
    assert summary["final_accuracy"] is None and summary["best_accuracy"] is None
    first = next(e["time"] for e in evals if e["rmse"] <= TARGET_RMSE)
    assert summary["time_to_target_s"] == pytest.approx(first)
    assert summary["steps"] < 400  # stopped by the target, not by max_steps
    assert (path / "rmse.png").is_file()


@pytest.mark.parametrize("target_dim", [None, 2], ids=["scalar", "vector"])
def test_regression_from_the_config_alone(target_dim, tmp_path, monkeypatch):
    """data.dataset synthetic + task regression (+ kwargs target_dim): float targets, rmse falls."""
    data = {"dataset": "synthetic", "shape": [8], "n_train": 1200, "n_test": 300,
            **({"kwargs": {"target_dim": target_dim}} if target_dim else {})}
    plan = plan_of(None, data=data, stop={"max_steps": 150, "target_metric": None})
    ds = plan.dataset
    assert ds.y_train.dtype == np.float32 and ds.target_shape == ((target_dim,) if target_dim else ())
    assert plan.num_outputs == (target_dim or 1)
    _, summary, records = sim_run(plan, tmp_path, "auto", monkeypatch)
    evals = evals_of(records)
    assert summary["compute_path"] == "batched" and summary["task"] == "regression"
    assert evals[-1]["rmse"] < 0.8 * evals[0]["rmse"]


def test_regression_paths_agree_and_the_eval_is_the_task_s(tmp_path, monkeypatch):
    """Batched and per-device compute give the same run (float rounding apart); the eval metrics are the
    task's formulas on the final model."""
    runs = {}
    for compute in ("batched", "per-device"):
        plan = plan_of(regression_data(k=2), stop={"max_steps": 15, "target_metric": None})
        monkeypatch.setenv(COMPUTE_ENV, compute)
        engine = SimEngine(plan, EventLog(None, keep=True))
        engine.run()
        assert engine.compute_mode == compute
        runs[compute] = engine
    a, b = runs["batched"].evaluation.last_metrics, runs["per-device"].evaluation.last_metrics
    assert a == pytest.approx(b, rel=1e-3)
    eng = runs["per-device"]
    model = eng.replicas.global_model(True)
    with torch.no_grad():
        out = model(eng.data.x_test)
    diff = out - eng.data.y_test
    assert a["rmse"] == pytest.approx(float(diff.pow(2).mean().sqrt()), rel=1e-3)
    assert b["mae"] == pytest.approx(float(diff.abs().mean()), rel=1e-4)


def test_regression_with_rank_2_float16_inputs_and_mae_target(tmp_path, monkeypatch):
    plan = plan_of(regression_data(shape=(2, 5), dtype=np.float16), data={"shape": [2, 5]},
                   stop={"target_metric": {"name": "mae", "value": 0.4}})
    _, summary, records = sim_run(plan, tmp_path, "auto", monkeypatch)
    assert summary["stop_reason"] == "target_metric" and summary["final_metrics"]["mae"] <= 0.4
    assert summary["compute_path"] == "batched"


# ---------------------------------------------------------------- classification is unchanged

def test_classification_eval_lines_summary_and_stop_reason(tmp_path, monkeypatch):
    plan = plan_of(None, task="classification", data={"dataset": "digits", "shape": None},
                   stop={"target_metric": None, "target_accuracy": 0.5, "max_steps": 300},
                   optim={"lr": 0.1})
    assert plan.task is CLASSIFICATION and plan.target == ("accuracy", 0.5)
    path, summary, records = sim_run(plan, tmp_path, "auto", monkeypatch)
    evals = evals_of(records)
    assert all(set(e) == {"kind", "time", "step", "accuracy", "loss"} for e in evals)
    assert summary["stop_reason"] == "target_accuracy" and summary["task"] == "classification"
    assert summary["final_accuracy"] == pytest.approx(evals[-1]["accuracy"], abs=1e-6) and evals[-1]["accuracy"] >= 0.5
    assert summary["final_metrics"] == {"accuracy": evals[-1]["accuracy"], "loss": evals[-1]["loss"]}
    assert (path / "accuracy.png").is_file()


def test_stop_rule_directions_and_reasons():
    rule = StopRule(target=("rmse", 0.5))
    rule.observe({"rmse": 0.6, "mae": 0.1})
    assert rule.reason is None
    rule.observe({"rmse": 0.5})
    assert rule.reason == "target_metric"
    acc = StopRule(target_accuracy=0.8)
    assert acc.target == ("accuracy", 0.8)
    acc.accuracy(0.79)
    assert acc.reason is None
    acc.observe({"accuracy": 0.8, "loss": 3.0})
    assert acc.reason == "target_accuracy"
    loss = StopRule(target=("loss", 1.0))
    loss.observe({"accuracy": 0.99, "loss": 1.5})
    assert loss.reason is None


def test_evaluate_returns_the_task_s_metrics():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    x = torch.randn(50, 4)
    labels = torch.randint(0, 3, (50,))
    got = evaluate(model, x, labels, chunk=7)
    assert set(got) == {"accuracy", "loss"}
    with torch.no_grad():
        ce = float(torch.nn.functional.cross_entropy(model(x), labels))
    assert got["loss"] == pytest.approx(ce, rel=1e-5)
    targets = torch.randn(50, 3)
    got = evaluate(model, x, targets, chunk=7)  # float targets: regression
    with torch.no_grad():
        d = model(x) - targets
    assert got == pytest.approx({"rmse": float(d.pow(2).mean().sqrt()), "mae": float(d.abs().mean()),
                                 "loss": float(d.pow(2).mean())}, rel=1e-5)


# ---------------------------------------------------------------- a user's model by import path

@pytest.mark.parametrize("compute", ["auto", "batched", "per-device"])
def test_user_model_without_buffers_in_the_simulator(compute, on_path, tmp_path, monkeypatch):
    plan = plan_of(regression_data(), model={"name": "usermod:build", "kwargs": {"hidden": 24}})
    model = plan.build_model()
    assert type(model).__name__ == "Net" and model.fc1.out_features == 24 and model.fc1.in_features == 6
    _, summary, _ = sim_run(plan, tmp_path, compute, monkeypatch)
    assert summary["compute_path"] == ("per-device" if compute == "per-device" else "batched")
    if compute != "per-device":  # the probe admitted the user's class
        assert "batched" in summary["compute_reason"]
    assert summary["stop_reason"] == "target_metric"


def test_user_model_with_batchnorm_falls_back_once_with_the_reason(on_path, tmp_path, monkeypatch, caplog):
    over = {"model": {"name": "usermod:build", "kwargs": {"norm": True}}}
    caplog.set_level(logging.WARNING, logger="edgestream.sim.engine")
    for compute in ("batched", "auto"):
        _, summary, records = sim_run(plan_of(regression_data(), **over), tmp_path, compute, monkeypatch)
        assert summary["compute_path"] == "per-device"
        assert "buffers" in summary["compute_reason"] and summary["replicas"] == "per-worker"
        assert summary["stop_reason"] == "target_metric"
    lines = [r.getMessage() for r in caplog.records if "usermod:build" in r.getMessage()]
    assert len(lines) == 1 and "per-device" in lines[0] and "buffers" in lines[0]


def test_batch_check_probe(on_path):
    import usermod

    x, y = torch.randn(8, 6), torch.randn(8)
    assert batch_check(usermod.build((6,), 1), x, y, REGRESSION) is None
    labels = torch.randint(0, 3, (8,))
    assert batch_check(usermod.build((6,), 3), x, labels, CLASSIFICATION) is None
    why = batch_check(usermod.mixer((6,), 1), x, y, REGRESSION)
    assert why is not None and "other samples of its batch" in why
    assert "buffers" in batch_check(usermod.build((6,), 1, norm=True), x, y, REGRESSION)


@pytest.mark.parametrize("norm", [False, True], ids=["plain", "batchnorm"])
def test_user_model_in_lockstep(norm, on_path):
    plan = plan_of(regression_data(k=2), model={"name": "usermod:build", "kwargs": {"norm": norm}})
    engine = LockstepEngine.from_plan(plan)
    assert engine.task is REGRESSION
    before = evaluate(engine.models[0], *_test_split(plan))
    stop = StopRule(max_steps=60)
    ctxs = [plan.worker_context(r, should_stop=lambda done, r=r: stop.should_stop(done, engine.now(r)))
            for r in range(plan.world)]
    engine.run([plan.algorithm.worker(c) for c in ctxs])
    after = evaluate(engine.models[0], *_test_split(plan))
    assert set(after) == {"rmse", "mae", "loss"} and after["rmse"] < 0.8 * before["rmse"]
    assert all(c.step == 60 for c in ctxs)
    if norm:  # the running statistics moved with training
        assert not torch.equal(engine.models[0].norm.running_mean, torch.zeros_like(engine.models[0].norm.running_mean))


def _test_split(plan: RunPlan) -> tuple[torch.Tensor, torch.Tensor]:
    ds = plan.dataset
    return ds.normalize(torch.from_numpy(ds.x_test)), torch.from_numpy(ds.y_test)


def test_classification_user_model_in_lockstep(on_path):
    plan = plan_of(None, task="classification", data={"dataset": "digits", "shape": None},
                   stop={"target_metric": None, "max_steps": 40}, model={"name": "usermod:build"})
    engine = LockstepEngine.from_plan(plan)
    stop = StopRule(max_steps=40)
    ctxs = [plan.worker_context(r, should_stop=lambda done, r=r: stop.should_stop(done, engine.now(r)))
            for r in range(plan.world)]
    engine.run([plan.algorithm.worker(c) for c in ctxs])
    got = evaluate(engine.models[0], *_test_split(plan))
    assert got["accuracy"] > 0.5


# ---------------------------------------------------------------- one loss, in tasks.py

def test_every_cross_entropy_site_is_the_task_s():
    root = Path(edgestream.__file__).parent
    sites = [p.relative_to(root).as_posix() for p in root.rglob("*.py") if re.search(r"cross_entropy", p.read_text())]
    assert sites == ["tasks.py"]


# ---------------------------------------------------------------- the task's metrics where runs are shown

def test_tensorboard_view_and_timing_take_the_task_s_metrics():
    from edgestream.launch.view import LiveState
    from edgestream.metrics.tensorboard import scalars
    from edgestream.profiles.measure import time_steps

    records = [{"kind": "eval", "time": 1.0, "step": 4, "accuracy": None, "loss": 0.25, "rmse": 0.5, "mae": 0.4}]
    assert sorted(t for t, *_ in scalars(records)) == ["eval/loss", "eval/mae", "eval/rmse"]
    state = LiveState("r", 1)
    state.add([(0, records[0])])
    assert "rmse 0.500" in state.line() and "rmse 0.500" in state.headline()
    state.add([(0, {"kind": "eval", "time": 2.0, "step": 8, "accuracy": 0.75, "loss": 0.5})])
    assert "accuracy 0.750" in state.line()
    torch.manual_seed(0)
    for outputs, classes in ((1, 0), (3, 0), (4, 4)):  # scalar and vector regression (0 classes), classification
        secs = time_steps(torch.nn.Linear(6, outputs), (6,), classes, [2, 5], repeats=1, warmup=0)
        assert len(secs) == 2 and all(s > 0 for s in secs)


def test_events_summary_time_to_target_in_the_metric_s_direction():
    log = EventLog(None)
    for t, rmse in ((0.0, 1.0), (1.0, 0.6), (2.0, 0.4), (3.0, 0.45)):
        log.evaluation(t, int(t), rmse=rmse, mae=rmse / 2, loss=rmse ** 2)
    s = log.summary(target=("rmse", 0.5), wall_s=1.0, engine="sim", task="regression")
    assert s["time_to_target_s"] == 2.0 and s["final_metrics"] == {"rmse": 0.45, "mae": 0.225, "loss": 0.2025}
    assert s["final_accuracy"] is None and s["task"] == "regression"
    assert log.summary(target=("mae", 0.1), wall_s=1.0, engine="sim")["time_to_target_s"] is None
    acc = EventLog(None)
    acc.evaluation(0.0, 0, 0.3, 2.0)
    acc.evaluation(1.0, 1, 0.8, 1.0)
    s = acc.summary(target_accuracy=0.7, wall_s=1.0, engine="sim")
    assert s["time_to_target_s"] == 1.0 and s["final_accuracy"] == 0.8 and s["final_metrics"] == {"accuracy": 0.8,
                                                                                                   "loss": 1.0}


def test_a_user_class_of_linear_layers_takes_the_one_pass_path(on_path, monkeypatch):
    """A user's nn.Module class made of Linear layers gets DenseStack's one autograd pass (forward hooks),
    checked against torch.func once; a model that uses a Linear's weight outside the layer (tied) or calls
    a Linear twice falls back to vmap, and every path gives the per-device gradients."""
    import usermod

    from edgestream.sim.batched import BatchedCompute, LinearHooks
    from edgestream.sim.replicas import Replicas

    class Tied(torch.nn.Module):  # the output layer's weight is also a penalty in the forward
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(6, 8), torch.nn.Linear(8, 1)

        def forward(self, x):
            return self.b(torch.relu(self.a(x))) + 0.1 * self.b.weight.sum()

    class Twice(torch.nn.Module):  # one Linear called twice
        def __init__(self):
            super().__init__()
            self.a, self.out = torch.nn.Linear(6, 6), torch.nn.Linear(6, 1)

        def forward(self, x):
            return self.out(torch.tanh(self.a(torch.tanh(self.a(x)))))

    torch.manual_seed(1)
    x, y = torch.randn(3, 8, 6), torch.randn(3, 8)
    for model, kept in ((usermod.build((6,), 1), True), (Tied(), False), (Twice(), False)):
        assert LinearHooks.of(model) is not None
        rep = Replicas(model, (6,), 1, 3, lr=0.1, momentum=0.0, weight_decay=0.0, seed=0, shared=True, task=REGRESSION)
        ref = Replicas(model, (6,), 1, 3, lr=0.1, momentum=0.0, weight_decay=0.0, seed=0, shared=False,
                       task=REGRESSION)
        batcher = BatchedCompute(rep)
        for r in range(3):
            batcher.post(r, SimpleNamespace(n=8, x=x[r], y=y[r]))
        got = [batcher.result(r) for r in range(3)]
        assert (batcher.hooks is not None) == kept
        for r in range(3):
            want = ref.compute(r, x[r], y[r])
            assert got[r].loss == pytest.approx(want.loss, rel=1e-5)
            for g, h in zip(got[r].grads, want.grads, strict=True):
                assert torch.allclose(g, h, rtol=1e-4, atol=1e-6)
    assert LinearHooks.of(torch.nn.Sequential(torch.nn.Linear(6, 2))) is None  # DenseStack's
    assert LinearHooks.of(torch.nn.Sequential(torch.nn.Conv1d(1, 2, 3), torch.nn.Flatten())) is None
