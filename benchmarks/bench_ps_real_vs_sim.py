"""Real vs simulated parameter-server runs: ADSP, SSP and BSP, 3 workers at compute 1:1:3, digits + mlp.

The same config goes to `run_config(cfg, "local", ...)` (a producer, the parameter server and one trainer
process per device, all through Kafka: edgestream.ps) and to `run_config(cfg, "sim", ...)` (virtual
time, the compute model calibrated on this machine: devices.compute.base_s / per_sample_s unset).
Figures per algorithm: time to the target test accuracy (stream seconds on the real run, virtual
seconds in the simulator), the ratio real / sim, and what makes up the difference: per engine, the
device steps taken by then and the mean per-step wait (stream), compute, communication (push + pull,
blocked pulls included) and blocked seconds from the step lines up to the target time; the PS's own
figures (summary["ps"]) on both.

Setup: constant 5,000 samples/s per device (a batch of 32 every 6.4 ms), batch 32, plain SGD lr 0.1
(momentum 0), links 5 ms + 1,000 Mbit/s in the simulator (the real run has the broker it is given),
target test accuracy 0.95 (digits + mlp passes 0.85 at the simulator's first evaluations: too coarse a
clock), evaluations every 0.25 s, max 40 s. ADSP with time scales for a short run (gamma_s 1, epoch_s
20, eval_s 2); SSP s = 3.

    python benchmarks/bench_ps_real_vs_sim.py [--algorithms adsp,ssp,bsp] [--target 0.95] [--max-time 40] [--eval-every 0.25]

Figures land in bench-out/ps_real_vs_sim.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import bench_broker, record  # noqa: E402

from edgestream.config import validate_dict  # noqa: E402
from edgestream.runner import run_config  # noqa: E402

STATIC = [1.0, 1.0, 3.0]
ALGOS: dict[str, dict[str, Any]] = {
    "adsp": {"name": "adsp", "params": {"gamma_s": 1.0, "epoch_s": 20.0, "eval_s": 2.0}},
    "ssp": {"name": "ssp", "params": {"s": 3}},
    "bsp": {"name": "bsp"},
}
PARTS = ("wait_s", "compute_s", "comm_s", "blocked_s")
PS_KEYS = ("version", "pushes", "commits", "staleness_mean", "blocked_s_total", "rejected", "adsp")


def config(alg: str, target: float, max_time: float, seed: int, eval_s: float = 0.25) -> Any:
    return validate_dict({
        "name": f"psrvs-{alg}", "seed": seed, "data": {"dataset": "digits", "partition": "iid"},
        "devices": {"count": len(STATIC), "rates": {"distribution": "constant", "rate": 5000},
                    "compute": {"static": STATIC}, "network": {"latency_ms": 5, "bandwidth_mbps": 1000}},
        "model": {"name": "mlp"}, "optim": {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0},
        "algorithm": {**ALGOS[alg], "batch": {"policy": "fixed", "size": 32}},
        "stop": {"target_accuracy": target, "max_time_s": max_time}, "eval": {"every_s": eval_s}})


def breakdown(run_dir: Path, until: float | None, world: int) -> dict[str, Any]:
    """Step lines up to `until` (the whole run when None): steps, per-step mean seconds of each part, and
    per device the summed parts and what they leave of `until` unaccounted ("other_s": start-up before
    the first step, evaluation, logging, anything between a step's requests)."""
    steps = [e for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
             if e.get("kind") == "step" and (until is None or float(e.get("time", 0.0)) <= until)]
    out: dict[str, Any] = {"steps": len(steps)}
    for k in PARTS:
        vals = [float(e.get(k) or 0.0) for e in steps]
        out[f"{k}_mean_ms"] = round(1e3 * statistics.mean(vals), 2) if vals else None
    per_device = []
    for d in range(world):
        mine = [e for e in steps if e.get("device") == d]
        row: dict[str, Any] = {"device": d, "steps": len(mine),
                               "first_step_at_s": round(min((float(e["time"]) for e in mine), default=0.0), 3)}
        for k in PARTS:
            row[k] = round(sum(float(e.get(k) or 0.0) for e in mine), 3)
        if until is not None:
            row["other_s"] = round(until - row["wait_s"] - row["compute_s"] - row["comm_s"], 3)
        per_device.append(row)
    out["per_device"] = per_device
    return out


def one(alg: str, engine: str, out: Path, bootstrap: str | None, target: float, max_time: float,
        seed: int, eval_s: float) -> dict[str, Any]:
    cfg = config(alg, target, max_time, seed, eval_s)
    t0 = time.perf_counter()
    opts = {"bootstrap": bootstrap} if engine == "local" else {}
    path, summary = run_config(cfg, engine, out=out / engine, progress=False, **opts)
    wall = time.perf_counter() - t0
    ttt = summary.get("time_to_target_s")
    ps = summary.get("ps") or {}
    return {"time_to_target_s": ttt, "final_accuracy": summary.get("final_accuracy"),
            "stop_reason": summary.get("stop_reason"), "steps": summary.get("steps"), "wall_s": round(wall, 1),
            "to_target": breakdown(path, ttt, len(STATIC)),
            "ps": {k: ({kk: ps[k].get(kk) for kk in ("d", "searches", "commit_spread_max")} if k == "adsp" else ps[k])
                   for k in PS_KEYS if k in ps}}


def table(rows: dict[str, dict]) -> str:
    lines = ["| algorithm | engine | t(acc) (s) | real / sim | steps by then | per step: wait / compute / comm "
             "(blocked) ms | device 0 by then: steps, wait + compute + comm = s, other s | first step at (s) "
             "| PS version (whole run) | wall (s) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for alg, r in rows.items():
        for engine in ("real", "sim"):
            x = r[engine]
            b = x["to_target"]
            d0 = b["per_device"][0]
            lines.append(
                f"| {alg} | {engine} | {x['time_to_target_s']} | {r['real_over_sim'] if engine == 'real' else ''} "
                f"| {b['steps']} | {b['wait_s_mean_ms']} / {b['compute_s_mean_ms']} / {b['comm_s_mean_ms']} "
                f"({b['blocked_s_mean_ms']}) | {d0['steps']}, {d0['wait_s']} + {d0['compute_s']} + {d0['comm_s']} = "
                f"{round(d0['wait_s'] + d0['compute_s'] + d0['comm_s'], 3)}, {d0.get('other_s')} "
                f"| {max(d['first_step_at_s'] for d in b['per_device'])} | {x['ps'].get('version')} | {x['wall_s']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--algorithms", default="adsp,ssp,bsp")
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--max-time", type=float, default=40.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=float, default=0.25, help="eval.every_s (both engines)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows: dict[str, dict] = {}
    with bench_broker() as (bootstrap, _), tempfile.TemporaryDirectory(prefix="psrvs-") as tmp:
        for alg in args.algorithms.split(","):
            real = one(alg, "local", Path(tmp), bootstrap, args.target, args.max_time, args.seed, args.eval_every)
            sim = one(alg, "sim", Path(tmp), None, args.target, args.max_time, args.seed, args.eval_every)
            rt, st = real["time_to_target_s"], sim["time_to_target_s"]
            rows[alg] = {"real": real, "sim": sim, "real_over_sim": round(rt / st, 3) if rt and st else None}
            print(f"== {alg}: real {rt} s, sim {st} s (wall {real['wall_s']} / {sim['wall_s']} s)",
                  file=sys.stderr, flush=True)
    print(table(rows), file=sys.stderr)
    record("ps_real_vs_sim", {"devices": len(STATIC), "static": STATIC, "target_accuracy": args.target,
                              "max_time_s": args.max_time, "eval_every_s": args.eval_every, "seed": args.seed, "cpus": os.cpu_count(),
                              "algorithms": {a: ALGOS[a] for a in rows}, "wall_s": round(time.perf_counter() - t0, 1),
                              "runs": rows, "table": table(rows)})


if __name__ == "__main__":
    main()
