"""Simulator at scale: a 1,000-device ScaDLES run to a target accuracy, timed on this machine.

ScaDLES (rate-proportional batches b_i in [min, max], weighted aggregation, linear LR scaling) on
`--devices` devices (default 1,000) streaming the synthetic dataset (`--n-train` samples of 1x8x8,
10 classes: about 64 samples per device at 1,000 devices, so batches do not just cycle a few samples)
with rates from the S1 preset, mlp, dense exchange, batched compute (edgestream.sim.batched), one
torch thread. The run stops at `--target` test accuracy (evaluated every `--eval-every` virtual
seconds) or at `--max-time` virtual seconds.

Printed and recorded (benchmarks/results via common.record): wall seconds of the run (the engine
already built) and of setup, simulated device-steps, device-steps per wall second, the virtual time at
which the target was reached, the final accuracy, and the peak resident memory of the process
(`ru_maxrss`: the whole process, dataset and torch included). Runs in a fresh child process so the
peak memory is this run's alone.

`--dataset digits` streams scikit-learn's digits (1,438 training samples) instead, iid; with more devices
than samples the devices share them (`data.share_samples`: device d streams sample d mod 1,438's shard,
one sample each).

`--algorithm ddl` (or any other) runs that algorithm instead with a fixed batch of `--batch` (default 16)
and the truncate buffer, on the same data, rates and model.

    python benchmarks/bench_sim_scale.py [--devices 1000] [--target 0.9] [--n-train 64000] [--algorithm scadles]
    python benchmarks/bench_sim_scale.py --dataset digits --devices 10000 [--algorithm ddl]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def synthetic_data(n_train: int, signal: float = 5.0) -> dict:
    """The data block of these runs: synthetic 1x8x8 samples of 10 classes, iid shards (also
    bench_sim_speed.py's `--dataset synthetic`)."""
    return {"dataset": "synthetic", "shape": [1, 8, 8], "num_classes": 10, "n_train": n_train,
            "n_test": 2000, "signal": signal, "partition": "iid"}


def config(args: argparse.Namespace) -> dict:
    return {
        "name": f"scale-{args.algorithm}-{args.devices}", "seed": 0,
        "data": (synthetic_data(args.n_train, args.signal) if args.dataset == "synthetic" else
                 {"dataset": "digits", "partition": "iid", "share_samples": True}),
        "devices": {"count": args.devices, "rates": {"distribution": "uniform", "low": 20, "high": 100},
                    "compute": {"base_s": 0.2, "per_sample_s": 0.002}},
        "model": {"name": "mlp"},
        "optim": {"lr": args.lr, "momentum": 0.9, "weight_decay": 0.0001},
        "algorithm": ({"name": "scadles", "batch": {"policy": "rate", "min": 8, "max": 64},
                       "buffer": "truncate", "params": {"base_batch": 16}} if args.algorithm == "scadles" else
                      {"name": args.algorithm, "batch": {"policy": "fixed", "size": args.batch},
                       "buffer": "truncate"}),
        "stop": {"target_accuracy": args.target, "max_time_s": args.max_time},
        "eval": {"every_s": args.eval_every},
    }


def measure(args: argparse.Namespace) -> dict:
    """One run in this process (call it in a fresh process for a clean peak memory)."""
    import torch

    from edgestream.config import validate_dict
    from edgestream.metrics import EventLog
    from edgestream.sim.engine import SimEngine

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    events = EventLog(None)
    engine = SimEngine(validate_dict(config(args)), events, batch_compute=True)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.run()
    wall = time.perf_counter() - t0
    summary = events.summary(target_accuracy=args.target, wall_s=wall, engine="sim",
                             **engine.extra_summary(wall))
    n = engine.stats.device_steps
    return {
        "devices": args.devices, "algorithm": args.algorithm, "model": "mlp",
        "dataset": "synthetic 1x8x8" if args.dataset == "synthetic" else "digits",
        "n_train": len(engine.data.dataset.y_train), "samples_per_device": max(len(s) for s in engine.data.shards), "target_accuracy": args.target, "compute_path": engine.compute_mode,
        "setup_s": round(setup, 2), "wall_s": round(wall, 2), "device_steps": n,
        "steps": min(c.step for c in engine.contexts),
        "device_steps_per_wall_s": round(n / wall, 1),
        "virtual_time_to_target_s": summary["time_to_target_s"],
        "virtual_time_s": summary["virtual_time_s"], "final_accuracy": summary["final_accuracy"],
        "stop_reason": summary["stop_reason"], "samples_trained": summary["samples_trained"],
        "rss_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "wall_profile_s": summary["wall_profile_s"],
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--dataset", choices=("synthetic", "digits"), default="synthetic",
                    help="synthetic 1x8x8 (--n-train, --signal) or digits (1,438 train samples: with more devices "
                         "they share samples, data.share_samples)")
    ap.add_argument("--n-train", type=int, default=64000, help="synthetic only")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--signal", type=float, default=5.0, help="synthetic class-pattern strength (difficulty)")
    ap.add_argument("--max-time", type=float, default=600.0, help="virtual seconds")
    ap.add_argument("--eval-every", type=float, default=2.0, help="virtual seconds")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--algorithm", default="scadles",
                    help="scadles (rate batches 8..64) or any algorithm with a fixed batch (--batch, truncate)")
    ap.add_argument("--batch", type=int, default=16, help="the fixed batch of an algorithm other than scadles")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        sys.exit(0)
    cmd = [sys.executable, __file__, "--child"] + sys.argv[1:]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-4000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{row['devices']} devices, {row['algorithm']}/mlp on {row['dataset']} ({row['n_train']} samples, "
          f"at most {row['samples_per_device']} a device): "
          f"{row['stop_reason']} at virtual {row['virtual_time_s']} s (target {row['target_accuracy']} at "
          f"{row['virtual_time_to_target_s']} s, final accuracy {row['final_accuracy']}); wall {row['wall_s']} s "
          f"(+{row['setup_s']} s setup), {row['device_steps']} device-steps = "
          f"{row['device_steps_per_wall_s']:,.0f} /s, peak RSS {row['rss_peak_mb']:,.0f} MB", file=sys.stderr)
    from common import record  # noqa: E402

    record("sim_scale", row)
