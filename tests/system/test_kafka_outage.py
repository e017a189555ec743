"""A broker gone for minutes (issue 32, item 1, the trainers' side): the trainers wait for Kafka for
runtime.kafka_outage_s, say so (their log, a "wait" record, the run's progress line), and continue without
loss or duplicates; past the budget the run ends with one line naming Kafka, the budget and how to resume.

Real brokers: each test starts its own `LocalBroker` in tmp_path, stops it mid-run and starts it again on
the same port and data directory. Real `edgestream run --engine local` orchestrators with real producer and
trainer children (digits, mlp, 2 devices, ddl over gloo). Timeouts are hang guards only; the assertions are
on sequence numbers, step counts, records and the exact lines users see.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from factories import write_cfg
from support.faults import _trained_once
from support.runs import CLI, error_lines, finish, load_ckpt, resume, start, step_lines, wait_steps

from edgestream.kafka import LocalBroker
from edgestream.launch.outage import KafkaWaits, resume_hint
from edgestream.launch.view import LiveState

OUTAGE_S = 90.0  # how long test (a) keeps the broker away


def _records(path: Path, kind: str) -> list[dict]:
    return [r for r in (json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()) if r.get("kind") == kind]


def _stop_broker_after(run_dir: Path, proc: subprocess.Popen, broker: LocalBroker, steps: int) -> float:
    wait_steps(run_dir, proc, 2, steps)
    t0 = time.monotonic()
    broker.stop()
    return t0


# ---------------------------------------------------------------- what the run shows (no processes)


def test_the_status_line_says_what_the_devices_wait_for_and_since_when():
    state = LiveState("r", 2)
    since = time.mktime((2026, 1, 2, 10, 11, 12, 0, 0, -1))
    start_ = {"kind": "wait", "wait_for": "kafka", "state": "start", "time": 3.5, "device": 1, "at_step": 31,
              "bootstrap": "10.0.0.5:9092", "what": "reading r.dev.1", "since": since, "budget_s": 300.0}
    state.add([(1, {"kind": "step", "device": 1, "step": 30, "batch": 16})])
    state.add([(1, start_)])
    assert state.devices[1].step == 30  # a wait record is no step line
    assert state.kafka.text(now=since + 42) == ("waiting for Kafka at 10.0.0.5:9092 since 10:11:12 (42 s of the "
                                                "300 s runtime.kafka_outage_s budget; device 1)")
    assert "waiting for Kafka at 10.0.0.5:9092 since 10:11:12 (" in state.line()
    assert "waiting for Kafka at 10.0.0.5:9092" in state.headline()
    state.add([(0, {**start_, "device": 0, "since": since + 5})])
    assert state.kafka.text(now=since + 42).endswith("(42 s of the 300 s runtime.kafka_outage_s budget; devices 0, 1)")
    state.add([(1, {**start_, "state": "end", "outage_s": 90.2}), (0, {**start_, "device": 0, "state": "end"})])
    assert state.kafka.text() is None and "waiting for Kafka" not in state.line()
    waits = KafkaWaits()
    waits.add(0, {**start_, "wait_for": "something else"})
    assert waits.text() is None


def test_how_to_go_on_depends_on_the_checkpoints(tmp_path):
    assert resume_hint(tmp_path, 2, None) == ("; the run cannot be resumed: checkpoint.every_steps is null, so it "
                                              "saved no checkpoint (set it to make a run resumable)")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "rank0.pt").write_bytes(b"x")
    assert resume_hint(tmp_path, 2, 5) == ("; the run cannot be resumed: it stopped before its first checkpoint "
                                           "(checkpoint.every_steps 5)")
    (tmp_path / "checkpoints" / "rank1.pt").write_bytes(b"x")
    assert resume_hint(tmp_path, 2, 5) == f"; continue with --resume {tmp_path} once Kafka answers"


# ---------------------------------------------------------------- (a) an outage within the budget


@pytest.mark.timeout(1200)
def test_a_90_s_broker_outage_is_waited_out_and_every_sample_is_trained_once(broker, run_prefix, tmp_path):
    bs = broker.bootstrap
    steps = 60
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=steps, every_steps=10,
                    stop={"target_accuracy": None, "max_time_s": 1200, "max_steps": steps})
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    # not --quiet: the plain progress line (every 5 s on a pipe) is part of what is checked
    proc = subprocess.Popen([*CLI, "run", str(cfg), "--engine", "local", "--bootstrap", bs, "--out", str(out),
                             "--run-id", "r1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        t0 = _stop_broker_after(run_dir, proc, broker, 20)
        while time.monotonic() - t0 < OUTAGE_S:
            assert proc.poll() is None, f"the run ended during the outage: {proc.communicate()[1]}"
            time.sleep(1.0)
        broker.start()  # same data directory, same port
        outage_s = time.monotonic() - t0
        code, _, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 0, err
    assert not error_lines(err), err
    trained = {r: _trained_once(step_lines(run_dir / "ranks" / f"{r}.jsonl"), steps) for r in range(2)}
    assert all(n == steps * 16 for n in trained.values()), trained  # fixed batches of 16, every one whole
    # the ranks said that they waited, for what, since when and with which budget, and when it ended
    waited = {}
    for r in range(2):
        recs = [w for w in _records(run_dir / "ranks" / f"{r}.jsonl", "wait") if w["wait_for"] == "kafka"]
        if not recs:
            continue
        # each wait a start and an end (a blip while the broker settles may add a short one)
        assert [w["state"] for w in recs] == ["start", "end"] * (len(recs) // 2) and recs, recs
        assert all(w["bootstrap"] == bs and w["budget_s"] == 300.0 and w["device"] == r for w in recs)
        for a, b in zip(recs[::2], recs[1::2], strict=True):
            assert a["since"] == b["since"] and 0 < a["at_step"] <= b["at_step"] < steps
        waited[r] = max(w["outage_s"] for w in recs[1::2])
        log = (run_dir / "ranks" / f"{r}.log").read_text()
        assert f"waiting for Kafka at {bs} since " in log and "giving up after 300 s, runtime.kafka_outage_s" in log
        assert re.search(rf"Kafka at {re.escape(bs)} answers again after \d+\.\d s", log)
    assert waited, "no rank recorded its wait for Kafka"
    assert f"waiting for Kafka at {bs} since " in err and "s of the 300 s runtime.kafka_outage_s budget; device" in err
    # the merged events keep the waits, and count no wait as a step
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["device_steps_total"] == 2 * steps and summary["samples_trained"] == 2 * steps * 16
    assert any(e.get("kind") == "wait" for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines()))
    print(f"outage {outage_s:.0f} s; waits recorded {waited}; trained {trained}")


# ---------------------------------------------------------------- (b) an outage past the budget


@pytest.mark.timeout(1200)
def test_an_outage_past_the_budget_ends_in_one_line_and_the_run_resumes(broker, run_prefix, tmp_path):
    bs = broker.bootstrap
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=40, every_steps=5,
                    stop={"target_accuracy": None, "max_time_s": 1200, "max_steps": 40})
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    proc = start(cfg, bs, "--set", "runtime.kafka_outage_s=15", out=out)
    try:
        _stop_broker_after(run_dir, proc, broker, 12)
        code, _, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = error_lines(err)
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    # the first process to give up is named with its own line, then what was stopped and how to go on. A trainer
    # names the call it gave up in (a fetch or its end offset); under load the producer's budget can run out
    # first (the trainers still train on what they fetched before the outage): its line says what it did not send
    how_to_go_on = (rf"continue with --resume {re.escape(str(run_dir))} once Kafka answers; "
                    rf"run directory {re.escape(str(run_dir))}")
    m = re.fullmatch(rf"error: device (\d): no answer from Kafka at {re.escape(bs)} for 15 s \(runtime\.kafka_outage_s\); "
                     rf"gave up at step (\d+) while reading (?:the end offset of )?{re.escape(run_dir.name)}\.dev\.\1; "
                     rf"stopped (.+); {how_to_go_on}", line)
    producer = re.fullmatch(rf"error: producer: no answer from Kafka at {re.escape(bs)} for 15 s "
                            r"\(runtime\.kafka_outage_s\) while streaming; stopped streaming; [\d,]+ of [\d,]+ samples "
                            r"sent were not acknowledged \(the same --run-id continues after the last sample in each "
                            rf"topic\); stopped trainer 0, trainer 1; {how_to_go_on}", line)
    assert m or producer, line
    summary = json.loads((run_dir / "summary.json").read_text())  # the line up to what was stopped
    assert summary["stop_reason"] == line[len("error: "):].split("; stopped trainer" if producer else "; stopped ")[0]
    if m:
        rank, at_step = int(m.group(1)), int(m.group(2))
        assert at_step >= 12 and "producer" in m.group(3)
        assert (run_dir / "ranks" / f"{rank}.out").read_text().strip().splitlines()[-1] == line.split("; stopped ")[0]
        gave_up = [w for w in _records(run_dir / "ranks" / f"{rank}.jsonl", "wait") if w["state"] == "gave_up"]
        assert len(gave_up) == 1 and gave_up[0]["budget_s"] == 15.0 and gave_up[0]["at_step"] == at_step
    else:  # the trainers were stopped where they were: the last step either trainer wrote (12 lines each at least)
        rank, at_step = "producer", max(e["step"] for r in range(2) for e in step_lines(run_dir / "ranks" / f"{r}.jsonl"))
        assert at_step >= 11
    before = {r: step_lines(run_dir / "ranks" / f"{r}.jsonl") for r in range(2)}
    # Kafka back: the run continues from its checkpoints and trains every sample exactly once
    broker.start()
    code, _, err = resume(cfg, bs, run_dir)
    assert code == 0, err
    for r in range(2):
        lines_r = step_lines(run_dir / "ranks" / f"{r}.jsonl")
        resumed_at = lines_r[len(before[r])]["step"]
        assert resumed_at % 5 == 0 and 10 <= resumed_at <= at_step + 1  # from the last checkpoint
        kept = [e for e in before[r] if e["step"] < resumed_at] + lines_r[len(before[r]):]
        assert _trained_once(kept, 40) == 40 * 16
        assert load_ckpt(run_dir / "checkpoints" / f"rank{r}.pt")["step"] == 40
    print(f"gave up: device {rank} at step {at_step}; resumed from step {resumed_at}")

