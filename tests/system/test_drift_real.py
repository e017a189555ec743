"""Drift detection on real trainers reading external streams (issue 56): JSON records written by a PLAIN
confluent-kafka producer whose labels change at a known offset on one device are detected there, with the offset in
the `drift` event, and never before it; a failure mid-run and `--resume` give the same later detections as an
uninterrupted run on the same records (the checkpoint keeps the prequential counters and the detectors' state).

Real broker (the session's `bootstrap`), real `edgestream run --engine local` orchestrators and trainers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.runs import finish, resume_ckpts, run, start

W = np.array([[1.5, -1.0, 0.5, 0.0], [-0.5, 1.0, 1.0, -1.0], [0.0, 0.5, -1.5, 1.5]], np.float32)  # 3 classes
CHANGE = 640          # device 1's records from this offset on have their labels permuted
PERMUTATION = (1, 2, 0)
RECORDS = 1600
BATCH = 16
#: samples from the change to the detection that the tests allow (ADWIN checks every 32 values: a few checks)
BOUND = 160


def _records(seed: int, change: int | None) -> list[bytes]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(RECORDS, 4)).astype(np.float32)
    y = np.argmax(x @ W.T, axis=1)
    if change is not None:
        y[change:] = np.asarray(PERMUTATION)[y[change:]]
    return [json.dumps({"v": row.tolist(), "cls": int(c)}).encode() for row, c in zip(x, y, strict=True)]


def _write_topics(bootstrap: str, pattern: str, changes: dict[int, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(pattern.format(device=d), 1, 1) for d in range(2)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for d in range(2):
        for value in _records(seed=10 + d, change=changes.get(d)):
            p.produce(pattern.format(device=d), value)
            p.poll(0)
    assert p.flush(30) == 0


def _cfg(tmp_path: Path, name: str, pattern: str, *, every_steps: int | None = None, steps: int = 80) -> Path:
    rng = np.random.default_rng(99)
    x = rng.normal(size=(300, 4)).astype(np.float32)
    np.savez(tmp_path / "test.npz", x=x, y=np.argmax(x @ W.T, axis=1))
    cfg = {"name": name, "seed": 0, "data": {"shape": [4], "num_classes": 3}, "devices": {"count": 2},
           "model": {"name": "mlp"}, "optim": {"lr": 0.1, "momentum": 0.9},
           "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": BATCH}},
           "stop": {"max_time_s": 200, "max_steps": steps, "target_accuracy": None},
           "eval": {"every_s": 5, "path": str(tmp_path / "test.npz"), "prequential": {"window": 300}},
           "drift": {"detector": "adwin", "on_detect": ["warn"]},
           "streams": {"source": "external", "topic": pattern, "format": "json", "input": "v", "target": "cls"},
           "runtime": {"engine": "local"}}
    if every_steps:
        cfg["checkpoint"] = {"every_steps": every_steps}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _lines(path: Path, kind: str) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if f'"kind":"{kind}"' in x]


@pytest.mark.timeout(600)
def test_a_label_change_at_a_known_offset_is_detected_there_and_named(bootstrap, run_prefix, tmp_path):
    pattern = f"{run_prefix}.plant-{{device}}"
    _write_topics(bootstrap, pattern, {1: CHANGE})
    out = tmp_path / "runs"
    code, _, err = run(_cfg(tmp_path, run_prefix, pattern), bootstrap, out=out)
    assert code == 0, err
    run_dir = out / f"{run_prefix}-ddl-r1"
    drifts = _lines(run_dir / "events.jsonl", "drift")
    mine = [d for d in drifts if d["device"] == 1 and d["scope"] == "device"]
    assert mine, drifts
    first = mine[0]
    # the offset of the record at which it fired: within BOUND records after the change, none before it
    assert CHANGE <= first["seq"] < CHANGE + BOUND, first
    assert first["samples"] == first["seq"] + 1  # external offsets from 0: the sample count is the offset + 1
    assert all(d["seq"] is None or d["seq"] >= CHANGE for d in drifts if d["scope"] == "device"), drifts
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["drift"]["devices"].get("1", 0) >= 1
    assert summary["prequential"]["samples"] == 2 * 80 * BATCH
    # device 0's stream never changed: what its detector saw, if anything, came after device 1's change moved the
    # shared model (its errors rise when the model learns device 1's permuted labels)
    assert all(d["seq"] > CHANGE for d in drifts if d["device"] == 0), drifts


@pytest.mark.timeout(900)
def test_a_failure_and_resume_give_the_same_later_detections(bootstrap, run_prefix, tmp_path):
    pattern = f"{run_prefix}.line-{{device}}"
    _write_topics(bootstrap, pattern, {1: CHANGE, 0: 1100})  # both changes after the failure
    out = tmp_path / "runs"
    whole_cfg = _cfg(tmp_path, f"{run_prefix}w", pattern, every_steps=4)
    code, _, err = run(whole_cfg, bootstrap, out=out)
    assert code == 0, err
    whole = out / f"{run_prefix}w-ddl-r1"

    cfg = _cfg(tmp_path, f"{run_prefix}k", pattern, every_steps=4)
    # every trainer fails at step 18 (the test-only failure), before device 1's change (step 40) and device 0's
    # (step 68): the run ends there whatever the machine's speed, its last checkpoints at step 16
    code, _, err = finish(start(cfg, bootstrap, out=out, env={"EDGESTREAM_TEST_FAIL_AT_STEP": "18"}))
    assert code != 0 and "EDGESTREAM_TEST_FAIL_AT_STEP" in err, err
    run_dir = out / f"{run_prefix}k-ddl-r1"
    ck = resume_ckpts(run_dir, 2)
    assert [ck[r]["step"] for r in range(2)] == [16, 16]
    before = {r: len((run_dir / "ranks" / f"{r}.jsonl").read_text().splitlines()) for r in range(2)}
    code, _, err = finish(start(cfg, bootstrap, "--resume", str(run_dir)))
    assert code == 0, err

    def detections(path: Path, skip: int = 0) -> list[tuple]:
        lines = [json.loads(x) for x in path.read_text().splitlines()[skip:]]
        return [(d["device"], d["step"], d["samples"], d["seq"]) for d in lines if d.get("kind") == "drift"]

    compared = 0
    for r in range(2):
        at = ck[r]["step"]
        resumed = detections(run_dir / "ranks" / f"{r}.jsonl", before[r])
        compared += len(resumed)
        uninterrupted = [d for d in detections(whole / "ranks" / f"{r}.jsonl") if d[1] >= at]
        assert resumed == uninterrupted, (r, at, resumed, uninterrupted)
        steps = [e for e in _lines(run_dir / "ranks" / f"{r}.jsonl", "step")]
        assert steps[-1]["preq_n"] == 80 * BATCH  # the counters went on from the checkpoint's
    assert any(d[0] == 1 for d in detections(whole / "events.jsonl")), "device 1's change was never detected"
    assert compared, "no detection after the resume to compare"
