"""The smaller lines of issue 32 (item 5): a full disk named "No space left on device" with the file, a
truncated checkpoint's message in whole sentences, "held by a concurrent run" for one run id used by two
live orchestrators, a failed run's summary with the steps each device reached, and a simulated run that
diverges (stopped on a non-finite loss, one warning when the loss grew a hundredfold).

Real brokers, real orchestrators and trainers, a real full file system (a tmpfs: root, as the fault tests).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from factories import digits_config, write_cfg, write_config  # tests/factories.py
from support.faults import fill_disk
from support.runs import error_lines, finish, run, start, wait_steps

from edgestream.trainer.checkpoint import CheckpointError, identity, load_checkpoint, save_checkpoint

CLI = [sys.executable, "-m", "edgestream.cli"]


@contextlib.contextmanager
def _tmpfs(path: Path, size: str):
    path.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                             text=True)
    if mounted.returncode:  # the project's machines and CI run as root: a test that cannot run fails
        pytest.fail(f"cannot mount a tmpfs for the disk test (needs root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _save(path: Path, model: torch.nn.Module, step: int) -> None:
    save_checkpoint(path, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                    step=step, state={}, stream={}, elapsed_s=1.0, samples=step, ident=identity("run-x", 0, "pin"))


# ---------------------------------------------------------------- a full disk, a truncated checkpoint


def test_a_full_disk_is_named_no_space_left_with_the_checkpoint_file(tmp_path):
    """torch's zip writer reports a full disk as a RuntimeError of its internals ("[enforce fail at
    inline_container.cc:671] . unexpected pos 832 vs 726"): the line says what it is, with the file; the
    previous checkpoint stays whole and no partial file is left."""
    model = torch.nn.Linear(64, 10)
    with _tmpfs(tmp_path / "tiny", "128k") as folder:
        ckpt = folder / "checkpoints" / "rank0.pt"
        _save(ckpt, model, 5)
        filler = fill_disk(folder)
        # 20 kB left: torch's writer fails mid-file (its RuntimeError); 0 left: the OSError of the write
        for room in (20_000, 0):
            os.truncate(filler, filler.stat().st_size - room)
            with pytest.raises(CheckpointError) as err:
                _save(ckpt, torch.nn.Linear(256, 100), 10)
            assert str(err.value) == (f"device 0: cannot write the checkpoint {ckpt}: No space left on device (the "
                                      "disk is full)"), room
            assert sorted(p.name for p in ckpt.parent.iterdir()) == ["rank0.pt"]
            assert load_checkpoint(ckpt)["step"] == 5


def test_a_truncated_checkpoint_is_named_in_whole_sentences(tmp_path, run_prefix):
    """torch's message for a cut zip runs on ("... failed finding central directory. This is an internal miniz
    error. If you are seeing this error, there is a high likelihood ...") and was cut at 160 characters,
    mid-sentence: its first sentence now, whole, in the trainer's and the orchestrator's line."""
    from edgestream.config import load_config
    from edgestream.launch import LaunchError, LocalRun
    from edgestream.trainer.checkpoint import config_pin

    cfg = load_config(write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=5, every_steps=5))
    run_dir = tmp_path / "runs" / f"{run_prefix}-ddl-r1"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(cfg.to_yaml())
    model = torch.nn.Linear(64, 10)
    for rank in (0, 1):
        save_checkpoint(run_dir / "checkpoints" / f"rank{rank}.pt", model=model,
                        optimizer=torch.optim.SGD(model.parameters(), lr=0.1), step=5, state={}, stream={},
                        elapsed_s=1.0, samples=80, ident=identity(run_dir.name, rank, config_pin(cfg)))
    cut = run_dir / "checkpoints" / "rank1.pt"
    cut.write_bytes(cut.read_bytes()[:cut.stat().st_size // 2])
    whole = (f"{cut}: not a readable checkpoint: the file is truncated or damaged (PytorchStreamReader failed "
             "reading zip archive: failed finding central directory)")
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(cut)
    assert str(err.value) == whole
    with pytest.raises(LaunchError) as err:
        LocalRun(cfg, resume=run_dir, bootstrap="127.0.0.1:1")._check_fresh()
    assert str(err.value) == f"--resume: {whole}" and err.value.code == 2


# ---------------------------------------------------------------- one run id, two live runs


@pytest.mark.timeout(900)
def test_a_run_id_in_use_by_a_live_run_elsewhere_is_held_by_a_concurrent_run(bootstrap, run_prefix, tmp_path):
    """Two --out folders, one run id: the run directory lock (a flock per folder) cannot see the other;
    the broker can: the live orchestrator is a member of the consumer group <run>.orchestrator. Once it
    ended, the same refusal says an earlier run used the id."""
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=100000)
    first = tmp_path / "a"
    run_dir = first / f"{run_prefix}-ddl-r1"
    live = start(cfg, bootstrap, out=first)
    try:
        wait_steps(run_dir, live, 2, 2)
        code, out, err = run(cfg, bootstrap, out=tmp_path / "b")
        lines = error_lines(err)
        assert code == 2 and out == "" and len(lines) == 1, err
        assert lines[0] == (f"error: run {run_prefix}-ddl-r1 is held by a concurrent run: orchestrator pid {live.pid} on "
                            f"{os.uname().nodename}, run directory {run_dir} (a live member of consumer group "
                            f"{run_prefix}-ddl-r1.orchestrator on {bootstrap}); choose another --run-id, or wait for it "
                            "to end"), lines[0]
        assert not (tmp_path / "b").exists()
        live.send_signal(signal.SIGTERM)
        code, _, err = finish(live)
        assert code == 143, err
    finally:
        if live.poll() is None:
            live.kill()
            live.communicate()
    code, _, err = run(cfg, bootstrap, out=tmp_path / "b")
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and "an earlier run used this run id" in lines[0], err


# ---------------------------------------------------------------- a failed run's summary


@pytest.mark.timeout(600)
def test_a_failed_run_summary_has_the_steps_each_device_reached(bootstrap, run_prefix, tmp_path, monkeypatch):
    """Both trainers fail at step 6 (the test-only EDGESTREAM_TEST_FAIL_AT_STEP): no rank summary, yet
    summary.json's device_steps holds 6 for each (their step lines 0-5)."""
    monkeypatch.setenv("EDGESTREAM_TEST_FAIL_AT_STEP", "6")
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=100000)
    out = tmp_path / "runs"
    code, _, err = run(cfg, bootstrap, out=out)
    assert code == 1 and error_lines(err) and "device " in error_lines(err)[0], err
    run_dir = out / f"{run_prefix}-ddl-r1"
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = {r: [json.loads(x)["step"] for x in (run_dir / "ranks" / f"{r}.jsonl").read_text().splitlines()
                 if '"kind":"step"' in x] for r in (0, 1)}
    assert steps == {0: list(range(6)), 1: list(range(6))}, steps
    assert summary["device_steps"] == {"0": 6, "1": 6}, summary["device_steps"]
    assert summary["steps"] == 6 and summary["device_steps_total"] == 12


# ---------------------------------------------------------------- the simulator diverges


def _sim_cfg(tmp_path: Path, name: str, algorithm: str, lr: float, devices: int) -> Path:
    return write_config(tmp_path / f"{name}.yaml", digits_config(
        name, devices=devices, compute={"base_s": 0.01, "per_sample_s": 0.001}, partition="iid", lr=lr,
        momentum=0.0, algorithm=algorithm, max_time_s=30, max_steps=60))


def test_a_simulated_run_stops_on_a_non_finite_loss_as_the_real_trainer_does(tmp_path):
    """lr 1e6: the loss is NaN by step 2. The run stops there with the real trainer's line (one
    implementation: edgestream.runner.divergence), exit 1, its run directory written (stop_reason
    "diverged"); the hundredfold growth before it was named once."""
    from edgestream.runner.divergence import check_loss

    proc = subprocess.run([*CLI, "run", str(_sim_cfg(tmp_path, "div", "ddl", 1e6, 4)), "--engine", "sim", "--out",
                           str(tmp_path / "runs"), "--quiet"], capture_output=True, text=True, timeout=600)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "diverged"
    found = re.match(r"device (\d+): the loss is non-finite \(nan\) at step (\d+): ", summary["error"])
    assert found, summary["error"]
    device, step = int(found.group(1)), int(found.group(2))
    with pytest.raises(ArithmeticError) as real:
        check_loss(device, float("nan"), step)
    assert summary["error"] == str(real.value)  # the trainer's wording, word for word
    assert lines[-1] == f"error: {real.value}; run directory {run_dir}"
    warned = [ln for ln in lines if "grew from" in ln]
    assert len(warned) == 1 and warned[0].startswith("simulator: device ") and "over 100 times its starting value: " \
        "training may be diverging (lower optim.lr, or check the data and the model)" in warned[0], lines
    assert summary["loss_warning"] == warned[0].removeprefix("simulator: ")
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert max(e["step"] for e in events if e["kind"] == "step") == step - 1  # nothing after the stop


def test_a_simulated_parameter_server_run_whose_loss_grows_a_hundredfold_warns_once(tmp_path, caplog):
    """asp at lr 2 on 16 devices: the loss climbs past 100x its start but stays finite; the run goes on
    (as the issue's 256-device PS run at loss 2.05e6 did) with one warning, also in summary.json."""
    from edgestream.config import load_config
    from edgestream.runner import run_config

    cfg = load_config(_sim_cfg(tmp_path, "grow", "asp", 2.0, 16))
    with caplog.at_level(logging.WARNING, logger="edgestream.sim.engine"):
        path, summary = run_config(cfg, "sim", out=tmp_path / "runs", run_id="g1", progress=False)
    warned = [r.getMessage() for r in caplog.records if "grew from" in r.getMessage()]
    assert len(warned) == 1, warned
    first, grown = (float(x) for x in warned[0].split("grew from ")[1].split(" by step")[0].split(" to "))
    assert grown > 100 * first
    assert summary["stop_reason"] == "max_steps" and summary["loss_warning"] == warned[0].removeprefix("simulator: ")
    events = [json.loads(x) for x in (path / "events.jsonl").read_text().splitlines()]
    assert max(e["loss"] for e in events if e["kind"] == "step") > 100 * first
