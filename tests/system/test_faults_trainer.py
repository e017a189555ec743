"""Faults a real trainer must name (issue 21, trainer side), against the session broker and real
`edgestream train` processes: nothing mocked.

* a burst of malformed messages in a device topic mid-run: the run (collective and parameter-server)
  finishes its stop, the DLQ holds the messages with their reasons;
* an unexpected error inside a trainer (EDGESTREAM_TEST_FAIL_AT_STEP, test-only): the rank ends failed,
  exit non-zero, no final evaluation and no checkpoint after it;
* a diverging loss (lr 1e6): the run stops with one line naming the device and the step;
* a read-only output folder, a full disk: one line naming the path and the device.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from factories import digits_config, free_port, write_config  # tests/factories.py
from support.faults import fill_disk
from support.trainers import _finish  # wait for every trainer process, kill on a hang

from edgestream.config import load_config, validate_dict
from edgestream.kafka import consumer_config, device_topic, dlq_topic, producer_config
from edgestream.producers.from_plan import stream_producer
from edgestream.runner import run_config
from edgestream.runner.plan import RunPlan

PY = sys.executable


# ---------------------------------------------------------------- helpers

def _run_id() -> str:
    return f"{os.getpid()}{int(time.time() * 1000) % 10**8}"


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _config(tmp_path: Path, name: str, devices: int, *, lr: float = 0.05, max_steps: int = 12,
            checkpoint: int | None = None, batch: int = 16, model: str = "mlp", eval_every: float = 0.5) -> Path:
    return write_config(tmp_path / f"{name}.yaml", digits_config(
        name, seed=5, devices=devices, rate=1000, model=model, lr=lr, momentum=0.0, weight_decay=0.0, batch=batch,
        max_steps=max_steps, eval_s=eval_every, checkpoint={"every_steps": checkpoint}))


def _produce(cfg_path: Path, bootstrap: str, run_id: str, seconds: float) -> None:
    cfg = load_config(cfg_path)
    run = f"{cfg.name}-{cfg.algorithm.name}-{run_id}"
    stream_producer(RunPlan.resolve(cfg), bootstrap, run, list(range(cfg.devices.count))).run_for(seconds)


def _start(cfg_path: Path, bootstrap: str, run_id: str, out: Path, world: int, **env) -> list[subprocess.Popen]:
    port = free_port()
    cmd = [PY, "-m", "edgestream.cli", "train", str(cfg_path), "--run-id", run_id, "--bootstrap", bootstrap,
           "--out", str(out)]
    procs = []
    for r in range(world):
        e = os.environ.copy()
        e.update(RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK="0",
                 OMP_NUM_THREADS="1", EDGESTREAM_RENDEZVOUS_TIMEOUT_S="30", **{k: str(v) for k, v in env.items()})
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs




def _one_line(err: str) -> str:
    """stderr of a trainer that failed: exactly one line, no traceback."""
    text = err.strip()
    assert text.count("\n") == 0 and "Traceback" not in text, text[-3000:]
    return text


# ---------------------------------------------------------------- 1. a hostile burst mid-run
def _burst_cfg(name: str, algorithm: str, params: dict, devices: int, model: str) -> object:
    # a slow stream: the trainers wait at its head, so the burst reaches them at once, with ~7 s of the 30
    # steps left after it (at 120 samples/s a loaded host's burst, whose step lines come buffered, landed
    # after the last step)
    return validate_dict(digits_config(
        name, seed=2, devices=devices, rate=60, model=model, lr=0.1, momentum=0.0, weight_decay=0.0,
        algorithm=algorithm, params=params, max_steps=30, eval_s=1.0))


@pytest.mark.parametrize("algorithm,params,devices,model", [("ddl", {}, 2, "cnn-small"), ("ssp", {"s": 2}, 3, "mlp")])
def test_a_hostile_burst_mid_run_is_dead_lettered_and_the_run_finishes(bootstrap, tmp_path, algorithm, params,
                                                                        devices, model):
    name, run_id = f"burst-{algorithm}", _run_id()
    run = f"{name}-{algorithm}-{run_id}"
    cfg = _burst_cfg(name, algorithm, params, devices, model)
    result: dict = {}

    def go() -> None:
        try:
            result["out"] = run_config(cfg, "local", out=tmp_path, run_id=run_id, bootstrap=bootstrap, progress=False)
        except Exception as exc:  # noqa: BLE001 - reported below
            result["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    ranks = tmp_path / run / "ranks"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and sum(e.get("kind") == "step" for e in _records(ranks / "0.jsonl")) < 3:
        time.sleep(0.2)
    assert t.is_alive() and "error" not in result, result
    # 40 malformed messages (garbage, a truncated header, empty values) into device 0's topic, mid-run
    hostile = [b"garbage %d" % i if i % 3 == 0 else (b"\x00" * (i % 7) if i % 3 == 1 else b"") for i in range(40)]
    p = Producer(producer_config(bootstrap))
    for v in hostile:
        p.produce(device_topic(run, 0), value=v, key=b"0")
    assert p.flush(30) == 0
    t.join(240)
    assert not t.is_alive() and "error" not in result, result.get("error")
    run_dir, summary = result["out"]
    ranks_summary = [json.loads((run_dir / "ranks" / f"{r}.summary.json").read_text()) for r in range(devices)]
    assert ranks_summary[0]["dlq"] == 40 and all(s["dlq"] == 0 for s in ranks_summary[1:]), ranks_summary
    # device 0 trained to its stop on non-empty batches only; its step lines count the 40 rejected messages
    steps = [e for e in _records(run_dir / "ranks" / "0.jsonl") if e.get("kind") == "step" and "batch" in e]
    assert steps and all(e["batch"] > 0 and e.get("loss") is not None for e in steps), \
        [(e["step"], e["batch"], e.get("loss")) for e in steps if not e["batch"] or e.get("loss") is None]
    assert sum(e["dlq"] for e in steps) == 40
    # the DLQ holds the 40 rejected messages, each with its reason and source offset
    c = Consumer(consumer_config(bootstrap, f"check-{run}"))
    c.assign([TopicPartition(dlq_topic(run), 0, 0)])
    msgs, until = [], time.monotonic() + 20
    while len(msgs) < 40 and time.monotonic() < until:
        msgs += [m for m in c.consume(100, timeout=0.5) if m.error() is None]
    msgs += [m for m in c.consume(100, timeout=0.5) if m.error() is None]
    c.close()
    assert len(msgs) == 40
    heads = [dict(m.headers()) for m in msgs]
    assert all(h["reason"] and h["source_topic"] == device_topic(run, 0).encode() for h in heads)
    assert sorted(m.value() or b"" for m in msgs) == sorted(hostile)


# ---------------------------------------------------------------- 6. an unexpected error ends the rank failed
@pytest.mark.parametrize("devices", [2, 3])
def test_an_unexpected_error_ends_the_rank_failed_without_a_final_checkpoint(bootstrap, tmp_path, devices):
    # one evaluation at the first step, then none due: a final evaluation would show as a second one
    cfg_path = _config(tmp_path, f"crash{devices}", devices, max_steps=40, checkpoint=4, eval_every=1000.0)
    run_id = _run_id()
    _produce(cfg_path, bootstrap, run_id, 1.5)
    out = tmp_path / "runs"
    results = _finish(_start(cfg_path, bootstrap, run_id, out, devices, EDGESTREAM_TEST_FAIL_AT_STEP=6))
    ranks = out / f"crash{devices}-ddl-{run_id}" / "ranks"
    for rank, (code, _, err) in enumerate(results):
        assert code != 0, f"rank {rank} exited 0: {err[-2000:]}"
        line = _one_line(err)
        assert f"device {rank}" in line and "step 6" in line and "EDGESTREAM_TEST_FAIL_AT_STEP" in line, line
        assert not (ranks / f"{rank}.summary.json").exists() or \
            json.loads((ranks / f"{rank}.summary.json").read_text())["status"] == "failed"
        log = (ranks / f"{rank}.log").read_text()
        assert "status failed" in log and "checkpoint: step 6" not in log
        # the last checkpoint is the one before the failure (step 4), none written after it
        assert [x for x in log.splitlines() if "checkpoint: step" in x][-1].endswith("checkpoint: step 4")
    evals = [e for e in _records(ranks / "0.jsonl") if e.get("kind") == "eval"]
    assert len(evals) == 1 and evals[0]["step"] < 6, evals  # no final evaluation after the failure


# ---------------------------------------------------------------- 7. a diverging loss stops the run
@pytest.mark.parametrize("model,data", [
    ("mlp", {"dataset": "digits"}),
    # beyond the defaults: 3 channels, 12 x 12, 13 classes
    ("cnn-small", {"dataset": "synthetic", "shape": [3, 12, 12], "num_classes": 13, "n_train": 600, "n_test": 100}),
])
def test_a_diverging_loss_stops_the_run_naming_the_step(bootstrap, tmp_path, model, data):
    name = f"nan-{model}"
    cfg_path = _config(tmp_path, name, 2, lr=1e6, max_steps=60)
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["model"]["name"] = model
    cfg["data"] = data
    cfg_path.write_text(yaml.safe_dump(cfg))
    run_id = _run_id()
    _produce(cfg_path, bootstrap, run_id, 1.5)
    out = tmp_path / "runs"
    results = _finish(_start(cfg_path, bootstrap, run_id, out, 2))
    ranks = out / f"{name}-ddl-{run_id}" / "ranks"
    failed = [(rank, code, err) for rank, (code, _, err) in enumerate(results) if code != 0]
    assert len(failed) == 2, [(c, e[-1500:]) for c, _, e in results]
    named = []
    for rank, _, err in failed:
        line = _one_line(err)
        assert f"device {rank}" in line, line
        if "non-finite" in line:
            named.append(line)
            assert "step " in line
    assert named, [e for _, _, e in failed]
    steps = [e for e in _records(ranks / "0.jsonl") if e.get("kind") == "step" and "loss" in e]
    assert len(steps) < 60  # stopped early, not at max_steps


# ---------------------------------------------------------------- 8. disk trouble
@contextmanager
def _tmpfs(size: str, *options: str):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.fail("the disk tests mount a tmpfs: they need root and mount (the project's machines and CI have both)")
    d = Path(tempfile.mkdtemp(prefix="es-tmpfs-"))
    opts = ",".join((f"size={size}", *options))
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        d.rmdir()
        pytest.fail(f"cannot mount a tmpfs for the disk tests: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
        d.rmdir()


def test_a_read_only_output_folder_is_named_in_one_line(bootstrap, tmp_path):
    cfg_path = _config(tmp_path, "ro", 2)
    with _tmpfs("1m", "ro") as folder:
        results = _finish(_start(cfg_path, bootstrap, "ro1", folder / "runs", 2))
    for rank, (code, _, err) in enumerate(results):
        line = _one_line(err)
        assert code != 0 and f"device {rank}" in line and str(folder) in line and "read-only" in line.lower(), line


@pytest.mark.parametrize("fill_kb", [0, 24])
def test_a_full_disk_is_named_in_one_line(bootstrap, tmp_path, fill_kb):
    """fill_kb 0: the disk is full before the trainers start; 24: they start and fill it while training."""
    cfg_path = _config(tmp_path, f"full{fill_kb}", 2, max_steps=400, checkpoint=50)
    run_id = _run_id()
    _produce(cfg_path, bootstrap, run_id, 1.0)
    with _tmpfs("64k") as folder:
        filler = fill_disk(folder)
        if fill_kb:  # fill_kb left for the trainers
            os.truncate(filler, max(0, filler.stat().st_size - fill_kb * 1024))
        results = _finish(_start(cfg_path, bootstrap, run_id, folder / "runs", 2))
    lines = []
    for rank, (code, _, err) in enumerate(results):
        lines.append(_one_line(err))
        assert code != 0 and f"device {rank}" in lines[-1], lines[-1]
    # the trainer that hit the full disk names the path; a peer whose collective it left may name that
    full = [x for x in lines if str(folder) in x and "no space left" in x.lower()]
    assert full and all(x in full or "collective" in x for x in lines), lines
    if not fill_kb:  # full from the start: every trainer meets it
        assert len(full) == 2, lines
