"""Regression: a real run (Kafka + trainer processes) and the simulator on a dataset that is not the
default one. Two defects slipped through every test because tests only used default shapes and class
counts: a consumer that built its own copy of the dataset without `data.num_classes` (labels >= 10 went
to the DLQ, training at chance) and an all-reduce that crashed for odd parameter counts. Both engines
now take the dataset from one RunPlan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgestream.config import validate_dict
from edgestream.runner import run_config
from edgestream.runner.plan import RunPlan

#: 15 classes (> 10), a non-default shape and split sizes; the mlp then has an odd parameter count
RAW = {"name": "odd15", "seed": 5,
       "data": {"dataset": "synthetic", "shape": [3, 24, 24], "num_classes": 15, "n_train": 1200, "n_test": 400},
       "devices": {"count": 2, "rates": {"distribution": "constant", "rate": 300},
                   "compute": {"base_s": 0.002, "per_sample_s": 0.0001}},
       "model": {"name": "mlp"}, "optim": {"lr": 0.01, "momentum": 0.9, "weight_decay": 0.0},
       "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 32}, "buffer": "persist"},
       "stop": {"max_steps": 100, "max_time_s": 240, "target_accuracy": None}, "eval": {"every_s": 2.0}}

COMPARED = ("step", "batch", "seq_first", "seq_last", "seq_count", "labels_crc")


def _steps(run_dir: Path) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "step":
            out.setdefault(int(rec["device"]), []).append(rec)
    return {d: sorted(v, key=lambda r: r["step"]) for d, v in out.items()}


def test_real_and_simulated_runs_train_on_the_same_samples(bootstrap: str, tmp_path: Path) -> None:
    cfg = validate_dict(RAW)
    plan = RunPlan.resolve(cfg)
    assert sum(p.numel() for p in plan.build_model().parameters()) % 2 == 1  # the case that crashed
    real_dir, real = run_config(cfg, "local", out=tmp_path / "real", bootstrap=bootstrap, progress=False)
    sim_dir, sim = run_config(cfg, "sim", out=tmp_path / "sim", progress=False)

    ranks = [json.loads((real_dir / "ranks" / f"{r}.summary.json").read_text()) for r in range(2)]
    assert [r["dlq"] for r in ranks] == [0, 0], ranks  # every label in range: nothing dead-lettered
    assert [r["steps"] for r in ranks] == [100, 100]
    chance = 1 / 15
    assert real["final_accuracy"] > 3 * chance, real
    assert sim["final_accuracy"] > 3 * chance, sim

    real_steps, sim_steps = _steps(real_dir), _steps(sim_dir)
    for device in range(2):
        first_real = [{k: e.get(k) for k in COMPARED} for e in real_steps[device][:20]]
        first_sim = [{k: e.get(k) for k in COMPARED} for e in sim_steps[device][:20]]
        assert first_real[0]["seq_first"] == 0 and first_real[0]["labels_crc"] is not None
        assert first_real == first_sim, f"device {device}: the engines trained on different samples"
    # the replicas stayed identical and both engines end on the same loss trajectory within float noise
    assert real_steps[0][-1]["loss"] == pytest.approx(sim_steps[0][-1]["loss"], rel=0.05, abs=0.05)


def _starts(run_dir: Path) -> list[tuple]:
    recs = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return sorted((r["device"], r["scenario"], r["drift"], r["seq"]) for r in recs if r.get("kind") == "drift_start")


def test_real_and_simulated_runs_train_on_the_same_drifted_samples(bootstrap: str, tmp_path: Path) -> None:
    """devices.drift (edgestream.streams.drift): the producer's drifted stream and the simulator's are the same
    samples (labels_crc step by step), and both runs record each change's start at the same sample."""
    raw = {**RAW, "stop": {"max_steps": 30, "max_time_s": 240, "target_accuracy": None},
           "devices": {**RAW["devices"], "drift": [
               {"at_sample": 200, "devices": [0], "kind": "label_swap"},
               {"at_s": 0.5, "devices": [1], "kind": "class_prior", "over_s": 1.0,
                "weights": [1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]},
               {"at_step": 5, "devices": "all", "kind": "input_shift", "noise": 20.0}]}}
    cfg = validate_dict(raw)
    real_dir, _ = run_config(cfg, "local", out=tmp_path / "real", bootstrap=bootstrap, progress=False)
    sim_dir, _ = run_config(cfg, "sim", out=tmp_path / "sim", progress=False)
    real_steps, sim_steps = _steps(real_dir), _steps(sim_dir)
    for device in range(2):
        real = [{k: e.get(k) for k in COMPARED} for e in real_steps[device][:30]]
        sim = [{k: e.get(k) for k in COMPARED} for e in sim_steps[device][:30]]
        assert real[-1]["seq_last"] > 400 and real == sim, f"device {device}: the engines trained on different samples"
    assert _starts(real_dir) == _starts(sim_dir) == [(0, 0, "label_swap", 200), (0, 2, "input_shift", 160),
                                                     (1, 1, "class_prior", 150), (1, 2, "input_shift", 160)]
