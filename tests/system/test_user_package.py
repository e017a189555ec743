"""Issue 29's acceptance, from outside the package: a user's own model, dataset factory and algorithm run in
the simulator, on real trainers over torch.distributed and on the Kafka parameter server, with nothing in
edgestream edited.

1. A package written by the test into a temporary folder (not examples/), next to the config file that
   names it by import path (the config's folder is on the import path of every process of the run).
2. examples/plugin installed with pip into a temporary folder (its entry points found by name), run as
   its README says: sim, local, and its own PS algorithm on the Kafka parameter server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from edgestream.config import load_config
from edgestream.runner import run_config

ROOT = Path(__file__).resolve().parents[2]

USER_MODEL = """
import math
from torch import nn

def features_net(input_shape, num_outputs, hidden=32, batchnorm=False):
    width = math.prod(input_shape)
    norm = nn.BatchNorm1d(hidden) if batchnorm else nn.Identity()
    return nn.Sequential(nn.Flatten(), nn.Linear(width, hidden), norm, nn.ReLU(), nn.Linear(hidden, num_outputs))
"""

USER_DATA = """
import numpy as np

def blobs(n=1200, features=12, classes=3, seed=0, regression=False):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 2.0, (classes, features))
    y = rng.integers(0, classes, n)
    x = (centers[y] + rng.normal(0, 1.0, (n, features))).astype(np.float32)
    if regression:
        w = rng.normal(0, 1.0, features)
        return x, (x @ w / np.sqrt(features)).astype(np.float32)
    return x, y.astype(np.int64)
"""

USER_ALGORITHM = """
from edgestream.sync import AlgorithmSpec, Param, SSPCoordinator, gradient_worker

class DampedSSP(SSPCoordinator):
    def on_push(self, worker, push, now):
        staleness = max(0, self.version - int(push.version))
        self.apply(push.update, push.lr / (1.0 + staleness))
        return {"weight": 1.0 / (1.0 + staleness)}

DAMPED = AlgorithmSpec("damped-ssp", gradient_worker,
                       (Param("s", 2, "int", ge=0), Param("batch", None, "int", ge=1, optional=True)),
                       False, "SSP, pushes weighted by 1/(1+staleness)", DampedSSP)
"""


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines() if x.strip()]


@pytest.fixture
def user_project(tmp_path, monkeypatch) -> Path:
    """tmp/project/{userlib/, exp.yaml}: the user's package next to their config; the current directory is
    elsewhere, and sys.path / PYTHONPATH are restored after the test."""
    project = tmp_path / "project"
    pkg = project / "userlib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(textwrap.dedent(USER_MODEL))
    (pkg / "data.py").write_text(textwrap.dedent(USER_DATA))
    (pkg / "algorithms.py").write_text(textwrap.dedent(USER_ALGORITHM))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.chdir(tmp_path)
    for mod in [m for m in sys.modules if m == "userlib" or m.startswith("userlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    return project


def _write(project: Path, algorithm: str, *, task: str = "classification", batchnorm: bool = False,
           max_steps: int = 40, devices: int = 2, regression: bool = False) -> Path:
    stop = {"max_steps": max_steps, "max_time_s": 120, "target_accuracy": None}
    if task == "regression":
        stop.pop("target_accuracy")
    raw = {
        "name": f"user-{algorithm.split(':')[-1].lower()}", "seed": 3, "task": task,
        "data": {"dataset": "userlib.data:blobs", "kwargs": {"n": 1200, "features": 12, "regression": regression}},
        "model": {"name": "userlib.models:features_net", "kwargs": {"hidden": 32, "batchnorm": batchnorm}},
        "devices": {"count": devices, "rates": {"distribution": "constant", "rate": 400},
                    "compute": {"base_s": 0.01, "per_sample_s": 0.0002}},
        "algorithm": {"name": algorithm, "batch": {"policy": "fixed", "size": 16}},
        "optim": {"lr": 0.05, "momentum": 0.0, "weight_decay": 0.0},
        "stop": stop, "eval": {"every_s": 1.0},
    }
    path = project / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_user_package_runs_in_the_simulator(user_project):
    cfg = load_config(_write(user_project, "userlib.algorithms:DAMPED", batchnorm=True))
    run_dir, summary = run_config(cfg, "sim", out=user_project / "runs", progress=False)
    assert summary["steps"] >= 40 and summary["final_accuracy"] > 0.8, summary
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["name"] == "userlib.models:features_net"
    cfg = load_config(_write(user_project, "ddl", task="regression", regression=True))
    run_dir, summary = run_config(cfg, "sim", out=user_project / "runs", progress=False)
    evals = [r for r in _records(run_dir) if r.get("kind") == "eval"]
    assert evals[-1]["rmse"] < 0.6 * evals[0]["rmse"], (evals[0], evals[-1])
    assert set(summary["final_metrics"]) >= {"rmse", "mae", "loss"}


@pytest.mark.kafka
def test_user_package_runs_on_real_trainers_and_the_kafka_ps(user_project, bootstrap):
    # a collective algorithm over torch.distributed: the user's model and data in every trainer process
    cfg = load_config(_write(user_project, "ddl", max_steps=30))
    run_dir, summary = run_config(cfg, "local", out=user_project / "runs", bootstrap=bootstrap, progress=False)
    assert summary["steps"] >= 30 and summary["final_accuracy"] > 0.7, summary
    # the user's PS algorithm, hosted by `edgestream ps` behind Kafka, with a BatchNorm model
    cfg = load_config(_write(user_project, "userlib.algorithms:DAMPED", batchnorm=True, max_steps=30))
    run_dir, summary = run_config(cfg, "local", out=user_project / "runs", bootstrap=bootstrap, progress=False)
    ps = summary["ps"]
    assert ps["status"] == "finished" and ps["pushes_applied"] == ps["pushes_received"] > 0, ps
    assert summary["final_accuracy"] > 0.7, summary


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory) -> Path:
    """examples/plugin installed with pip (wheel built, entry points written) into a temporary folder."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(ROOT / "examples" / "plugin")], check=True)
    assert list(target.glob("edgestream_sensorplug-*.dist-info"))
    return target


def _plugin_env(target: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]))


def test_example_plugin_installs_and_its_entry_points_are_listed(installed_plugin):
    out = subprocess.run([sys.executable, "-m", "edgestream", "plugins", "--json"], capture_output=True, text=True,
                         env=_plugin_env(installed_plugin), check=True)
    listing = json.loads(out.stdout)
    source = "entry point (edgestream-sensorplug 0.1.0)"
    assert {"name": "sensor-cnn", "source": source, "target": "sensorplug.models:sensor_cnn",
            "summary": ""} in listing["models"]
    assert any(d["name"] == "sensor-windows" and d["source"] == source for d in listing["datasets"])
    assert any(a["name"] == "staleness-ssp" and a["source"] == source for a in listing["algorithms"])


@pytest.mark.kafka
@pytest.mark.parametrize("engine,algorithm,params", [("sim", "staleness-ssp", "{s: 2}"), ("local", "ddl", "{}"),
                                                     ("local", "staleness-ssp", "{s: 2}")])
def test_example_plugin_runs_as_its_readme_says(installed_plugin, bootstrap, tmp_path, engine, algorithm, params):
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "edgestream", "run", str(ROOT / "examples" / "plugin" / "sensor.yaml"),
           "--engine", engine, "--out", str(out), "--quiet", "--json", "--set", f"algorithm.name={algorithm}",
           "--set", f"algorithm.params={params}", "--set", "stop.max_steps=40", "--set", "stop.max_time_s=120"]
    if engine == "local":
        cmd += ["--bootstrap", bootstrap]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_plugin_env(installed_plugin), timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] >= 40 or summary["stop_reason"] == "target_accuracy", summary
    assert summary["final_accuracy"] > 0.5, summary
