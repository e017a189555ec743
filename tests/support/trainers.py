"""Real trainer processes started the way torchrun starts them, without an orchestrator: one `edgestream train`
per rank with RANK, WORLD_SIZE, MASTER_ADDR/PORT in its environment, on streams produced into the broker first.

* `_config(tmp_path, name, devices, algorithm, **extra)`: a small digits run (cnn-small, 16 steps) written as YAML;
* `_produce(cfg_path, bootstrap, run_id, seconds)`: its streams, by an in-process producer;
* `_start(cfg_path, bootstrap, run_id, out, ranks, world, port, args=(), **env)`: the trainers (`_env`: a rank's
  environment);
* `_finish(procs, timeout)`: every process's (code, stdout, stderr); on a hang all are killed and it raises.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from factories import digits_config, write_config

from edgestream.config import load_config
from edgestream.producers.from_plan import stream_producer
from edgestream.runner.plan import RunPlan

PY = sys.executable


def _config(tmp_path: Path, name: str, devices: int, algorithm: dict, **extra) -> Path:
    raw = digits_config(name, seed=3, devices=devices, rate=1500, model="cnn-small", weight_decay=0.0,
                        algorithm=algorithm, max_steps=16, max_time_s=300, eval_s=1.0)
    return write_config(tmp_path / f"{name}.yaml", {**raw, **extra})


def _produce(cfg_path: Path, bootstrap: str, run_id: str, seconds: float) -> None:
    cfg = load_config(cfg_path)
    run = f"{cfg.name}-{cfg.algorithm.name}-{run_id}"
    stream_producer(RunPlan.resolve(cfg), bootstrap, run, list(range(cfg.devices.count))).run_for(seconds)


def _env(rank: int, world: int, port: int, **extra) -> dict:
    env = os.environ.copy()
    env.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               LOCAL_RANK="0", OMP_NUM_THREADS="1")
    env.update({k: str(v) for k, v in extra.items()})  # LOCAL_RANK too (the rank-to-GPU rule's input)
    return env


def _start(cfg_path: Path, bootstrap: str, run_id: str, out: Path, ranks, world: int, port: int,
           args=(), **env) -> list[subprocess.Popen]:
    cmd = [PY, "-m", "edgestream.cli", "train", str(cfg_path), "--run-id", run_id, "--bootstrap", bootstrap,
           "--out", str(out), *args]
    return [subprocess.Popen(cmd, env=_env(r, world, port, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for r in ranks]


def _finish(procs: list[subprocess.Popen], timeout: float = 240) -> list[tuple[int, str, str]]:
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append((p.returncode, out, err))
    return results
