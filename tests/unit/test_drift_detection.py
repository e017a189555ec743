"""Drift detection in the simulator (issue 56): a drift scenario at a known sample on some devices is detected on
each drifted device within a bounded number of samples after it and never before it, across seeds, detectors, tasks
and kinds; a stationary run of 20,000 samples a device raises no ADWIN or DDM alarm; the responses do what they
say (reweight, reset_optimizer, lr_boost agreed by the group at one step); bad settings are refused in one line
naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgestream.config import validate_dict
from edgestream.config.errors import ConfigError
from edgestream.runner import run_config
from edgestream.runner.plan import PlanError, RunPlan
from edgestream.sim.checks import SimConfigError

BEGIN = 3000  # the drifted devices' sample at which the change begins
#: samples from the change to the first detection the tests allow, per detector (ADWIN checks every 32 values,
#: Page-Hinkley's mean carries the warm-up's errors: docs/stream-learning.md, "Drift detectors")
BOUND = {"adwin": 128, "ddm": 160, "page_hinkley": 256}


def _raw(seed: int, *, task: str = "classification", kind: str | None = "label_swap", detector: str = "adwin",
         params: dict | None = None, steps: int = 130, devices: int = 4, drifted: tuple[int, ...] = (0, 1),
         algorithm: str = "ddl", on_detect: list | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"dataset": "synthetic", "shape": [16], "n_train": 6000, "n_test": 600}
    if task == "classification":
        data["num_classes"] = 6
    devs: dict[str, Any] = {"count": devices, "rates": {"distribution": "constant", "rate": 100},
                            "compute": {"base_s": 0.01, "per_sample_s": 0.0001}}
    if kind is not None:
        devs["drift"] = [{"at_sample": BEGIN, "devices": list(drifted), "kind": kind, **(params or {})}]
    return {"name": "dd", "seed": seed, "task": task, "data": data, "devices": devs,
            "model": {"name": "mlp"}, "optim": {"lr": 0.05, "momentum": 0.9},
            "algorithm": {"name": algorithm, "batch": {"policy": "fixed", "size": 32}, "buffer": "persist"},
            "stop": {"max_steps": steps, "target_accuracy": None},
            "eval": {"every_s": 1000, "prequential": {"window": 500}},
            "drift": {"detector": detector, "on_detect": on_detect or ["warn"]}}


def _events(raw: dict, tmp_path: Path) -> tuple[list[dict], dict]:
    path, summary = run_config(validate_dict(raw), "sim", out=tmp_path, progress=False)
    return [json.loads(x) for x in (path / "events.jsonl").read_text().splitlines()], summary


CASES = [("classification", "label_swap", "adwin", None), ("classification", "label_swap", "page_hinkley", None),
         ("classification", "label_swap", "ddm", None), ("classification", "input_shift", "adwin", {"scale": -1.0}),
         ("regression", "label_swap", "adwin", None), ("regression", "input_shift", "page_hinkley", {"scale": -1.0})]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("task,kind,detector,params", CASES)
def test_each_drifted_device_detects_its_change_soon_after_it_and_none_before(task, kind, detector, params, seed,
                                                                             tmp_path) -> None:
    events, summary = _events(_raw(seed, task=task, kind=kind, detector=detector, params=params), tmp_path)
    starts = {e["device"]: e["seq"] for e in events if e["kind"] == "drift_start"}
    assert starts == {0: BEGIN, 1: BEGIN}
    drifts = [e for e in events if e["kind"] == "drift" and e["scope"] == "device"]
    assert all(d["samples"] > BEGIN for d in drifts), [d for d in drifts if d["samples"] <= BEGIN]
    first = {}
    for d in drifts:
        first.setdefault(d["device"], d)
    for device in (0, 1):
        assert device in first, (device, drifts)
        assert BEGIN < first[device]["samples"] <= BEGIN + BOUND[detector], first[device]
        assert first[device]["seq"] == first[device]["samples"] - 1  # the simulator's seq: the sample number
    # the devices that did not drift share the model: when it learns the drifted devices' new concept their errors
    # can rise too -- later than the drifted devices' detections, never before the change
    for device in (2, 3):
        if device in first:
            assert first[device]["samples"] > min(first[0]["samples"], first[1]["samples"]), first
    assert summary["drift"]["detections"] == len(drifts)


@pytest.mark.parametrize("task,detector", [("classification", "adwin"), ("classification", "ddm"),
                                           ("regression", "adwin")])
def test_a_stationary_run_of_20000_samples_a_device_raises_no_alarm(task, detector, tmp_path) -> None:
    """The model's warm-up (its errors falling) is not drift under `direction: up`; measured false-alarm rates of
    every detector: docs/BENCHMARKS.md (Page-Hinkley's are not zero)."""
    events, summary = _events(_raw(1, task=task, kind=None, detector=detector, steps=625), tmp_path)
    assert summary["prequential"]["devices"]["0"]["samples"] == 20000
    assert [e for e in events if e["kind"] == "drift"] == []
    assert summary["drift"] == {"detections": 0, "devices": {}, "all_devices": 0, "events": []}


def _lrs(events: list[dict], device: int) -> dict[int, float]:
    return {e["step"]: e["lr"] for e in events if e["kind"] == "step" and e["device"] == device}


def test_lr_boost_and_reset_optimizer_are_agreed_by_every_worker_at_one_step(tmp_path) -> None:
    raw = _raw(1, on_detect=["warn", "reset_optimizer", {"lr_boost": {"factor": 3, "steps": 5}}])
    events, summary = _events(raw, tmp_path)
    drifts = [e for e in events if e["kind"] == "drift" and e["scope"] == "device"]
    assert drifts
    voted = min(d["step"] for d in drifts)  # detected at this step's Log: voted at the next step's exchange
    base = _lrs(events, 0)[0]
    for device in range(4):  # every worker, drifted or not, boosts the same steps
        lrs = _lrs(events, device)
        boosted = sorted(s for s, lr in lrs.items() if lr == pytest.approx(3 * base))
        assert boosted[:5] == list(range(voted + 1, voted + 6)), (device, boosted)
    assert summary["replicas"] == "shared"  # the same update on every worker: the replicas never split


def test_reweight_gives_the_drifted_device_more_weight_in_the_exchange(tmp_path) -> None:
    raw = _raw(1, algorithm="scadles", on_detect=[{"reweight": {"factor": 4, "steps": 3}}])
    raw["algorithm"] = {"name": "scadles", "batch": {"policy": "fixed", "size": 32}, "buffer": "persist"}
    events, _ = _events(raw, tmp_path)
    drifts = [e for e in events if e["kind"] == "drift" and e["scope"] == "device"]
    at = min(d["step"] for d in drifts if d["device"] == 0)
    steps = {(e["device"], e["step"]): e for e in events if e["kind"] == "step"}
    # ScaDLES' global batch is the sum of the weights b_i: the reweighted device adds (factor - 1) b_i to it
    plain = steps[(2, at)]["global_batch"]
    boosted = steps[(2, at + 1)]["global_batch"]
    assert plain == 4 * 32 and boosted >= 4 * 32 + 3 * 32


@pytest.mark.parametrize("drift,words", [
    ({"detector": "cusum"}, "drift.detector"),
    ({"detector": "adwin", "params": {"delta": 2}}, "drift.params.delta"),
    ({"detector": "adwin", "params": {"deltta": 0.1}}, "deltta"),
    ({"on_detect": ["shout"]}, "drift.on_detect"),
    ({"on_detect": [{"lr_boost": {"factor": -1}}]}, "lr_boost.factor"),
])
def test_bad_drift_settings_are_refused_in_one_line_naming_the_field(drift, words) -> None:
    raw = _raw(1)
    raw["drift"] = drift
    with pytest.raises((ConfigError, PlanError)) as err:
        RunPlan.resolve(validate_dict(raw))
    problems = err.value.problems
    assert len(problems) == 1 and words in problems[0], problems


def test_ddm_on_a_regression_run_is_refused_in_one_line() -> None:
    with pytest.raises(PlanError) as err:
        RunPlan.resolve(validate_dict(_raw(1, task="regression", detector="ddm")))
    assert len(err.value.problems) == 1 and "ddm" in err.value.problems[0], err.value.problems


@pytest.mark.parametrize("algorithm,response,words", [
    ("ssp", "reset_optimizer", "algorithm ssp has none"),
    ("local-sgd", {"reweight": {"factor": 2}}, "algorithm local-sgd has none"),
    ("ddl", "checkpoint", "checkpoint"),
])
def test_a_response_the_run_cannot_perform_is_refused_naming_the_field(algorithm, response, words, tmp_path):
    raw = _raw(1, algorithm=algorithm, on_detect=[response])
    raw["algorithm"] = {"name": algorithm}
    with pytest.raises((PlanError, SimConfigError)) as err:
        run_config(validate_dict(raw), "sim", out=tmp_path, progress=False)
    problems = err.value.problems
    assert len(problems) == 1 and problems[0].startswith("drift.on_detect") and words in problems[0], problems


def test_what_a_user_reads_tensorboard_compare_and_status(tmp_path) -> None:
    """The figures reach every surface: TensorBoard's prequential series and drift markers, compare's recovery
    table and prequential.png, the status text, the progress line's note."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from typer.testing import CliRunner

    from edgestream.cli import app
    from edgestream.comparisons import parse_variants, run_compare
    from edgestream.metrics.events import read_events
    from edgestream.metrics.prequential import learning_of
    from edgestream.runner.report import stream_note

    folder, summaries, table = run_compare(validate_dict(_raw(1, steps=110)), parse_variants("ddl,scadles"),
                                           out=tmp_path, progress=False)
    assert "preq window" in table and "drifts" in table
    text = (folder / "compare.md").read_text()
    assert "## Stream learning" in text and "| ddl | " in text and (folder / "prequential.png").stat().st_size > 0
    run_dir = Path(summaries["ddl"]["run_dir"])
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"prequential/accuracy", "prequential_window/accuracy", "prequential_window_accuracy/device_0",
            "prequential_accuracy/device_3", "drift/device_0", "drift_start/device_1"} <= tags, sorted(tags)
    learning = learning_of(read_events(run_dir / "events.jsonl"))
    assert learning["drifts"] == summaries["ddl"]["drift"]["detections"] + summaries["ddl"]["drift"]["all_devices"]
    assert set(learning["devices"]) == {"0", "1", "2", "3"} and 0 < learning["window"]["accuracy"] <= 1
    assert stream_note(learning["window"], "accuracy", 3).startswith("prequential accuracy ")
    from edgestream.cli.status import _learning, _learning_text

    said = _learning_text(_learning(run_dir))
    assert "prequential (all devices): window accuracy" in said and "drift detections:" in said, said
    assert "drift on device" in said  # the newest detections, each in a line
    result = CliRunner().invoke(app, ["status", "--help"])
    assert "--run-dir" in result.output
