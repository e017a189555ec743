"""The simulator's run directory (`runner.run_config(cfg, "sim")`), `edgestream run` and `edgestream
compare` (typer's CliRunner), and the compare rules (variants, batch policy per algorithm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.comparisons import Variant, batch_for, parse_variants, variant_config
from edgestream.config import ConfigError, load_config, validate_dict
from edgestream.metrics import read_events
from edgestream.metrics.events import STEP_FIELDS
from edgestream.runner import engines, run_config

TINY = {
    "name": "tiny",
    "seed": 1,
    "data": {"dataset": "digits"},
    "devices": {"count": 3, "rates": {"distribution": "uniform", "low": 30, "high": 90},
                "compute": {"base_s": 0.05, "per_sample_s": 0.002}},
    "model": {"name": "mlp"},
    "optim": {"lr": 0.05},
    "algorithm": {"name": "scadles", "batch": {"policy": "rate", "min": 8, "max": 128}, "buffer": "truncate"},
    "stop": {"target_accuracy": 0.95, "max_time_s": 6.0},
    "eval": {"every_s": 1.0},
}
SUMMARY_KEYS = ("time_to_target_s", "final_accuracy", "steps", "samples_trained", "buffer_max_samples",
                "dropped_total", "cnc_ratio", "floats_sent_total", "wall_s", "engine")


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_directory_contents(tmp_path):
    cfg = validate_dict(TINY)
    path, summary = run_config(cfg, "sim", out=tmp_path / "runs", run_id="r1", progress=False)
    assert path == tmp_path / "runs" / "tiny-scadles-r1"
    assert validate_dict(yaml.safe_load((path / "config.yaml").read_text())) == cfg
    assert json.loads((path / "summary.json").read_text()) == summary
    assert all(k in summary for k in SUMMARY_KEYS) and summary["engine"] == "sim"
    events = read_events(path / "events.jsonl")
    steps = [e for e in events if e["kind"] == "step"]
    evals = [e for e in events if e["kind"] == "eval"]
    assert steps and all(set(STEP_FIELDS) <= set(e) for e in steps)
    assert sorted({e["device"] for e in steps}) == [0, 1, 2]
    assert evals[0]["time"] == 0.0 and evals[-1]["accuracy"] == pytest.approx(summary["final_accuracy"], abs=1e-6)
    assert summary["device_steps_total"] == len(steps) and summary["samples_trained"] == sum(e["batch"] for e in steps)
    assert summary["steps"] == max(e["step"] for e in steps) + 1  # the run's steps, not summed over devices
    assert summary["final_accuracy"] > 0.3
    assert is_png(path / "accuracy.png") and is_png(path / "buffer.png")


def test_cli_run(tiny, tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(tiny), "--engine", "sim", "--out", str(tmp_path / "o"), "--run-id", "x",
                              "--set", "stop.max_time_s=3", "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "o" / "tiny-scadles-x"
    assert (run / "summary.json").is_file() and (run / "events.jsonl").is_file()
    printed = json.loads(res.stdout.strip().splitlines()[-1])
    assert printed["stop_reason"] in ("max_time_s", "target_accuracy") and printed["time_s"] >= 1.0
    assert load_config(run / "config.yaml").stop.max_time_s == 3.0

    res = runner.invoke(app, ["run", str(tiny), "--engine", "local", "--bootstrap", "nohost"])
    assert res.exit_code == 2 and "--bootstrap: 'nohost' is not allowed" in res.output
    res = runner.invoke(app, ["run", str(tiny), "--set", "devices.count=0", "--set", "optim.lr=-1"])
    assert res.exit_code == 2
    assert "devices.count: 0 is not allowed; must be >= 1" in res.output and "optim.lr" in res.output
    res = runner.invoke(app, ["run", str(tiny), "--set", "devices.count=2000", "--quiet", "--out", str(tmp_path / "big")])
    assert res.exit_code == 2 and "2000 devices" in res.output
    assert not list((tmp_path / "big").glob("*"))  # a config that cannot run leaves no run directory


def test_cli_compare(tiny, tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["compare", str(tiny), "--algorithms", "ddl,scadles[algorithm.buffer=persist]",
                              "--set", "stop.max_time_s=4", "--out", str(tmp_path), "--run-id", "c", "--quiet"])
    assert res.exit_code == 0, res.output
    folder = tmp_path / "tiny-compare-c"
    md = (folder / "compare.md").read_text()
    assert "| ddl |" in md and "| scadles[algorithm.buffer=persist] |" in md and "speedup vs ddl" in md
    assert "| ddl |" in res.stdout
    assert is_png(folder / "compare.png")
    ddl = json.loads((folder / "tiny-ddl-c" / "summary.json").read_text())
    sca = json.loads((folder / "tiny-scadles-c" / "summary.json").read_text())
    assert ddl["algorithm"] == "ddl" and sca["algorithm"] == "scadles"
    assert load_config(folder / "tiny-ddl-c" / "config.yaml").algorithm.batch.spec() == {"policy": "fixed", "size": 64}
    assert sca["dropped_total"] == 0

    res = runner.invoke(app, ["compare", str(tiny), "--algorithms", "ddl,scadles[devices.count=-2]"])
    assert res.exit_code == 2 and "devices.count: -2 is not allowed" in res.output
    res = runner.invoke(app, ["compare", str(tiny), "--algorithms", "ddl,[oops"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["compare", str(tiny), "--algorithms", "ddl", "--engine", "warp"])
    assert res.exit_code == 2 and "--engine: 'warp' is not allowed" in res.output


def test_cli_compare_runs_the_parameter_server_family(tiny, tmp_path):
    """PS algorithms compare in the simulator beside a collective one; each run's summary has its PS block."""
    res = CliRunner().invoke(app, ["compare", str(tiny), "--algorithms", "ddl,ssp[algorithm.params.s=1],adsp",
                                   "--set", "stop.max_time_s=3", "--set", "optim.momentum=0",
                                   "--set", "algorithm.params={}", "--out", str(tmp_path), "--run-id", "p",
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    folder = tmp_path / "tiny-compare-p"
    md = (folder / "compare.md").read_text()
    assert "| ssp[algorithm.params.s=1] |" in md and "| adsp |" in md
    ssp = json.loads((folder / "tiny-ssp-p" / "summary.json").read_text())
    assert ssp["algorithm"] == "ssp" and sum(ssp["ps"]["pushes"]) == ssp["ps"]["version"] > 0
    assert "ps" not in json.loads((folder / "tiny-ddl-p" / "summary.json").read_text())


def test_an_engine_that_is_not_registered_is_one_line_exit_2(tiny, tmp_path, monkeypatch):
    """The registry's answer for an engine whose package does not register it (as `local` was before
    edgestream/launch existed): one line, exit 2, and no run directory."""
    monkeypatch.setattr(engines, "_ENGINES", {k: v for k, v in engines._ENGINES.items() if k != "local"})
    monkeypatch.setitem(engines.ENGINE_MODULES, "local", "edgestream.no_such_engine_package")
    with pytest.raises(engines.EngineUnavailable, match="engine 'local' is not available"):
        engines.get_engine("local")
    res = CliRunner().invoke(app, ["compare", str(tiny), "--algorithms", "ddl", "--engine", "local",
                                   "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 2 and res.output.strip() == "engine 'local' is not available"
    assert not (tmp_path / "o").exists()
    with pytest.raises(engines.EngineUnavailable):
        run_config(validate_dict(TINY), "nope", out=tmp_path / "o")


def test_variants_and_batch_rule():
    vs = parse_variants("ddl, scadles[algorithm.buffer=persist,compression.name=topk] ,abs-sgd")
    assert [v.algorithm for v in vs] == ["ddl", "scadles", "abs-sgd"]
    assert vs[1].overrides == ["algorithm.buffer=persist", "compression.name=topk"]
    with pytest.raises(ValueError):
        parse_variants("ddl,ddl")
    assert batch_for("ddl", {"policy": "rate", "min": 8, "max": 1024}) == {"policy": "fixed", "size": 64}
    assert batch_for("ddl", {"policy": "fixed", "size": 32}) == {"policy": "fixed", "size": 32}
    assert batch_for("scadles", {"policy": "fixed", "size": 32})["policy"] == "rate"
    assert batch_for("scadles", {"policy": "available", "max": 99}) == {"policy": "available", "max": 99}
    cfg = validate_dict({**TINY, "algorithm": {"name": "scadles", "params": {"base_batch": 32}}})
    assert variant_config(cfg, Variant("ddl", "ddl")).algorithm.params == {}
    assert variant_config(cfg, Variant("s", "scadles")).algorithm.params == {"base_batch": 32}
    with pytest.raises(ConfigError):
        variant_config(cfg, Variant("x", "ddl", ["algorithm.buffer=sometimes"]))


def test_compare_algorithms_for_the_demo(tmp_path):
    import io

    from rich.console import Console

    from edgestream.comparisons import compare_algorithms

    buf = io.StringIO()
    cfg = validate_dict({**TINY, "stop": {"target_accuracy": 0.95, "max_time_s": 3.0}})
    res = compare_algorithms(cfg, ["ddl", "scadles"], out=tmp_path, console=Console(file=buf, width=120))
    assert set(res["runs"]) == {"ddl", "scadles"} and Path(res["folder"], "compare.md").is_file()
    assert "scadles" in buf.getvalue() and "speedup" in buf.getvalue()
