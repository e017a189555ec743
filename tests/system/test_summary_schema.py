"""One summary schema for every engine (edgestream.runner.summary; issue 30, item 1): the same tiny config run on
the simulator, the lockstep engine and a real local run (the suite's broker) writes summary.json with the same
common keys, in the same order, with `engine`, `clock` and `time_s`; compare shows a time for every engine; the
end of `edgestream run` prints the same keys whatever the engine; `edgestream run` reaches every engine through
the registry, whose names are the config's and the CLI's."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.comparisons import parse_variants, run_compare, summary_row
from edgestream.config import ConfigError, validate_dict
from edgestream.engine_names import ENGINES
from edgestream.forkserver import take_prestarted
from edgestream.runner import engines
from edgestream.runner.report import print_end
from edgestream.runner.summary import PRINTED_KEYS, SUMMARY_KEYS, common_part

TINY = {
    "name": "schema",
    "seed": 3,
    "data": {"dataset": "digits"},
    "devices": {"count": 2, "rates": {"distribution": "constant", "rate": 200},
                "compute": {"base_s": 0.01, "per_sample_s": 0.001}},
    "model": {"name": "mlp"},
    "optim": {"lr": 0.05},
    "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 16}, "buffer": "persist"},
    "stop": {"target_accuracy": None, "max_steps": 4, "max_time_s": 120.0},
    "eval": {"every_s": 1.0},
}
CLOCK = {"sim": "virtual", "lockstep": "virtual", "local": "wall"}
#: each engine's own key that predates `time_s` and equals it (runner.summary's rule: kept as an engine key)
OWN_TIME = {"sim": "virtual_time_s", "local": "run_time_s"}


@pytest.fixture(scope="module")
def compared(bootstrap: str, tmp_path_factory) -> tuple[Path, dict[str, dict], str]:
    """ddl on every engine, through the registry, side by side (one compare: one local run)."""
    out = tmp_path_factory.mktemp("schema")
    # a run id of its own: the broker is shared by the suite's workers and runs (a fixed id met a live run of it)
    return run_compare(validate_dict(TINY), parse_variants("ddl"), out=out, run_id=uuid.uuid4().hex[:8],
                       progress=False,
                       engine=",".join(ENGINES), bootstrap=bootstrap)


def _written(summaries: dict[str, dict]) -> dict[str, dict]:
    """engine -> its summary.json as written."""
    return {s["engine"]: json.loads((Path(s["run_dir"]) / "summary.json").read_text()) for s in summaries.values()}


def test_every_engine_writes_the_same_summary_keys(compared) -> None:
    _, summaries, _ = compared
    written = _written(summaries)
    assert set(written) == set(ENGINES) == {"sim", "lockstep", "local"}
    keysets = {e: list(s)[:len(SUMMARY_KEYS)] for e, s in written.items()}
    assert all(keys == list(SUMMARY_KEYS) for keys in keysets.values()), keysets  # the common keys first, in order
    assert len({frozenset(common_part(s)) for s in written.values()}) == 1
    for engine, s in written.items():
        assert s["engine"] == engine and s["clock"] == CLOCK[engine]
        assert isinstance(s["time_s"], float) and s["time_s"] > 0, (engine, s["time_s"])
        assert s["algorithm"] == "ddl" and s["devices"] == 2 and s["task"] == "classification"
        assert s["steps"] == 4 and s["stop_reason"] == "max_steps", (engine, s["steps"], s["stop_reason"])
        assert s["interrupted"] is False and s["interrupted_by"] is None and s["target"] is None
        assert s["final_accuracy"] is not None and s["wall_s"] > 0 and s["samples_trained"] >= 2 * 4 * 16
        if engine in OWN_TIME:  # the engine's own key from before the schema says the same
            assert s[OWN_TIME[engine]] == pytest.approx(s["time_s"], abs=1e-6)
    assert "run_time_s" not in written["sim"] and "virtual_time_s" not in written["local"]


def test_compare_shows_a_time_for_every_engine(compared) -> None:
    folder, summaries, table = compared
    rows = {label: summary_row(s) for label, s in summaries.items()}
    assert set(rows) == {f"ddl@{e}" for e in ENGINES}
    assert all(r["time_s"] is not None and r["time_s"] > 0 for r in rows.values()), rows
    lines = [ln for ln in table.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert "engine" in head and "time (s)" in head
    for line in lines[2:]:
        cells = dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True))
        assert cells["engine"] in ENGINES and re.fullmatch(r"[0-9.e+]+", cells["time (s)"]), cells
    assert table in (folder / "compare.md").read_text()


def test_the_end_of_a_run_prints_the_same_keys_for_every_engine(compared, capsys) -> None:
    _, summaries, _ = compared
    printed = {}
    for engine, s in _written(summaries).items():
        print_end(s, Path("."), as_json=True)
        printed[engine] = json.loads(capsys.readouterr().out)
    assert all(list(p) == list(PRINTED_KEYS) for p in printed.values()), printed
    assert {e: p["clock"] for e, p in printed.items()} == CLOCK
    assert all(p["time_s"] > 0 for p in printed.values())


def test_cli_run_prints_the_same_keys_on_the_in_process_engines(tmp_path) -> None:
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({**TINY, "stop": {"target_accuracy": None, "max_steps": 2, "max_time_s": 60.0}}))
    printed = {}
    for engine in ("sim", "lockstep"):
        res = CliRunner().invoke(app, ["run", str(cfg), "--engine", engine, "--out", str(tmp_path), "--run-id",
                                       engine, "--quiet", "--json"])
        assert res.exit_code == 0, res.output
        printed[engine] = json.loads(res.stdout.strip().splitlines()[-1])
        assert (tmp_path / f"schema-ddl-{engine}" / "summary.json").is_file()
    assert list(printed["sim"]) == list(printed["lockstep"]) == list(PRINTED_KEYS)
    assert printed["lockstep"]["engine"] == "lockstep" and printed["lockstep"]["steps"] == 2


def test_cli_run_reaches_the_local_engine_through_the_registry(tmp_path, monkeypatch) -> None:
    """`edgestream run --engine local` calls the registry's run function for "local" with its options."""
    calls = []

    def fake(cfg, *, out=None, run_id=None, progress=True, **options):
        calls.append({"out": out, "run_id": run_id, "progress": progress, **options})
        path = Path(tmp_path / "fake-run")
        path.mkdir(exist_ok=True)
        return path, {"engine": "local", "clock": "wall", "time_s": 1.5, "steps": 3, "stop_reason": "max_steps"}

    import edgestream.launch  # noqa: F401 - registers the real "local" first, so the fake below stays

    monkeypatch.setitem(engines._ENGINES, "local", engines.Engine("local", fake, "processes"))
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(TINY))
    try:
        res = CliRunner().invoke(app, ["run", str(cfg), "--engine", "local", "--bootstrap", "127.0.0.1:9092",
                                       "--quiet", "--json"])
    finally:  # the fork server `run --engine local` starts early for the real engine's children
        server = take_prestarted()
        if server is not None:
            server.close()
    assert res.exit_code == 0, res.output
    assert calls == [{"out": None, "run_id": None, "progress": False, "bootstrap": "127.0.0.1:9092", "resume": None}]
    printed = json.loads(res.stdout.strip().splitlines()[-1])
    assert list(printed) == list(PRINTED_KEYS) and printed["time_s"] == 1.5


def test_engine_names_live_in_one_place() -> None:
    assert set(engines.engine_names()) >= set(ENGINES) and set(engines.ENGINE_MODULES) == set(ENGINES)
    for name in ENGINES:
        assert validate_dict({**TINY, "runtime": {"engine": name}}).runtime.engine == name
    with pytest.raises(ConfigError, match="runtime.engine"):
        validate_dict({**TINY, "runtime": {"engine": "warp"}})
    res = CliRunner().invoke(app, ["run", "x.yaml", "--engine", "warp"])
    assert res.exit_code == 2 and f"must be one of {', '.join(ENGINES)}" in res.output


def test_lockstep_refuses_a_parameter_server_algorithm(tmp_path) -> None:
    from edgestream.runner import EngineError, run_config

    with pytest.raises(EngineError, match="engine 'lockstep' cannot run 'ssp'"):
        run_config(validate_dict({**TINY, "algorithm": {"name": "ssp"}}), "lockstep", out=tmp_path)
    assert not any(tmp_path.iterdir())
