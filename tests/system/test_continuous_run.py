"""Continuous training for real (issue 33 item 4): `stop: {}` trains until interrupted. A SIGTERM to the
orchestrator ends every trainer at one step boundary with its checkpoint (the timer's: checkpoint.every_s,
the ranks agree on its steps), exit 143; `edgestream status` shows each device's lag meanwhile; `--resume`
continues from the checkpointed offsets and every sample of every device is trained exactly once across
both sessions (the step lines' sequence numbers).

Real broker (the session fixture), real `edgestream run --engine local` orchestrators with real producer and
trainer children (digits, mlp, 2 devices, ddl over gloo). Timeouts are hang guards only."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from factories import write_cfg
from support.faults import _trained_once
from support.runs import assert_no_child_left, finish, load_ckpt, pids_of, resume, start, step_lines, wait_steps

from edgestream.kafka.status import run_status


def _checkpoint_steps(log: Path) -> list[int]:
    return [int(m) for m in re.findall(r"checkpoint: step (\d+)", log.read_text())]


@pytest.mark.timeout(900)
def test_a_continuous_run_stops_on_sigterm_with_a_checkpoint_and_resumes_exactly_once(bootstrap, run_prefix,
                                                                                       tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=1, stop={}, checkpoint={"every_s": 1.0})
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    proc = start(cfg, bootstrap, out=out)
    try:
        wait_steps(run_dir, proc, 2, 10)
        # the timer's checkpoints (every second): both ranks at the same steps
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_checkpoint_steps(run_dir / "ranks" / "0.log")) < 2:
            time.sleep(0.2)
        # status: the broker's view of the running run, per device
        st = run_status(bootstrap, run_dir.name, interval_s=0.5)
        assert [r["device"] for r in st["devices"]] == [0, 1]
        for r in st["devices"]:
            assert r["produced"] > 0 and r["acknowledged"] is not None and r["lag"] >= 0
            assert r["lag"] == r["produced"] - r["acknowledged"]
        os.kill(proc.pid, signal.SIGTERM)
        code, stdout, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 143, err
    assert "interrupted by SIGTERM" in err and f"--resume {run_dir}" in err
    assert_no_child_left(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["interrupted_by"] == "SIGTERM" and summary["target"] is None
    before = {r: step_lines(run_dir / "ranks" / f"{r}.jsonl") for r in range(2)}
    ck = {r: load_ckpt(run_dir / "checkpoints" / f"rank{r}.pt") for r in range(2)}
    timed = {r: _checkpoint_steps(run_dir / "ranks" / f"{r}.log") for r in range(2)}
    assert timed[0] == timed[1] and len(timed[0]) >= 2, timed  # the timer's (>= 2) and the stop's, agreed
    assert len(set(timed[0])) == len(timed[0])  # one checkpoint per step (the stop's is not written twice)
    for r in range(2):
        rank_summary = json.loads((run_dir / "ranks" / f"{r}.summary.json").read_text())
        assert rank_summary["stop_reason"] == "signal" and rank_summary["signal"] == "SIGTERM"
        # the stop's checkpoint is at the last step each rank trained: a step boundary, nothing to roll back
        assert ck[r]["step"] == len(before[r]) == before[r][-1]["step"] + 1 == timed[r][-1]
        assert ck[r]["stream"]  # the offsets it continues from
    last = ck[0]["step"]
    assert ck[1]["step"] == last and last >= 10

    target = last + 8
    # max_steps only (the schema's target_accuracy would otherwise end it first, once the run learned enough)
    code, stdout, err = resume(cfg, bootstrap, run_dir, f"stop.max_steps={target}", "stop.target_accuracy=null")
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed"] is True and summary["stop_reason"] == "max_steps"
    for r in range(2):
        lines = step_lines(run_dir / "ranks" / f"{r}.jsonl")
        assert lines[:len(before[r])] == before[r] and lines[len(before[r])]["step"] == last  # continued there
        assert _trained_once(lines, target) == target * 16
        assert load_ckpt(run_dir / "checkpoints" / f"rank{r}.pt")["step"] == target
    assert_no_child_left(run_dir)


SSP = {"name": "ssp", "params": {"s": 3}, "batch": {"policy": "fixed", "size": 16}, "buffer": "persist"}


@pytest.mark.timeout(900)
def test_a_continuous_parameter_server_run_stops_on_sigterm_and_resumes_exactly_once(bootstrap, run_prefix, tmp_path):
    """PS family: each worker checkpoints on its own clock (no agreement needed) and at its signal stop;
    the parameter server keeps its own checkpoint; --resume trains every sample exactly once."""
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=1, stop={}, checkpoint={"every_s": 1.0}, algorithm=SSP)
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ssp-r1"
    proc = start(cfg, bootstrap, out=out)
    try:
        wait_steps(run_dir, proc, 2, 10)
        os.kill(proc.pid, signal.SIGTERM)
        code, stdout, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 143 and "interrupted by SIGTERM" in err, err
    assert_no_child_left(run_dir)
    before = {r: step_lines(run_dir / "ranks" / f"{r}.jsonl") for r in range(2)}
    ck = {r: load_ckpt(run_dir / "checkpoints" / f"rank{r}.pt")["step"] for r in range(2)}
    assert (run_dir / "checkpoints" / "ps.pt").is_file()
    for r in range(2):
        assert ck[r] == len(before[r])  # each worker's stop checkpoint covers its last step
    code, stdout, err = resume(cfg, bootstrap, run_dir, "stop.max_steps=" + str(max(ck.values()) + 6))
    assert code == 0, err
    target = max(ck.values()) + 6
    for r in range(2):
        lines = step_lines(run_dir / "ranks" / f"{r}.jsonl")
        assert lines[len(before[r])]["step"] == ck[r]
        _trained_once(lines, len(lines))  # every own sample once, in order, across both sessions
        assert len(lines) <= target
    assert_no_child_left(run_dir)


@pytest.mark.timeout(600)
def test_sigterm_to_one_trainer_stops_the_group_at_one_step_with_checkpoints(bootstrap, run_prefix, tmp_path):
    """A signal to one trainer (a container runtime stopping its pod): it finishes its step, the group stops
    after one agreed step, every rank checkpoints there; the signalled trainer exits 143 with its summary, which
    the orchestrator does not count as a failure; the run keeps what it needs to resume."""
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=1, stop={}, checkpoint={"every_steps": 1000})
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    proc = start(cfg, bootstrap, out=out)
    try:
        wait_steps(run_dir, proc, 2, 5)
        os.kill(pids_of(run_dir)["trainers"]["1"], signal.SIGTERM)
        code, stdout, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "signal"
    ranks = {r: json.loads((run_dir / "ranks" / f"{r}.summary.json").read_text()) for r in range(2)}
    assert ranks[1]["signal"] == "SIGTERM" and "signal" not in ranks[0]  # rank 0 stopped on the group's vote
    assert ranks[1]["stop_reason"] == "signal"
    assert ranks[0]["stop_reason"] == "finished"  # rank 0's own rule did not fire and it was never signalled
    steps = {r: load_ckpt(run_dir / "checkpoints" / f"rank{r}.pt")["step"] for r in range(2)}
    assert steps[0] == steps[1] == ranks[0]["steps"] == ranks[1]["steps"] == len(step_lines(run_dir / "ranks" / "0.jsonl"))
    assert_no_child_left(run_dir)
