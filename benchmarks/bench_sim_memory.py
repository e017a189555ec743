"""Simulator memory over a run's steps when the streams outrun training (issue 35, item 2).

`--devices` devices (default 256) of digits streaming `--rate` samples/s each (default 1,000), mlp,
`--algorithm` (default local-sgd, tau 1) with a fixed batch of 8, persist buffer, calibrated compute;
for each of `--steps` (default 10,40,160) one run in a fresh process with 1 torch thread, printing the
resident memory after the engine was built, at the end, and the process's peak (ru_maxrss). Flat
means the peak does not grow with the steps.

    python benchmarks/bench_sim_memory.py [--devices 256] [--rate 1000] [--steps 10,40,160]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def child(args: argparse.Namespace) -> dict:
    import torch

    from edgestream.config import validate_dict
    from edgestream.metrics import EventLog
    from edgestream.sim.engine import SimEngine

    torch.set_num_threads(1)
    params = {"tau": 1} if args.algorithm in ("local-sgd", "fixed-adacomm", "adacomm") else {}
    cfg = {"name": "mem", "seed": 0, "data": {"dataset": "digits", "partition": "iid"},
           "devices": {"count": args.devices, "rates": {"distribution": "constant", "rate": args.rate}},
           "model": {"name": "mlp"}, "optim": {"lr": 0.05, "momentum": 0.9},
           "algorithm": {"name": args.algorithm, "batch": {"policy": "fixed", "size": 8}, "buffer": "persist",
                         "params": params},
           "stop": {"max_steps": args.child_steps, "max_time_s": 1e6}, "eval": {"every_s": 1e5}}
    engine = SimEngine(validate_dict(cfg), EventLog(None))
    built = _rss_mb()
    t0 = time.perf_counter()
    engine.run()
    return {"devices": args.devices, "rate": args.rate, "algorithm": args.algorithm, "steps": args.child_steps,
            "device_steps": engine.stats.device_steps, "wall_s": round(time.perf_counter() - t0, 2),
            "rss_built_mb": round(built), "rss_end_mb": round(_rss_mb()),
            "rss_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=256)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--algorithm", default="local-sgd")
    ap.add_argument("--steps", default="10,40,160")
    ap.add_argument("--child-steps", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_steps:
        print(json.dumps(child(args)))
        return
    rows = []
    for steps in (int(s) for s in args.steps.split(",")):
        out = subprocess.run([sys.executable, __file__, "--devices", str(args.devices), "--rate", str(args.rate),
                              "--algorithm", args.algorithm, "--child-steps", str(steps)],
                             check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    print("| steps | device-steps | RSS after build MB | RSS at end MB | peak RSS MB |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['steps']} | {r['device_steps']:,} | {r['rss_built_mb']:,} | {r['rss_end_mb']:,} | {r['rss_peak_mb']:,} |")


if __name__ == "__main__":
    main()
