"""`edgestream run --engine local`: the orchestrator against a real broker (EDGESTREAM_BOOTSTRAP or the
session broker), with real `edgestream produce` and `edgestream train` child processes (gloo, CPU).
Nothing is mocked; timeouts below are hang guards only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from support.runs import (
    CLI,
    HANG_S,
    assert_no_child_left,
    finish,
    start_run,
    step_lines,
    wait_training,
)
from support.runs import write_truncating_cfg as write_cfg  # the local run, buffers that truncate

from edgestream.runner.rundir import merged_events, record_session


def test_local_run_writes_the_run_directory(bootstrap, run_prefix, tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=8)
    code, out, err = finish(start_run(cfg, bootstrap, tmp_path / "runs", "--json"))
    assert code == 0, err
    run_dir = tmp_path / "runs" / f"{run_prefix}-ddl-r1"
    assert f"run directory: {run_dir}" in err
    printed = json.loads(out.strip().splitlines()[-1])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["engine"] == "local" and summary["stop_reason"] == "max_steps" == printed["stop_reason"]
    assert summary["device_steps"] == {"0": 8, "1": 8} and summary["steps"] == 8 == printed["steps"]
    assert summary["device_steps_total"] == 16
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    steps = [e for e in events if e["kind"] == "step"]
    assert len(steps) == 16 and {e["device"] for e in steps} == {0, 1}
    assert summary["samples_trained"] == sum(e["batch"] for e in steps) == 16 * 16
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    assert any(e["kind"] == "eval" and 0 <= e["accuracy"] <= 1 for e in events)
    assert summary["final_accuracy"] == pytest.approx([e for e in events if e["kind"] == "eval"][-1]["accuracy"], abs=1e-6)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["name"] == run_prefix
    for png in ("accuracy.png", "buffer.png"):
        assert (run_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary["producer"]["delivered"] > 0 and summary["producer"]["failed"] == 0
    assert_no_child_left(run_dir)
    # the same run id again, in another folder: its topics exist, so the run is refused before it starts
    code, out, err = finish(start_run(cfg, bootstrap, tmp_path / "elsewhere"))
    assert code == 2 and out == "" and f"run {run_prefix}-ddl-r1 already has topics on {bootstrap}" in err
    assert not (tmp_path / "elsewhere").exists()


def test_a_killed_trainer_stops_the_run_and_is_named(bootstrap, run_prefix, tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=100000)
    proc = start_run(cfg, bootstrap, tmp_path / "runs", "--quiet")
    run_dir = tmp_path / "runs" / f"{run_prefix}-ddl-r1"
    pids = wait_training(run_dir, proc)
    os.kill(pids["trainers"]["1"], signal.SIGKILL)
    code, out, err = finish(proc)
    assert code == 1 and out == ""
    first = next(line for line in err.splitlines() if line.startswith("error:"))
    assert "device 1 (trainer rank 1) killed by SIGKILL" in first and "stopped" in first
    assert "ranks/1.out" in err or "ranks/1.log" in err  # the tail of its log follows
    assert_no_child_left(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["engine"] == "local" and summary["stop_reason"].startswith("device 1")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_orchestrator_leaves_no_child(bootstrap, run_prefix, tmp_path, sig):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=100000, every_steps=5)
    # its own session, so that SIGINT to its process group is what a terminal's Ctrl-C sends
    proc = start_run(cfg, bootstrap, tmp_path / "runs", "--quiet", new_session=True)
    run_dir = tmp_path / "runs" / f"{run_prefix}-ddl-r1"
    wait_training(run_dir, proc)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 128 + sig, err
    assert f"interrupted by {signal.Signals(sig).name}" in err and "--resume" in err
    assert_no_child_left(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["engine"] == "local" and summary["interrupted"] is True and summary["stop_reason"] == "interrupted"
    assert summary["interrupted_by"] == signal.Signals(sig).name and summary["steps"] > 0  # what it reached
    assert out.splitlines()[0] == f"run {run_dir}" and f"stopped: interrupted ({signal.Signals(sig).name})" in out
    if sig == signal.SIGTERM:
        resume_after_signal(cfg, bootstrap, run_dir)


def resume_after_signal(cfg: Path, bootstrap: str, run_dir: Path) -> None:
    """`--resume RUN_DIR` continues the interrupted run to a new max_steps: the same run directory,
    the rank files grow, events.jsonl holds every device's steps in order, up to the new stop."""
    before = {r: len(step_lines(run_dir / "ranks" / f"{r}.jsonl")) for r in (0, 1)}
    last = max(e["step"] for r in (0, 1) for e in step_lines(run_dir / "ranks" / f"{r}.jsonl"))
    target = last + 6
    proc = subprocess.Popen([*CLI, "run", str(cfg), "--resume", str(run_dir), "--bootstrap", bootstrap, "--quiet",
                             "--json", "--set", f"stop.max_steps={target}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    code, out, err = finish(proc)
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed"] is True and summary["stop_reason"] == "max_steps" == json.loads(out)["stop_reason"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    for r in (0, 1):
        assert len(step_lines(run_dir / "ranks" / f"{r}.jsonl")) > before[r]  # appended, not rewritten
        steps = [e["step"] for e in events if e["kind"] == "step" and e["device"] == r]
        assert steps == sorted(set(steps)) and steps[-1] == target - 1 and steps[0] == 0
    assert summary["device_steps_total"] == sum(1 for e in events if e["kind"] == "step")
    assert_no_child_left(run_dir)


def test_bad_runs_and_resumes_are_one_line(tmp_path, run_prefix):
    """Refused before any broker is contacted: exit 2, one line naming the problem."""
    from typer.testing import CliRunner

    from edgestream.cli import app

    def one_line(*args: str) -> str:
        res = CliRunner().invoke(app, list(args))
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.exit_code == 2 and len(lines) == 1, res.output
        return lines[0]

    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=5)
    existing = tmp_path / "runs" / f"{run_prefix}-ddl-r1"
    existing.mkdir(parents=True)
    (existing / "events.jsonl").write_text("")
    assert one_line("run", str(cfg), "--engine", "local", "--out", str(tmp_path / "runs"), "--run-id", "r1",
                    "--bootstrap", "127.0.0.1:1").startswith(f"error: run directory {existing} exists; continue it "
                                                             "with --resume")
    assert one_line("run", "--resume", str(tmp_path / "nope")) == f"--resume {tmp_path / 'nope'}: not a run " \
                                                                    "directory (no config.yaml)"
    (existing / "config.yaml").write_text(cfg.read_text())
    assert "checkpoint.every_steps is null" in one_line("run", "--resume", str(existing))
    assert "the config differs from the run's config.yaml at model.name" in one_line(
        "run", str(cfg), "--resume", str(existing), "--set", "model.name=cnn-small")
    assert "only local runs" in one_line("run", str(cfg), "--resume", str(existing), "--engine", "sim")


def test_sigkill_of_the_orchestrator_takes_the_children_along(bootstrap, run_prefix, tmp_path):
    """The one signal no handler sees: the children die with their parent (PR_SET_PDEATHSIG)."""
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=100000)
    proc = start_run(cfg, bootstrap, tmp_path / "runs", "--quiet")
    run_dir = tmp_path / "runs" / f"{run_prefix}-ddl-r1"
    wait_training(run_dir, proc, steps=1)
    proc.kill()
    proc.communicate(timeout=HANG_S)
    assert_no_child_left(run_dir)


def test_an_unreachable_bootstrap_is_one_line_naming_it(run_prefix, tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=5)
    code, out, err = finish(start_run(cfg, "127.0.0.1:1", tmp_path / "runs"))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("error: no Kafka broker answered at 127.0.0.1:1")
    assert not (tmp_path / "runs").exists()


def test_merged_events_stitch_a_resumed_session(tmp_path):
    """A resumed trainer restarts from its checkpoint (step 2, time 2.9 here): the lines its killed
    session wrote after that checkpoint were rolled back and are left out; a torn last line is skipped."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()

    def lines(*recs: dict) -> str:
        return "".join(json.dumps(r) + "\n" for r in recs)

    (ranks / "0.jsonl").write_text(lines(*({"kind": "step", "time": t, "device": 0, "step": s}
                                           for s, t in ((0, 1.0), (1, 2.0), (2, 3.0))),
                                         {"kind": "eval", "time": 3.1, "step": 3, "accuracy": 0.5},
                                         {"kind": "step", "time": 4.0, "device": 0, "step": 3}) + '{"kind": "st')
    (ranks / "1.jsonl").write_text(lines({"kind": "step", "time": 1.5, "device": 1, "step": 0}))
    assert record_session(ranks, 2) == {0: (ranks / "0.jsonl").stat().st_size, 1: (ranks / "1.jsonl").stat().st_size}
    with open(ranks / "0.jsonl", "a") as f:
        f.write(lines(*({"kind": "step", "time": t, "device": 0, "step": s} for s, t in ((2, 2.9), (3, 3.9))),
                      {"kind": "eval", "time": 4.0, "step": 4, "accuracy": 0.6}))
    events = merged_events(ranks)
    assert [(e["kind"], e.get("device"), e["time"]) for e in events] == [
        ("step", 0, 1.0), ("step", 1, 1.5), ("step", 0, 2.0), ("step", 0, 2.9), ("step", 0, 3.9), ("eval", None, 4.0)]


def test_secrets_reach_the_children_only_through_a_pipe(tmp_path, run_prefix, monkeypatch):
    """config.yaml shows secrets as ***, and it is what the children read: the secret values travel on a
    pipe whose descriptor number is in EDGESTREAM_KAFKA_SECRETS_FD (never on disk, never in an
    environment), which the child's config loading reads, closes and puts back in place of the masks; a
    resume from the masked config.yaml alone is refused (the secret is not there to give them)."""
    import json
    import os

    from edgestream.config import load_config
    from edgestream.launch import LaunchError, LocalRun
    from edgestream.launch.command import SECRET_FD_ENV, load_or_exit
    from edgestream.launch.procs import filled_pipe

    raw = yaml.safe_load(write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=5, every_steps=5).read_text())
    raw["runtime"] = {"kafka_client": {"sasl.username": "u", "sasl.password": "s3cret"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    cfg = load_config(tmp_path / "c.yaml")
    run = LocalRun(cfg, out=tmp_path / "runs", run_id="r1", bootstrap="127.0.0.1:1")
    run.path.mkdir(parents=True)
    child = run._child_config()
    assert child == run.path / "config.yaml"
    assert not any(b"s3cret" in f.read_bytes() for f in run.path.rglob("*") if f.is_file())
    assert json.loads(run._secrets) == {"sasl.password": "s3cret"}
    monkeypatch.setenv(SECRET_FD_ENV, str(filled_pipe(run._secrets)))  # what ChildSet.start hands a child
    assert load_or_exit(child).runtime.kafka_client["sasl.password"] == "s3cret"  # what a child sees
    assert SECRET_FD_ENV not in os.environ  # and nothing it starts inherits them
    masked = load_config(run.path / "config.yaml")
    with pytest.raises(LaunchError, match=r"sasl.password: the value is \*\*\*") as err:
        LocalRun(masked, resume=run.path)
    assert err.value.code == 2

