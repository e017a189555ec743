"""The shipped `h100` compute profile (issue 36: the measured H100 curves) and choosing a profile from the
command line: `edgestream compare --profile` and `edgestream reproduce --profile` (edgestream.profiles.select)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.config import load_config
from edgestream.profiles import load_profile
from edgestream.reproduce import CLAIMS, experiments
from edgestream.reproduce.runner import _profiled

TINY = {"name": "tiny", "seed": 1, "data": {"dataset": "digits"},
        "devices": {"count": 2, "rates": {"distribution": "constant", "rate": 500},
                    "compute": {"base_s": 0.05, "per_sample_s": 0.002, "static": [1, 2]}},
        "model": {"name": "cnn-small"}, "optim": {"lr": 0.05},
        "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 64}, "buffer": "persist"},
        "stop": {"max_steps": 3}, "eval": {"every_s": 1.0}}


def _steps(run: Path) -> list[dict]:
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e["kind"] == "step"]


def test_h100_is_shipped_with_its_measured_curves_source_and_command() -> None:
    prof = load_profile("h100")
    assert prof.name == "h100" and "H100" in prof.device
    assert set(prof.models) == {"cnn-small", "resnet20"}
    assert "edgestream profile examples/s1.yaml --device cuda" in prof.source and "model.name=resnet20" in prof.source
    text = Path(prof.path).read_text(encoding="utf-8")
    assert "--set model.name=resnet20" in text and "5a33ed5" in text       # each entry's command, the commit
    assert prof.models["cnn-small"](64) == 0.001451 and prof.models["resnet20"](128) == 0.00741
    assert prof.shapes == {"cnn-small": [1, 8, 8], "resnet20": [1, 8, 8]}


def test_compare_takes_the_step_times_from_the_profile_chosen_on_the_command_line(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(TINY))
    runner = CliRunner()
    for args, entry in (([], "cnn-small"), (["--profile-model", "resnet20"], "resnet20")):
        res = runner.invoke(app, ["compare", str(cfg), "--algorithms", "ddl", "--profile", "h100", *args,
                                  "--out", str(tmp_path), "--run-id", entry, "--quiet"])
        assert res.exit_code == 0, res.output
        run = tmp_path / f"tiny-compare-{entry}" / f"tiny-ddl-{entry}"
        compute = load_config(run / "config.yaml").devices.compute
        assert (compute.profile, compute.base_s, compute.per_sample_s) == ("h100", None, None)
        assert compute.static == [1, 2]                                  # the config's factors stay
        curve = load_profile("h100").models[entry]
        steps = _steps(run)
        assert steps and all(s["compute_s"] == pytest.approx(curve(64) * [1, 2][s["device"]], rel=1e-5)
                             for s in steps)
    res = runner.invoke(app, ["compare", str(cfg), "--algorithms", "ddl", "--profile", "h100",
                              "--set", "model.name=mlp", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert res.output.strip() == ("devices.compute.profile: profile h100: a model entry (devices.compute.profile_model)"
                                  ", none is named like the run's model 'mlp'; it has cnn-small, resnet20")
    res = runner.invoke(app, ["compare", str(cfg), "--algorithms", "ddl", "--profile", "h200", "--out", str(tmp_path)])
    assert res.exit_code == 2 and res.output.strip() == (
        "devices.compute.profile: h200: no such profile file, and not a named profile (epyc-2core, h100, k80)")
    res = runner.invoke(app, ["compare", str(cfg), "--algorithms", "ddl", "--profile-model", "resnet20"])
    assert res.exit_code == 2
    assert res.output.strip() == "--profile-model: names an entry of a compute profile; give --profile too"


def test_reproduce_experiments_run_on_the_chosen_profile(tmp_path: Path) -> None:
    token = experiments.PROFILE.set(("h100", None))
    try:
        experiments.compare(TINY, "ddl", "t", tmp_path)
    finally:
        experiments.PROFILE.reset(token)
    run = tmp_path / "tiny-compare-t" / "tiny-ddl-t"
    compute = load_config(run / "config.yaml").devices.compute
    assert (compute.profile, compute.profile_model, compute.base_s) == ("h100", "cnn-small", None)
    assert all(s["compute_s"] == pytest.approx(0.001451 * [1, 2][s["device"]], rel=1e-5) for s in _steps(run))


def test_reproduce_refuses_a_profile_it_cannot_use_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["reproduce", "adsp-vs-bsp", "--quick", "--profile", "h100", "--out", str(tmp_path)])
    assert res.exit_code == 2 and res.output.strip() == (
        "error: claim adsp-vs-bsp: profile h100 has no entry for the model 'mlp' (it has cnn-small, resnet20); "
        "pick one with --profile-model")
    res = runner.invoke(app, ["reproduce", "--profile", "h200", "--out", str(tmp_path)])
    assert res.exit_code == 2 and res.output.strip().startswith("error: h200: no such profile file, and not a named "
                                                                "profile (epyc-2core, h100, k80)")
    res = runner.invoke(app, ["reproduce", "--profile", "h100", "--profile-model", "vgg", "--out", str(tmp_path)])
    assert res.exit_code == 2 and res.output.strip() == "error: profile h100: no entry 'vgg'; it has cnn-small, resnet20"
    res = runner.invoke(app, ["reproduce", "--profile-model", "vgg", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert res.output.strip() == "error: --profile-model: names an entry of a compute profile; give --profile too"
    assert not list(tmp_path.iterdir())                                  # refused before anything ran


def test_reproduce_with_a_profile_skips_only_the_claims_whose_model_it_lacks() -> None:
    said: list[str] = []
    keep, chosen, note = _profiled(list(CLAIMS), False, True, "h100", None, said.append)
    mlp = {n for n, c in CLAIMS.items() if c.model(True) == "mlp"}
    assert mlp and set(note["skipped"]) == mlp and set(keep) == set(CLAIMS) - mlp and chosen == ("h100", None)
    assert note["entries"]["scadles-s2"] == "cnn-small" and note["entries"]["zipline-runtime"] is None
    assert said == [f"--profile h100: skipped {', '.join(n for n in CLAIMS if n in mlp)} (their devices train a "
                    "model the profile has no entry for; pick one with --profile-model)"]
    keep, _, note = _profiled(list(CLAIMS), False, True, "h100", "resnet20", said.append)
    assert keep == list(CLAIMS) and not note["skipped"] and note["entries"]["adsp-vs-bsp"] == "resnet20"
