"""Issue 35 item 4, the end of a run: run names `<name>-<algorithm>-<run id>` (directories, Kafka topics, the
compare's runs), the summary of an interrupted run, the short human summary at the end, `compare RUN_DIR...`
of finished runs, and plain progress lines when the output is not a terminal. Simulated runs of a few
virtual seconds; nothing asserts a wall-clock time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edgestream.config import validate_dict
from edgestream.kafka.lifecycle import RUN_ID_TIME, run_of_topic
from edgestream.kafka.status import find_run
from edgestream.kafka.topic_names import device_topic, ps_topic
from edgestream.runid import new_run_id, run_name
from edgestream.runner import run_config
from edgestream.runner.plan import RunPlan

TINY = {
    "name": "tiny",
    "seed": 1,
    "data": {"dataset": "digits"},
    "devices": {"count": 2, "rates": {"distribution": "constant", "rate": 60},
                "compute": {"base_s": 0.05, "per_sample_s": 0.002}},
    "model": {"name": "mlp"},
    "optim": {"lr": 0.05},
    "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 16}},
    "stop": {"target_accuracy": 0.95, "max_time_s": 3.0},
    "eval": {"every_s": 1.0},
}
#: what Kafka accepts as a topic name
TOPIC = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")
DEFAULT_ID = r"\d{8}-\d{6}-[0-9a-f]{4}"


# ---------------------------------------------------------------- run names

def test_a_run_name_is_name_algorithm_run_id():
    rid = new_run_id()
    assert re.fullmatch(DEFAULT_ID, rid)
    assert run_name("s1", "ddl", rid) == f"s1-ddl-{rid}"
    assert run_name("s1", "abs-sgd", "r1") == "s1-abs-sgd-r1"
    # a user's algorithm by import path: its attribute; characters a folder or topic cannot hold become '-'
    assert run_name("s1", "my_pkg.algos:Fancy_SGD", "r1") == "s1-Fancy_SGD-r1"
    assert run_name("s1", "weird name!", "r1") == "s1-weird-name-r1"
    with pytest.raises(ValueError, match="run id 'a b' is not allowed"):
        run_name("s1", "ddl", "a b")


def test_the_longest_run_name_still_makes_valid_kafka_topics():
    run = run_name("n" * 100, "pkg.mod:" + "a" * 300, "i" * 64)
    for topic in (device_topic(run, 1023), ps_topic(run, "pull.1023"), f"{run}.orchestrator"):
        assert TOPIC.match(topic), (len(topic), topic)


def test_tools_that_read_run_names_still_read_them():
    """`topics list/delete` (run_of_topic, the run id's time) and `status` (a run id finds its run)."""
    run = run_name("s1", "scadles", "20261125-214000-3fa2")
    assert run_of_topic(device_topic(run, 3)) == run and run_of_topic(ps_topic(run, "push")) == run
    assert RUN_ID_TIME.search(run)["t"] == "20261125-214000"
    other = run_name("s1", "ddl", "20261125-214001-0b1c")
    topics = [device_topic(run, 0), device_topic(other, 0)]
    assert find_run(topics, "20261125-214000-3fa2") == run and find_run(topics, other) == other


def test_six_runs_of_one_config_are_told_apart_by_algorithm_and_sort_by_time(tmp_path):
    names = [run_name("s1", a, rid) for rid, a in (("20261125-214000-3fa2", "ddl"), ("20261125-214002-0001", "ddl"),
                                                   ("20261125-214001-ffff", "scadles"))]
    assert sorted(names) == ["s1-ddl-20261125-214000-3fa2", "s1-ddl-20261125-214002-0001",
                             "s1-scadles-20261125-214001-ffff"]


def test_a_sim_run_directory_is_named_name_algorithm_run_id(tmp_path):
    path, summary = run_config(validate_dict(TINY), "sim", out=tmp_path, progress=False)
    assert re.fullmatch(rf"tiny-ddl-{DEFAULT_ID}", path.name), path.name
    assert summary["run"] == path.name


def test_compare_runs_are_named_by_algorithm_and_the_compare_id(tmp_path):
    from edgestream.comparisons import parse_variants, run_compare
    from edgestream.demo import VARIANTS

    cfg = validate_dict({**TINY, "stop": {"target_accuracy": 0.95, "max_time_s": 1.0}})
    folder, summaries, _ = run_compare(cfg, parse_variants(VARIANTS), out=tmp_path, run_id="c1", progress=False)
    # the demo's variants: no truncated overrides in the names
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["tiny-ddl-c1", "tiny-scadles-c1"]
    folder, summaries, _ = run_compare(cfg, parse_variants("ddl,ddl[algorithm.buffer=truncate]"), out=tmp_path,
                                       run_id="c2", progress=False)
    assert [Path(s["run_dir"]).name for s in summaries.values()] == ["tiny-ddl-c2-v1", "tiny-ddl-c2-v2"]
    assert "tiny-ddl-c2-v2" in (folder / "compare.md").read_text()


def test_resume_reads_the_run_id_after_name_and_algorithm(tmp_path):
    from edgestream.launch.orchestrator import LaunchError, resume_target

    cfg = validate_dict({**TINY, "runtime": {"engine": "local"}})
    run = tmp_path / "tiny-ddl-20261125-214000-3fa2"
    run.mkdir()
    (run / "config.yaml").write_text(cfg.to_yaml())
    assert resume_target(run, RunPlan.resolve(cfg)) == (tmp_path, "20261125-214000-3fa2")
    old = tmp_path / "tiny-20261125-214000-3fa2"
    old.mkdir()
    (old / "config.yaml").write_text(cfg.to_yaml())
    with pytest.raises(LaunchError, match=r"not a run of 'tiny' with algorithm 'ddl' \(expected tiny-ddl-<run id>\)"):
        resume_target(old, RunPlan.resolve(cfg))


def _summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


# ---------------------------------------------------------------- interrupted runs

def test_an_interrupted_sim_run_writes_a_summary_of_what_it_reached(tmp_path, monkeypatch):
    """Ctrl-C (KeyboardInterrupt) mid-run: the summary says so, with the steps and time reached; the events stay."""
    from edgestream.runner.rundir import RunInterrupted
    from edgestream.sim import engine as sim_engine

    calls = {"n": 0}
    real = sim_engine.SimEngine._on_line

    def interrupt_later(self, line):
        calls["n"] += 1
        if calls["n"] == 60:
            raise KeyboardInterrupt
        return real(self, line)

    monkeypatch.setattr(sim_engine.SimEngine, "_on_line", interrupt_later)
    cfg = validate_dict({**TINY, "stop": {"target_accuracy": 0.99, "max_time_s": 60.0}})
    with pytest.raises(RunInterrupted) as caught:
        run_config(cfg, "sim", out=tmp_path, run_id="i1", progress=False)
    assert isinstance(caught.value, KeyboardInterrupt) and caught.value.signum == 2
    path = tmp_path / "tiny-ddl-i1"
    summary = _summary(path)
    assert summary == caught.value.summary and caught.value.path == path
    assert summary["interrupted"] is True and summary["stop_reason"] == "interrupted"
    assert summary["interrupted_by"] == "SIGINT"
    events = [json.loads(x) for x in (path / "events.jsonl").read_text().splitlines()]
    steps = [e for e in events if e["kind"] == "step"]
    assert len(steps) == summary["device_steps_total"] >= 59 - 2  # every line written before the interrupt
    assert 0 < summary["steps"] and 0 < summary["virtual_time_s"] < 60.0
    assert summary["target"] == {"metric": "accuracy", "value": 0.99}


def test_sigterm_to_a_sim_run_writes_an_interrupted_summary_and_exits_143(tmp_path):
    """A real `edgestream run --engine sim` process, its output to pipes: plain progress lines on stderr, then
    SIGTERM after the first one: exit 143, summary.json marked interrupted, the human summary on stdout."""
    import os
    import signal
    import subprocess
    import sys

    import yaml

    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({**TINY, "stop": {"target_accuracy": None, "max_time_s": 100000.0}}))
    env = {**os.environ, "EDGESTREAM_PROGRESS_EVERY_S": "0",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "edgestream.cli", "run", str(cfg), "--engine", "sim", "--out",
                             str(tmp_path / "runs"), "--run-id", "t1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        line = proc.stderr.readline()
        while line and not re.search(r", steps [1-9]", line):  # until a line after the first steps
            assert re.match(r"tiny \(ddl, 2 devices\): virtual \d+\.\d/100000 s, steps \d+, accuracy (\d\.\d{3}|-)$",
                            line.strip()), line
            line = proc.stderr.readline()
        assert line, "no progress line with steps before the run ended"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err[-2000:]
    path = tmp_path / "runs" / "tiny-ddl-t1"
    summary = _summary(path)
    assert summary["interrupted"] is True and summary["interrupted_by"] == "SIGTERM"
    assert summary["stop_reason"] == "interrupted" and summary["steps"] > 0
    assert err.strip().splitlines()[-1] == (f"error: interrupted by SIGTERM: run directory {path} (summary.json "
                                            "marks it interrupted)")
    assert out.splitlines()[0] == f"run {path}" and "stopped: interrupted (SIGTERM)" in out
    assert "Traceback" not in err


# ---------------------------------------------------------------- the end of a run, on the terminal

def test_a_finished_run_ends_with_a_short_human_summary_or_json(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from edgestream.cli import app

    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump({**TINY, "stop": {"target_accuracy": 0.2, "max_time_s": 3.0}}))
    res = CliRunner().invoke(app, ["run", str(cfg), "--engine", "sim", "--out", str(tmp_path), "--run-id", "h",
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    path = tmp_path / "tiny-ddl-h"
    summary = _summary(path)
    lines = res.stdout.strip().splitlines()
    assert lines[0] == f"run {path}" and len(lines) == 5 and "{" not in res.stdout
    assert lines[1] == "  ddl on 2 devices, engine sim; stopped: target_accuracy"
    assert lines[2] == f"  steps {summary['steps']}, time {summary['virtual_time_s']:.1f} virtual s"
    assert lines[3] == f"  final accuracy {summary['final_accuracy']:.4g}"
    assert lines[4] == f"  target accuracy 0.2: reached at {summary['time_to_target_s']:.1f} s"
    res = CliRunner().invoke(app, ["run", str(cfg), "--engine", "sim", "--out", str(tmp_path), "--run-id", "j",
                                   "--quiet", "--json"])
    printed = json.loads(res.stdout.strip().splitlines()[-1])
    assert printed["stop_reason"] == "target_accuracy" and "run_time_s" not in printed


@pytest.mark.parametrize("summary, text", [
    ({"time_to_target_s": 12.34, "target": {"metric": "accuracy", "value": 0.9}}, "reached at 12.3 s"),
    ({"time_to_target_s": None, "final_accuracy": 0.83, "target": {"metric": "accuracy", "value": 0.9}},
     "not reached (final 0.83 < 0.9)"),
    ({"time_to_target_s": None, "final_metrics": {"rmse": 0.41}, "target": {"metric": "rmse", "value": 0.2}},
     "not reached (final 0.41 > 0.2)"),
    ({"time_to_target_s": None, "final_accuracy": 0.5, "target": None}, "no target"),
    ({"time_to_target_s": None, "target": {"metric": "accuracy", "value": 0.9}},
     "not reached (no evaluation of accuracy)"),
])
def test_target_text(summary, text):
    from edgestream.runner.report import target_text

    assert target_text(summary) == text


# ---------------------------------------------------------------- compare RUN_DIR RUN_DIR...

def test_compare_two_finished_runs_without_running_them(tmp_path):
    from typer.testing import CliRunner

    from edgestream.cli import app

    a, _ = run_config(validate_dict({**TINY, "stop": {"target_accuracy": 0.2, "max_time_s": 2.0}}), "sim",
                      out=tmp_path, run_id="a", progress=False)
    b, _ = run_config(validate_dict({**TINY, "algorithm": {"name": "scadles"},
                                     "stop": {"target_accuracy": 0.99, "max_time_s": 2.0}}), "sim",
                      out=tmp_path, run_id="b", progress=False)
    before = sorted(p.name for p in tmp_path.iterdir())
    res = CliRunner().invoke(app, ["compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--run-id", "c"])
    assert res.exit_code == 0, res.output
    folder = tmp_path / "cmp" / "tiny-compare-c"
    assert f"compare folder: {folder} (table: {folder / 'compare.md'}, plot: {folder / 'compare.png'})" in res.stderr
    assert (folder / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sa, sb = _summary(a), _summary(b)
    rows = {line.split(" | ")[0].strip("| "): line for line in res.stdout.splitlines() if line.startswith("| tiny")}
    assert set(rows) == {"tiny-ddl-a", "tiny-scadles-b"}
    assert f"| reached at {sa['time_to_target_s']:.1f} s |" in rows["tiny-ddl-a"]
    assert f"| not reached (final {sb['final_accuracy']:.3g} < 0.99) |" in rows["tiny-scadles-b"]
    assert res.stdout in (folder / "compare.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "cmp"])  # nothing ran: no new run
    assert [p.name for p in (tmp_path / "cmp").iterdir()] == ["tiny-compare-c"]
    assert sorted(p.name for p in folder.iterdir()) == ["compare.md", "compare.png"]

    # what cannot be compared: one line naming the input
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(app, ["compare", str(a), str(tmp_path / "empty")])
    assert res.exit_code == 2 and res.output.strip().startswith(f"RUN_DIR '{tmp_path / 'empty'}': no summary.json")
    reg = json.loads((b / "summary.json").read_text())
    (tmp_path / "reg").mkdir()
    (tmp_path / "reg" / "summary.json").write_text(json.dumps({**reg, "task": "regression"}))
    res = CliRunner().invoke(app, ["compare", str(a), str(tmp_path / "reg")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "runs of different tasks cannot be compared" in res.output and "reg (regression)" in res.output
    res = CliRunner().invoke(app, ["compare", str(a), str(b), "--algorithms", "ddl"])
    assert res.exit_code == 2 and res.output.strip().startswith("--algorithms: runs a CONFIG")


# ---------------------------------------------------------------- progress when the output is not a terminal

def test_plain_progress_lines_when_not_a_terminal():
    import io

    from rich.console import Console

    from edgestream.runner.progress import RunProgress

    buf = io.StringIO()
    p = RunProgress("tiny-ddl-x", 60.0, console=Console(file=buf), every_s=0)
    assert p.active
    p.update(1.0, 10)
    p.update(2.5, 20, 0.8123)
    p.close()
    p.update(3.0, 30)  # closed: nothing more
    assert buf.getvalue().splitlines() == ["tiny-ddl-x: virtual 1.0/60 s, steps 10, accuracy -",
                                           "tiny-ddl-x: virtual 2.5/60 s, steps 20, accuracy 0.812"]
    quiet = io.StringIO()
    p = RunProgress("x", 60.0, enabled=False, console=Console(file=quiet), every_s=0)
    p.update(1.0, 1)
    assert not p.active and quiet.getvalue() == ""
    spaced = io.StringIO()
    p = RunProgress("x", None, console=Console(file=spaced), every_s=3600)
    for i in range(50):
        p.update(float(i), i)
    assert spaced.getvalue().splitlines() == ["x: virtual 0.0 s, steps 0, accuracy -"]  # one per interval
