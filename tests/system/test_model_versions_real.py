"""Model versions of real runs (issue 57, acceptance): `edgestream run --engine local` with `publish:` -- rank 0 of a
collective run, or the parameter server -- writes versions at the configured cadence to the run directory and the
models topic; a device process with only the device install (no torch: tests/support/sources.DEVICE_ONLY) follows
them with a ModelSubscriber and its predictions on held-out data improve with the versions; a trainer killed and
the run resumed numbers on, and no version number is ever sent with other bytes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from factories import digits_config, write_config
from support.runs import finish, pids_of, resume, start, step_lines
from support.sources import DEVICE_SCRIPT
from support.streams import _read_all

from edgestream.edge.model_format import META_FILE, read_all
from edgestream.kafka.topic_names import models_topic

EVERY = 10  # publish.every_steps


def _cfg(tmp_path: Path, name: str, case: str, **sections) -> Path:
    """The run of `case` (ddl / ssp on the PS: digits classes; regression: a synthetic 2-vector target), 2 devices,
    the mlp, 60 steps, a version every EVERY steps; `sections` replace top-level sections."""
    publish = {"every_steps": EVERY, "keep": 1000, "chunk_bytes": 16384}
    if case == "regression":
        raw = digits_config(name, devices=2, model="mlp", lr=0.05, max_steps=60, max_time_s=180,
                            data={"dataset": "synthetic", "shape": [6], "n_train": 3000, "n_test": 300,
                                  "kwargs": {"target_dim": 2}}, task="regression", publish=publish)
    else:
        ssp = case == "ssp"
        raw = digits_config(name, devices=2, model="mlp", lr=0.1 if ssp else 0.05, momentum=0.0 if ssp else 0.9,
                            algorithm="ssp" if ssp else "ddl", params={"s": 2} if ssp else None, max_steps=60,
                            max_time_s=180, publish=publish)
    raw.update(sections)
    return write_config(tmp_path / "c.yaml", raw)


def _heldout(cfg_path: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The run's held-out split as the records have it (raw dtype, not normalised): what a device scores on."""
    from edgestream.config import load_config
    from edgestream.runner.plan import RunPlan

    ds = RunPlan.resolve(load_config(cfg_path)).dataset
    xs, ys = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(xs, ds.x_test)
    np.save(ys, ds.y_test)
    return xs, ys


def _device(bootstrap: str, run: str, xs: Path, ys: Path, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", DEVICE_SCRIPT, bootstrap, run, str(xs), str(ys), str(out)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def _versions(run_dir: Path) -> dict[int, dict]:
    out = {}
    for d in (run_dir / "models").glob("v*"):
        out[int(d.name[1:])] = json.loads((d / META_FILE).read_text())
    return dict(sorted(out.items()))


def _on_topic(bootstrap: str, run: str, run_dir: Path, want: int) -> dict:
    msgs = _read_all(bootstrap, models_topic(run), want, f"{run}.check", limit_s=60)
    got, refused = read_all((m.value() for m in msgs), run)
    assert not refused, refused
    return got


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", ["ddl", "ssp", "regression"])
def test_a_real_run_publishes_versions_that_a_device_without_torch_follows_and_that_improve(
        bootstrap, run_prefix, tmp_path, case):
    # with prequential evaluation (rank 0's device figures ride in each version; the PS has none of its own)
    cfg = _cfg(tmp_path, run_prefix, case, eval={"every_s": 1, "prequential": {"window": 200}})
    xs, ys = _heldout(cfg, tmp_path)
    run = f"{run_prefix}-{'ssp' if case == 'ssp' else 'ddl'}-r1"
    out = tmp_path / "device.jsonl"
    device = _device(bootstrap, run, xs, ys, out)  # started before the run: it waits for the topic
    try:
        code, _, err = finish(start(cfg, bootstrap, out=tmp_path / "runs"))
        assert code == 0, err
        run_dir = tmp_path / "runs" / run
        versions = _versions(run_dir)
        last = max(versions)
        stdout, derr = device.communicate(f"{last}\n", timeout=300)
    finally:
        if device.poll() is None:
            device.kill()
    assert device.returncode == 0, derr[-3000:]
    assert stdout.split() == ["False", "False"]  # the device never imported torch (nor pydantic)
    # the cadence: version k of step k * EVERY (rank 0's steps; the PS's model versions), plus the run's end
    steps = [m["step"] for m in versions.values()]
    assert list(versions) == list(range(1, last + 1)) and last >= 3, steps
    assert all(b - a >= EVERY for a, b in zip(steps[:-2], steps[1:-1], strict=True)), steps
    assert steps[0] >= EVERY and versions[last]["metrics"]["heldout"] is not None
    preq = [m["metrics"]["prequential"] for m in versions.values()]
    if case == "ssp":
        assert preq == [None] * last
    else:  # rank 0's device: samples scored before training on them, growing with the versions
        samples = [q["samples"] for q in preq]
        assert samples == sorted(samples) and samples[0] > 0 and preq[-1]["device"] == 0, preq[-1]
        assert ("accuracy" if case == "ddl" else "rmse") in preq[-1]["window"], preq[-1]
    if case != "ssp":  # rank 0's steps (a PS run's versions count the PS's model versions)
        assert steps[-1] == 60 and last >= 60 // EVERY - 1, steps
    # every version on the topic, byte for byte what the run directory holds
    topic = _on_topic(bootstrap, run, run_dir, last)
    assert sorted(topic) == list(versions)
    for v, mv in topic.items():
        for name, data in mv.files.items():
            assert (run_dir / "models" / f"v{v}" / name).read_bytes() == data
    # the device's figures on its held-out data improve from the first version it scored to the last
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    scored = [ln for ln in lines if "scored" in ln]
    assert scored and scored[-1]["scored"] == last, lines
    if case == "regression":
        assert scored[-1]["rmse"] < 0.8 * scored[0]["rmse"], scored
    else:
        assert scored[-1]["accuracy"] > scored[0]["accuracy"] + 0.2 and scored[-1]["accuracy"] > 0.7, scored


@pytest.mark.timeout(600)
def test_a_killed_trainer_and_resume_number_on_and_never_reuse_a_version(bootstrap, run_prefix, tmp_path):
    cfg = _cfg(tmp_path, run_prefix, "ddl", checkpoint={"every_steps": 5},
               stop={"target_accuracy": None, "max_time_s": 300, "max_steps": 400})
    out = tmp_path / "runs"
    run = f"{run_prefix}-ddl-r1"
    run_dir = out / run
    proc = start(cfg, bootstrap, out=out)
    deadline = time.monotonic() + 240
    while not (run_dir / "models" / "v3" / META_FILE).exists():  # three versions out, then rank 0 is killed
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.2)
    os.kill(pids_of(run_dir)["trainers"]["0"], signal.SIGKILL)
    code, _, err = finish(proc)
    assert code != 0
    before = _versions(run_dir)
    bytes_before = {v: (run_dir / "models" / f"v{v}" / "model.onnx").read_bytes() for v in before}
    killed_at = max(e["step"] for e in step_lines(run_dir / "ranks" / "0.jsonl"))
    code, _, err = resume(cfg, bootstrap, run_dir, f"stop.max_steps={killed_at + 25}")
    assert code == 0, err
    after = _versions(run_dir)
    assert list(after) == list(range(1, max(after) + 1)) and max(after) > max(before)
    assert {v: (run_dir / "models" / f"v{v}" / "model.onnx").read_bytes() for v in before} == bytes_before
    resumed = [after[v]["step"] for v in after if v > max(before)]
    assert resumed == sorted(resumed) and resumed[0] >= before[max(before)]["step"] + EVERY, (before, after)
    # the topic: each version number once, with the bytes of the run directory (none reused with other bytes)
    msgs = _read_all(bootstrap, models_topic(run), 1, f"{run}.check2", limit_s=60)
    got, refused = read_all((m.value() for m in msgs), run)
    assert not refused
    by_version: dict[int, set] = {}
    for m in msgs:
        if m.value() is not None:
            by_version.setdefault(int(m.key().split(b".")[0][1:]), set()).add(m.value()[32:64])  # the header's body_sha256
    assert all(len(s) == 1 for s in by_version.values()), by_version
    assert set(got) <= set(after)
    for v, mv in got.items():
        assert mv.files["model.onnx"] == (run_dir / "models" / f"v{v}" / "model.onnx").read_bytes()


@pytest.mark.timeout(600)
def test_a_parameter_server_killed_mid_run_numbers_on_and_never_reuses_a_version(bootstrap, run_prefix, tmp_path,
                                                                                monkeypatch):
    """The PS publishes (ssp); SIGKILL to it once two versions are out: the orchestrator restarts it from its
    checkpoint, its versions number on from the run directory, and the topic holds each number once, with the bytes
    the run directory holds."""
    monkeypatch.setenv("EDGESTREAM_PS_CHECKPOINT_S", "0.7")
    cfg = _cfg(tmp_path, run_prefix, "ssp", stop={"target_accuracy": None, "max_time_s": 300, "max_steps": 150})
    out = tmp_path / "runs"
    run = f"{run_prefix}-ssp-r1"
    run_dir = out / run
    proc = start(cfg, bootstrap, out=out)
    deadline = time.monotonic() + 240
    while not (run_dir / "models" / "v2" / META_FILE).exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.2)
    killed = pids_of(run_dir)["ps"]
    os.kill(killed, signal.SIGKILL)
    code, _, err = finish(proc)
    assert code == 0, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ps"]["restarts"] == 1 and pids_of(run_dir)["ps"] != killed
    versions = _versions(run_dir)
    assert list(versions) == list(range(1, max(versions) + 1)) and max(versions) > 2
    msgs = _read_all(bootstrap, models_topic(run), 1, f"{run}.check", limit_s=60)
    bodies: dict[int, set] = {}
    for m in msgs:
        if m.value() is not None:
            bodies.setdefault(int(m.key().split(b".")[0][1:]), set()).add(m.value()[32:64])
    assert all(len(b) == 1 for b in bodies.values()), bodies
    got, refused = read_all((m.value() for m in msgs), run)
    assert not refused and set(got) <= set(versions) and max(got) == max(versions)
    for v, mv in got.items():
        assert mv.files["model.onnx"] == (run_dir / "models" / f"v{v}" / "model.onnx").read_bytes()
