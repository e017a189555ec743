"""`edgestream rates`: a config's stream rates and what they imply, and `--fit` of a measured trace."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.config import load_config
from edgestream.runner.plan import RunPlan
from edgestream.streams.fit import fit_distributions, summarize_trace

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _write_trace(path: Path, rates_per_device: list[np.ndarray], step_s: float) -> Path:
    lines = ["time,device,rate"]
    for d, rates in enumerate(rates_per_device):
        lines += [f"{k * step_s:g},{d},{r:.6g}" for k, r in enumerate(rates)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _draw(name: str, params: dict, n: int, rng: np.random.Generator) -> np.ndarray:
    if name == "uniform":
        return rng.uniform(params["low"], params["high"], n)
    if name == "normal":
        return rng.normal(params["mean"], params["std"], n)
    if name == "lognormal":
        s = params["sigma"]
        return rng.lognormal(math.log(params["mean"]) - s * s / 2, s, n)
    return rng.exponential(params["mean"], n)


@pytest.mark.parametrize("name,params", [
    ("lognormal", {"mean": 50.0, "sigma": 0.6}),
    ("lognormal", {"mean": 8.0, "sigma": 1.1}),
    ("normal", {"mean": 120.0, "std": 15.0}),
    ("uniform", {"low": 10.0, "high": 200.0}),
    ("exponential", {"mean": 30.0}),
])
def test_fit_recovers_a_known_distribution(tmp_path, name, params):
    rng = np.random.default_rng(7)
    base = _draw(name, params, 2000, rng)
    trace = _write_trace(tmp_path / "trace.csv", [np.array([b]) for b in base], 1.0)
    result = runner.invoke(app, ["rates", "--fit", str(trace)])
    assert result.exit_code == 0, result.output
    best = fit_distributions(summarize_trace(trace).base_rates)[0]
    assert best.distribution == name
    for key, value in params.items():
        assert best.params[key] == pytest.approx(value, rel=0.12), (key, best.params)
    block = result.stdout.split("config block:")[1]
    assert f"distribution: {name}" in block and "count: 2000" in block and "kind: none" in block


@pytest.mark.parametrize("sigma,step_s,devices", [(0.2, 1.0, 40), (0.05, 5.0, 25)])
def test_fit_recovers_a_random_walk_variation(tmp_path, sigma, step_s, devices):
    rng = np.random.default_rng(3)
    walks = [40.0 * np.exp(np.cumsum(np.r_[0.0, rng.normal(0.0, sigma, 200)])) for _ in range(devices)]
    trace = _write_trace(tmp_path / "walk.csv", walks, step_s)
    s = summarize_trace(trace)
    assert s.step_s == pytest.approx(step_s)
    assert s.log_step_std == pytest.approx(sigma, rel=0.1)
    result = runner.invoke(app, ["rates", "--fit", str(trace)])
    assert result.exit_code == 0, result.output
    assert "kind: random_walk" in result.stdout.split("config block:")[1]


def test_fit_of_equal_rates_is_constant():
    (fit,) = fit_distributions(np.full(5, 12.5))
    assert fit.spec() == {"distribution": "constant", "rate": 12.5}


@pytest.mark.parametrize("args,expect", [
    (["rates", "examples/s1.yaml", "--duration", "0"], "--duration"),
    (["rates", "examples/s1.yaml", "--plot", "out.txt"], "--plot"),
    (["rates", "--fit", "no-such-trace.csv"], "--fit"),
    (["rates"], "CONFIG is required"),
])
def test_bad_input_is_one_line(args, expect, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], result.stderr


@pytest.mark.parametrize("overrides", [
    [],
    ["devices.count=7", "seed=3", "algorithm.batch={policy: rate, min: 16, max: 48}"],
    ["devices.count=30", "devices.variation={kind: sinusoid, period_s: 20, amplitude: 0.5}",
     "algorithm.name=ddl", "algorithm.batch={policy: fixed, size: 32}"],
])
def test_rates_report_matches_the_rate_model_and_plots(tmp_path, overrides):
    config = ROOT / "examples" / "s1.yaml"
    args = ["rates", str(config), "--duration", "40", "--plot", str(tmp_path / "r.png")]
    for o in overrides:
        args += ["--set", o]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    plan = RunPlan.resolve(load_config(config, overrides))
    model, batch = plan.rate_model, plan.batch_policy()
    rows = [line.split() for line in result.stdout.splitlines() if re.match(r"^\s+\d+\s+\d", line)]
    assert len(rows) == model.num_devices
    means = np.array([model.cumulative(d, 40.0) / 40.0 for d in range(model.num_devices)])
    for d, row in enumerate(rows):
        assert int(row[0]) == d
        assert float(row[1]) == pytest.approx(model.base_rate(d), abs=0.01)
        assert float(row[2]) == pytest.approx(means[d], abs=0.01)
        lo, hi = (getattr(batch, "min", 8), getattr(batch, "max", 1024))
        assert int(row[6]) == min(hi, max(lo, math.floor(means[d] + 0.5)))
    b = getattr(batch, "size", 64)
    wait = re.search(r"each synchronous step waits ([\d.]+) s for device (\d+)", result.stdout)
    assert int(wait.group(2)) == int(np.argmin(means))
    assert float(wait.group(1)) == pytest.approx(b / means.min(), rel=0.01)
    png = (tmp_path / "r.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
