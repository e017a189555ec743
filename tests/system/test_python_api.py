"""The Python API (`import edgestream`, docs/python-api.md): the doc's examples run as written (the local
engine's against the suite's broker), errors raise instead of exiting, progress=False prints nothing,
compare reports one time column for every engine. Nothing is mocked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import edgestream

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"

TINY = {
    "name": "tiny",
    "seed": 1,
    "data": {"dataset": "digits"},
    "devices": {"count": 3, "rates": {"distribution": "uniform", "low": 30, "high": 90},
                "compute": {"base_s": 0.05, "per_sample_s": 0.002}},
    "model": {"name": "mlp"},
    "optim": {"lr": 0.05},
    "algorithm": {"name": "scadles", "batch": {"policy": "rate", "min": 8, "max": 128}, "buffer": "truncate"},
    "stop": {"target_accuracy": 0.95, "max_time_s": 4.0},
    "eval": {"every_s": 1.0},
}


def doc_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_import_is_light_and_lists_the_surface():
    code = ("import sys, edgestream; edgestream.load_config; edgestream.RunResult; edgestream.ConfigError; "
            "edgestream.plugins.MODELS; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    for name in ("load_config", "run", "compare", "RunResult", "CompareResult", "RunFailed", "ConfigError",
                 "EngineError", "PluginError", "list_plugins", "plugins"):
        assert name in dir(edgestream) and getattr(edgestream, name) is not None
    with pytest.raises(AttributeError):
        edgestream.no_such_name  # noqa: B018
    listing = edgestream.list_plugins()
    assert {"models", "datasets", "algorithms", "compressors"} <= set(listing)
    assert {"mlp", "cnn-small"} <= {p["name"] for p in listing["models"]}
    assert "scadles" in {p["name"] for p in edgestream.list_plugins("algorithms")["algorithms"]}
    with pytest.raises(ValueError, match="kind: 'nope' is not allowed"):
        edgestream.list_plugins("nope")


def test_the_doc_examples_run(tmp_path, monkeypatch, bootstrap):
    """Every ```python block of docs/python-api.md, in order, in one namespace, in an empty folder."""
    blocks = doc_blocks()
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGESTREAM_BOOTSTRAP", bootstrap)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the doc adds the folder to the import path
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # restored after the doc added to it
    ns: dict = {"__name__": "__doc_example__"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"{DOC.name}[block {i}]", "exec"), ns)
        except Exception as exc:
            pytest.fail(f"docs/python-api.md block {i} raised {type(exc).__name__}: {exc}\n{block}")
    result, local = ns["result"], ns["local"]
    assert isinstance(result, edgestream.RunResult) and result.summary["engine"] == "sim"
    assert result.config.model.name == "mymodels:small_mlp" and result.config.model.kwargs == {"hidden": 64}
    assert result.records.steps and result.records.evals
    assert isinstance(local, edgestream.RunResult) and local.summary["engine"] == "local"
    assert local.run_dir.is_dir() and (local.run_dir / "summary.json").is_file()
    assert local.records.steps and {r["device"] for r in local.records.steps} == {0, 1}
    assert local.summary["steps"] == 10 and local.config.model.name == "mymodels:small_mlp"
    dev = ns["dev"]  # a device published into the local run's stream, after its producer's samples
    assert dev.delivered == dev.sent == 20 and dev.failed == 0 and dev.next_seq - ns["first"] == 20 and ns["first"] > 0
    assert sys.modules.pop("mymodels", None) is not None


def test_run_in_the_simulator(tmp_path, capsys):
    cfg = edgestream.load_config(TINY)
    result = edgestream.run(cfg, "sim", out=tmp_path, run_id="r1", progress=False)
    assert capsys.readouterr() == ("", "")
    assert result.run_dir == tmp_path / "tiny-scadles-r1" and result.config is cfg
    assert result.summary["engine"] == "sim" and result.summary["stop_reason"] in ("max_time_s", "target_accuracy")
    records = result.records
    assert records and records.steps and records.evals and len(records) >= len(records.steps) + len(records.evals)
    assert all(r["kind"] == "step" for r in records.steps) and all(r["kind"] == "eval" for r in records.evals)
    assert result.summary["device_steps_total"] == len(records.steps)
    again = edgestream.RunResult.from_dir(result.run_dir)
    assert again.summary == result.summary and again.config == cfg and again.records == records
    assert "tiny-scadles-r1" in repr(result) and "stop_reason" in repr(result)


def test_a_file_and_overrides(tmp_path):
    import yaml

    (tmp_path / "rates.csv").write_text("time,device,rate\n0,0,50\n0,1,60\n")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**TINY, "devices": {**TINY["devices"], "count": 2,
                                                         "rates": {"distribution": "trace", "path": "rates.csv"}}}))
    cfg = edgestream.load_config(path, overrides=["seed=7"])
    assert cfg.seed == 7 and cfg.devices.rates.path == str(tmp_path / "rates.csv")
    assert edgestream.load_config(str(path)).seed == 1
    changed = edgestream.load_config(cfg, overrides=["devices.count=1"])
    assert changed.devices.count == 1 and cfg.devices.count == 2


def test_a_dict_resolves_paths_against_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "rates.csv").write_text("time,device,rate\n0,0,50\n0,1,60\n")
    monkeypatch.chdir(tmp_path)
    raw = {**TINY, "devices": {**TINY["devices"], "count": 2, "rates": {"distribution": "trace", "path": "rates.csv"}}}
    cfg = edgestream.load_config(raw)
    assert cfg.devices.rates.path == str(tmp_path / "rates.csv")
    assert raw["devices"]["rates"]["path"] == "rates.csv"  # the caller's dict is left alone
    monkeypatch.chdir(tmp_path.parent)
    with pytest.raises(edgestream.ConfigError) as err:
        edgestream.load_config(raw)
    assert any("rates.csv" in line for line in err.value.problems)


def test_bad_configs_raise_config_error_with_every_problem(tmp_path):
    with pytest.raises(edgestream.ConfigError) as err:
        edgestream.load_config({**TINY, "devices": {"count": 0}, "model": {"name": "no-such-model"}})
    problems = err.value.problems
    assert any(p.startswith("devices.count: 0 is not allowed") for p in problems)
    assert any(p.startswith("model.name: 'no-such-model'") for p in problems)
    with pytest.raises(edgestream.ConfigError, match="no such file"):
        edgestream.load_config(tmp_path / "missing.yaml")
    with pytest.raises(edgestream.ConfigError, match="expected KEY.PATH=VALUE"):
        edgestream.load_config(TINY, overrides=["seed"])
    with pytest.raises(edgestream.ConfigError):
        edgestream.run({**TINY, "optim": {"lr": -1}}, "sim", out=tmp_path, progress=False)
    with pytest.raises(TypeError, match="config: expected"):
        edgestream.load_config(42)
    with pytest.raises(edgestream.EngineError, match="not available"):
        edgestream.run(TINY, "nowhere", out=tmp_path, progress=False)
    with pytest.raises(ValueError, match="bootstrap"):
        edgestream.run(TINY, "sim", bootstrap="127.0.0.1:9092", out=tmp_path, progress=False)
    with pytest.raises(edgestream.ConfigError, match="bootstrap: 'not an address'"):
        edgestream.run(TINY, "local", bootstrap="not an address", out=tmp_path, progress=False)
    with pytest.raises(ValueError, match="unbalanced"):
        edgestream.compare(TINY, ["ddl["], out=tmp_path, progress=False)
    with pytest.raises(edgestream.ConfigError, match="^variant ddl"):
        edgestream.compare(TINY, ["ddl[algorithm.buffer=sometimes]"], out=tmp_path, progress=False)


def test_a_local_run_that_cannot_start_raises_run_failed(tmp_path, capsys):
    """No SystemExit anywhere: a run directory that is not one, an unreachable broker."""
    with pytest.raises(edgestream.RunFailed, match="not a run directory") as err:
        edgestream.run(TINY, "local", resume=tmp_path / "nothing", progress=False)
    assert err.value.code == 2
    with pytest.raises(edgestream.ConfigError, match="not a run directory"):
        edgestream.run(None, resume=tmp_path / "nothing", progress=False)
    with pytest.raises(ValueError, match="leave out out and run_id"):
        edgestream.run(TINY, "local", resume=tmp_path, out=tmp_path, progress=False)
    with pytest.raises(edgestream.RunFailed, match="no Kafka broker answered at 127.0.0.1:1") as err:
        edgestream.run({**TINY, "devices": {**TINY["devices"], "count": 2}}, "local", bootstrap="127.0.0.1:1",
                       out=tmp_path / "runs", progress=False)
    assert err.value.code == 1 and isinstance(err.value.__cause__, Exception)
    assert capsys.readouterr() == ("", "")


def test_compare_rows_and_runs(tmp_path, capsys):
    cmp = edgestream.compare(TINY, ["ddl", "scadles[algorithm.buffer=persist]"], out=tmp_path, run_id="c1",
                             progress=False)
    assert capsys.readouterr() == ("", "")
    assert cmp.folder == tmp_path / "tiny-compare-c1" and (cmp.folder / "compare.md").is_file()
    assert [r["label"] for r in cmp.rows] == ["ddl", "scadles[algorithm.buffer=persist]"]
    assert [r["algorithm"] for r in cmp.rows] == ["ddl", "scadles"] and {r["engine"] for r in cmp.rows} == {"sim"}
    for row in cmp.rows:
        run = cmp.runs[row["label"]]
        assert row["time_s"] == run.summary["virtual_time_s"] and row["run_dir"] == str(run.run_dir)
        assert run.records.evals and row["final_accuracy"] == run.summary["final_accuracy"]
    assert cmp.runs["scadles[algorithm.buffer=persist]"].config.algorithm.buffer == "persist"
    assert str(cmp) == cmp.table and "| ddl |" in cmp.table


def test_compare_takes_the_time_from_whichever_engine_ran():
    from edgestream.comparisons import engine_time_s, summary_row

    assert engine_time_s({"virtual_time_s": 6.5}) == 6.5 and engine_time_s({"run_time_s": 3.25}) == 3.25
    assert engine_time_s({}) is None
    assert summary_row({"run_time_s": 2.0, "steps": 4})["time_s"] == 2.0
    assert summary_row({"virtual_time_s": 1.0, "run_time_s": None})["time_s"] == 1.0
