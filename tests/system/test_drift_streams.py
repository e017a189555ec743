"""devices.drift through Kafka: the producer's drifted samples, read back from the broker, are the ones the
simulator's stream makes for the same (device, sequence number), for each kind, abrupt and gradual,
classification and regression, a user's transform by import path, and several seeds and device counts."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import stream_config
from support.streams import _read_all

from edgestream.data.wire import decode_sample
from edgestream.producers.from_plan import stream_producer
from edgestream.runner.plan import RunPlan
from edgestream.sim.data import SimData

USER = ("import numpy as np\n\ndef invert(x):\n    return (np.iinfo(x.dtype).max - x).astype(x.dtype)\n\n"
        "def target(x, y):\n    return np.sin(y) + x[:, 0]\n")

CASES = {
    "classification, 3 devices": dict(seed=2, count=3, dataset=None, task=None, drift=[
        {"at_sample": 60, "devices": [0], "kind": "label_swap"},
        {"at_sample": 150, "devices": [0], "kind": "input_shift", "transform": "userdrift_kafka:invert"},
        {"at_s": 0.1, "devices": [1], "kind": "input_shift", "scale": 1.5, "noise": 2.0, "over_s": 0.4},
        {"at_sample": 50, "devices": [2], "kind": "class_prior", "weights": [0, 1, 0, 0, 0, 0, 0, 0, 2, 0],
         "over_s": 0.3}]),
    "regression, 2 devices": dict(seed=9, count=2, dataset={"dataset": "synthetic", "shape": [6]},
                                  task="regression", drift=[
        {"at_s": 0.2, "devices": "all", "kind": "label_swap", "over_s": 0.3},
        {"at_sample": 80, "devices": [1], "kind": "input_shift", "offset": -1.5, "noise": 0.5},
        {"at_sample": 200, "devices": [0], "kind": "label_swap", "target": "userdrift_kafka:target"}]),
    "7 classes, 4 devices": dict(seed=13, count=4, dataset={"dataset": "synthetic", "shape": [12], "num_classes": 7},
                                 task=None, drift=[
        {"at_s": 0.3, "devices": [0, 3], "kind": "class_prior", "weights": [0, 0, 1, 0, 0, 1, 0]},
        {"at_sample": 40, "devices": [1], "kind": "label_swap", "swap": [[0, 6], [2, 3]], "over_s": 0.5},
        {"at_step": 4, "devices": [2], "kind": "input_shift", "scale": -2.0}]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_producer_streams_the_simulators_drifted_samples(bootstrap: str, run_prefix: str, tmp_path: Path,
                                                             case: str) -> None:
    c = CASES[case]
    pkg = tmp_path / "userdrift_kafka"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(USER)
    sys.path.insert(0, str(tmp_path))
    try:
        extra = {"task": c["task"], "stop": {"target_accuracy": None}} if c["task"] else {}
        cfg = stream_config(run_prefix, c["dataset"], seed=c["seed"], **extra, devices={
            "count": c["count"], "rates": {"distribution": "constant", "rate": 300}, "drift": c["drift"]})
        plan = RunPlan.resolve(cfg)
        summary = stream_producer(plan, bootstrap, run_prefix, list(range(c["count"]))).run_for(1.3, report_every_s=0)
        assert summary.complete, summary
        sim = SimData(plan.dataset, plan.shards, plan.seed, plan.drift_scenario)
        plain = SimData(plan.dataset, plan.shards, plan.seed)
        for d in range(c["count"]):
            topic, _ = plan.layout(run_prefix).stream(d)
            msgs = _read_all(bootstrap, topic, summary.devices[d]["delivered"], f"{run_prefix}-read-{d}")
            samples = [decode_sample(m.value()) for m in msgs]
            seqs = np.array([s.seq for s in samples])
            assert seqs.tolist() == list(range(len(samples))) and len(samples) > 300
            raw_x = np.stack([s.x for s in samples])
            targets = np.stack([np.asarray(s.target) for s in samples])
            x, y = sim.rows(sim.stream_indices(d, 0, len(samples)))
            assert torch.equal(plan.dataset.normalize(torch.from_numpy(raw_x)), x), f"device {d}: inputs differ"
            assert np.array_equal(targets.reshape(y.shape), y.numpy()), f"device {d}: targets differ"
            # and the drift did happen: from its first change on, the stream is not the undrifted one
            bx, by = plain.rows(plain.stream_indices(d, 0, len(samples)))
            first = plan.drift_scenario.first[d]
            moved = ((x != bx).flatten(1).any(1) | (y != by).reshape(len(y), -1).any(1)).numpy()
            assert not moved[:first].any() and moved[first:].mean() > 0.4, (d, first, moved.mean())
    finally:
        sys.path.remove(str(tmp_path))
