"""Prequential evaluation on real trainers (Kafka + trainer processes): the same figures as the simulator on the
same sample order (classification and regression, ddl), and on the parameter server's workers (ssp): every
trained sample scored once, before its step, with the counters pooled into summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgestream.config import validate_dict
from edgestream.runner import run_config


def _raw(task: str, devices: int, algorithm: str = "ddl", steps: int = 40) -> dict[str, Any]:
    data: dict[str, Any] = {"dataset": "synthetic", "shape": [3, 10, 10], "num_classes": 13, "n_train": 1200,
                            "n_test": 300}
    if task == "regression":
        data = {"dataset": "synthetic", "shape": [9], "n_train": 1200, "n_test": 300, "kwargs": {"target_dim": 2}}
    alg: dict[str, Any] = {"name": algorithm, "batch": {"policy": "fixed", "size": 24}, "buffer": "persist"}
    if algorithm == "ssp":
        alg["params"] = {"s": 2}
    return {"name": f"preq-{task[:3]}", "seed": 11, "task": task, "data": data,
            "devices": {"count": devices, "rates": {"distribution": "constant", "rate": 300},
                        "compute": {"base_s": 0.002, "per_sample_s": 0.0001}},
            "model": {"name": "mlp"}, "optim": {"lr": 0.02, "momentum": 0.0, "weight_decay": 0.0},
            "algorithm": alg, "stop": {"max_steps": steps, "max_time_s": 240, "target_accuracy": None},
            "eval": {"every_s": 5.0, "prequential": {"window": 120, "fading": 0.995}}}


def _steps(run_dir: Path) -> dict[tuple[int, int], dict]:
    out = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "step":
            out[(int(rec["device"]), int(rec["step"]))] = rec
    return out


@pytest.mark.parametrize("task,devices", [("classification", 2), ("regression", 3)])
def test_real_trainers_and_the_simulator_give_the_same_prequential_figures(bootstrap: str, tmp_path: Path,
                                                                           task: str, devices: int) -> None:
    cfg = validate_dict(_raw(task, devices))
    real_dir, real = run_config(cfg, "local", out=tmp_path / "real", bootstrap=bootstrap, progress=False)
    sim_dir, sim = run_config(cfg, "sim", out=tmp_path / "sim", progress=False)
    real_steps, sim_steps = _steps(real_dir), _steps(sim_dir)
    metric = "preq_accuracy" if task == "classification" else "preq_rmse"
    for d in range(devices):
        for s in range(20):  # the first steps: the replicas equal up to float noise in both engines
            r, m = real_steps[(d, s)], sim_steps[(d, s)]
            assert r["labels_crc"] == m["labels_crc"], (d, s)  # the same samples, in the same order
            assert r["preq_n"] == m["preq_n"] == 24 * (s + 1)
            assert r[metric] == pytest.approx(m[metric], rel=1e-3, abs=1e-3), (d, s, r, m)
            assert r["preq_err"] == pytest.approx(m["preq_err"], rel=1e-3, abs=1e-3), (d, s)
    for summary in (real, sim):
        pq = summary["prequential"]
        assert pq["samples"] == devices * 40 * 24 and set(pq["devices"]) == {str(d) for d in range(devices)}
    first = "accuracy" if task == "classification" else "rmse"
    assert real["prequential"]["cumulative"][first] == pytest.approx(sim["prequential"]["cumulative"][first],
                                                                     rel=0.02, abs=0.02)


def test_the_parameter_server_s_workers_score_every_sample_before_their_step(bootstrap: str, tmp_path: Path) -> None:
    cfg = validate_dict(_raw("classification", 2, algorithm="ssp", steps=30))
    real_dir, real = run_config(cfg, "local", out=tmp_path / "real", bootstrap=bootstrap, progress=False)
    steps = _steps(real_dir)
    # a PS worker takes its own number of steps (the run stops when the PS says so): each device's, counted
    took = {d: 1 + max(s for dd, s in steps if dd == d) for d in range(2)}
    assert max(took.values()) == 30, took
    for d in range(2):
        assert [steps[(d, s)]["preq_n"] for s in range(took[d])] == [24 * (s + 1) for s in range(took[d])]
    pq = real["prequential"]
    assert pq["samples"] == 24 * sum(took.values())
    assert 0.0 <= pq["window"]["accuracy"] <= 1.0 and pq["window"]["accuracy"] > 1 / 13  # it learns something
    ranks = [json.loads((real_dir / "ranks" / f"{r}.summary.json").read_text()) for r in range(2)]
    assert [r["prequential"]["samples"] for r in ranks] == [24 * took[0], 24 * took[1]]
