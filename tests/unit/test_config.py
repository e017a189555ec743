"""Config validation: valid examples pass; each kind of bad input names the field, value and what is allowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.config import ConfigError, ExperimentConfig, load_config, validate_dict

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))
runner = CliRunner()


def test_examples_exist_for_every_preset():
    presets = {load_config(p).devices.rates.preset for p in EXAMPLES if load_config(p).devices.rates.preset}
    assert {"S1", "S2", "S1'", "S2'"} <= presets


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path):
    result = runner.invoke(app, ["config", "validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"devices": {"count": -3}}, "devices.count: -3 is not allowed; must be >= 1"),
        ({"devces": {"count": 3}}, "devces: unknown field; allowed fields: name, seed, data, devices"),
        ({"devices": {"rates": {"preset": "S9"}}}, "devices.rates.preset: S9 is not allowed; must be one of S1, S2"),
        ({"devices": {"rates": {"distribution": "uniform", "low": 5}}}, "devices.rates: distribution 'uniform' needs low, high; missing high"),
        ({"devices": {"rates": {"distribution": "normal", "mean": 64, "std": 24, "rate": 3}}}, "remove rate"),
        ({"algorithm": {"name": "sgd"}}, "algorithm.name: 'sgd' is not a built-in algorithm or an installed plugin; built-ins: ddl, scadles"),
        ({"algorithm": {"batch": {"policy": "rate", "min": 10, "max": 5}}}, "algorithm.batch: min (10) must be <= max (5)"),
        ({"optim": {"lr": -1}}, "optim.lr: -1 is not allowed; must be > 0"),
        ({"seed": "x"}, "seed: x is not allowed; input should be a valid integer"),
        ({"data": {"dataset": "cifar10"}}, "data.root: required for dataset 'cifar10'"),
        ({"runtime": {"bootstrap": "nohost"}}, "runtime.bootstrap: nohost is not allowed; must be HOST:PORT"),
        ({"runtime": {"kafka_client": {"bootstrap.servers": "x:1"}}}, "is not a pass-through client setting"),
        ({"devices": {"variation": {"kind": "sinusoid", "sigma": 1}}}, "variation 'sinusoid' takes only period_s, amplitude"),
        ({"checkpoint": {"every_s": 0}}, "checkpoint.every_s: 0 is not allowed; must be > 0"),
        ({"algorithm": {"name": "local-sgd", "params": {"tau": 0}}}, "algorithm.params.tau: 0 is not allowed; must be >= 1"),
    ],
)
def test_bad_input_messages(raw, expected):
    with pytest.raises(ConfigError) as info:
        validate_dict(raw)
    assert any(expected in line for line in info.value.problems), info.value.problems


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        validate_dict({"devices": {"count": 0}, "optim": {"lr": 0}, "typo": 1})
    assert len(info.value.problems) == 3


def test_cli_validate_exit_2_one_line_per_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"devices": {"count": -3}, "model": {"name": "big"}}))
    result = runner.invoke(app, ["config", "validate", str(bad)])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert "devices.count: -3 is not allowed; must be >= 1" in lines
    assert any(ln.startswith("model.name: 'big' is not a built-in model") for ln in lines)


def test_cli_validate_missing_file_and_bad_yaml(tmp_path):
    assert runner.invoke(app, ["config", "validate", str(tmp_path / "nope.yaml")]).exit_code == 2
    broken = tmp_path / "broken.yaml"
    broken.write_text("devices: [unclosed\n")
    result = runner.invoke(app, ["config", "validate", str(broken)])
    assert result.exit_code == 2 and "not valid YAML" in result.output


def test_show_prints_resolved_config_with_defaults(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: shown\nalgorithm: {name: ddl}\n")
    result = runner.invoke(app, ["config", "show", str(f), "--set", "devices.count=4"])
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.output)
    assert shown["algorithm"]["batch"] == {"policy": "fixed", "size": 64}
    assert shown["devices"]["count"] == 4
    expected = load_config(f, ["devices.count=4"])
    expected.runtime.out = str(Path(expected.runtime.out).absolute())  # show prints where a run here would go
    assert Path(shown["runtime"]["out"]).is_absolute()
    assert ExperimentConfig.model_validate(shown) == expected


def test_defaults_follow_design():
    cfg = validate_dict({})
    assert cfg.algorithm.name == "scadles" and cfg.algorithm.batch.min == 8 and cfg.algorithm.batch.max == 1024
    assert cfg.devices.count == 16 and cfg.devices.rates.preset == "S1"
    assert validate_dict({"devices": {"rates": {"preset": "S2p"}}}).devices.rates.preset == "S2'"


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "edgestream.cli", "config", "validate", str(EXAMPLES[0])],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
