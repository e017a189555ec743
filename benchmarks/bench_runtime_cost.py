"""The data path's cost in the real runtime: trainer steps/s against the simulator's compute-only rate.

The same config (digits, cnn-small, ddl, fixed batch 64, persist buffer) runs as M real trainer
processes (`edgestream train`, gloo) on streams produced ahead of time, so data is always there; the
simulator's compute-only rate is 1 / t(b), t(b) = a + c b from its calibration of the same model on
this machine (`edgestream.sim.costs.calibrate`, one torch thread: each trainer gets one core's
thread too). Ratio = real steps/s / compute-only steps/s (target >= 0.8). Also reported: the per-step
split wait / compute / communication from the rank event files.

    python benchmarks/bench_runtime_cost.py [--devices 1,2] [--steps 120]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import bench_broker, record  # noqa: E402

BATCH = 64
WARMUP_STEPS = 10


def _config(path: Path, devices: int, steps: int) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({
        "name": f"cost{devices}", "seed": 0, "data": {"dataset": "digits"},
        "devices": {"count": devices, "rates": {"distribution": "constant", "rate": 4000}},
        "model": {"name": "cnn-small"}, "optim": {"lr": 0.05, "momentum": 0.9},
        "algorithm": {"name": "ddl", "buffer": "persist", "batch": {"policy": "fixed", "size": BATCH}},
        "stop": {"max_steps": steps, "max_time_s": 600, "target_accuracy": None}, "eval": {"every_s": 1000},
    }))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def real_run(bootstrap: str, devices: int, steps: int, work: Path) -> dict:
    from edgestream.config import load_config
    from edgestream.producers.from_plan import stream_producer
    from edgestream.runner.plan import RunPlan

    cfg_path = _config(work / f"cost{devices}.yaml", devices, steps)
    cfg = load_config(cfg_path)
    run_id = f"b{int(time.time())}{devices}"
    need_s = (steps * BATCH) / 4000 + 0.5  # produce every sample the run needs before it starts
    plan = RunPlan.resolve(cfg)
    stream_producer(plan, bootstrap, plan.run_name(run_id), list(range(devices))).run_for(need_s)
    port = _free_port()
    procs = []
    for r in range(devices):
        env = os.environ.copy()
        env.update(RANK=str(r), WORLD_SIZE=str(devices), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   LOCAL_RANK="0", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-m", "edgestream.cli", "train", str(cfg_path), "--run-id",
                                       run_id, "--bootstrap", bootstrap, "--out", str(work / "runs"),
                                       "--no-digest"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True))
    for p in procs:
        _, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise SystemExit(f"trainer failed: {err[-2000:]}")
    ranks = work / "runs" / plan.run_name(run_id) / "ranks"
    per_rank = []
    for r in range(devices):
        lines = [json.loads(x) for x in open(ranks / f"{r}.jsonl")]
        per_rank.append([e for e in lines if e["kind"] == "step"])
    rate = min((len(s) - WARMUP_STEPS) / (s[-1]["time"] - s[WARMUP_STEPS - 1]["time"]) for s in per_rank)
    timed = [e for s in per_rank for e in s[WARMUP_STEPS:]]
    split = {k: sum(e[k] for e in timed) / len(timed) for k in ("wait_s", "compute_s", "comm_s")}
    step_s = 1.0 / rate
    split["other_s"] = max(0.0, step_s - sum(split.values()))
    return {"steps_per_s": round(rate, 2), "step_ms": round(1000 * step_s, 2),
            "split_ms": {k: round(1000 * v, 2) for k, v in split.items()},
            "split_share": {k: round(v / step_s, 3) for k, v in split.items()}}


def compute_only() -> dict:
    import torch

    from edgestream.data import load_dataset
    from edgestream.models import build_model
    from edgestream.sim.costs import calibrate

    torch.set_num_threads(1)
    ds = load_dataset("digits", None, seed=0)
    torch.manual_seed(0)
    model = build_model("cnn-small", ds.shape, ds.num_classes)
    a, c = calibrate(model, ds.shape, ds.num_classes, repeats=20)
    t = a + c * BATCH
    return {"a_s": a, "c_s": c, "step_ms": round(1000 * t, 3), "steps_per_s": round(1 / t, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", default="1,2")
    ap.add_argument("--steps", type=int, default=120)
    args = ap.parse_args()
    sim = compute_only()
    results = []
    with bench_broker() as (bootstrap, _), tempfile.TemporaryDirectory() as tmp:
        for m in (int(x) for x in args.devices.split(",")):
            real = real_run(bootstrap, m, args.steps, Path(tmp))
            results.append({"devices": m, "real": real, "ratio": round(real["steps_per_s"] / sim["steps_per_s"], 3)})
            print(f"{m} device(s): real {real['steps_per_s']} steps/s vs compute-only {sim['steps_per_s']} -> "
                  f"ratio {results[-1]['ratio']}; split {real['split_share']}", flush=True)
    record("runtime_cost", {"compute_only": sim, "runs": results, "batch": BATCH,
                            "target": ">= 0.8 (real steps/s over the simulator's compute-only rate)"})


if __name__ == "__main__":
    main()
