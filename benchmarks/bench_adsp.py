"""ADSP vs BSP, SSP(s=3) and Fixed ADACOMM on the parameter server, in the simulator (paper 000, Fig. 4
and Fig. 5(e)).

1. 3 workers whose mini-batch times are 1:1:3 (000 section 4.1 / 5.2): virtual time to a target test
   accuracy and to a target test loss. Paper 000: ADSP converges 80 %, 53 % and 33 % faster than
   BSP, SSP and Fixed ADACOMM (convergence time on Cifar-10).
2. The same with 50 ms links instead of 5 ms (000 Fig. 6: ADSP's lead grows with the delay).
3. 18 workers at heterogeneity degree H = max v / min v = 3.2 (000 Fig. 5(e)): the paper's 18 EC2
   workers (7 t2.large, 5 t2.xlarge, 4 t2.2xlarge, 2 t3.xlarge) emulated as step-time multipliers
   3.2, 1.8, 1.0, 1.6 (our reading of their relative speeds; H = 3.2).

Digits, the mlp, plain SGD (lr 0.1, momentum 0: PS algorithms with server momentum and async pushes
diverge), batch 32; SSP also with lr / M ("ssp-lr/M": each of the M workers' gradients scaled as
ADSP's global lr 1/M scales its commits -- with 18 workers SSP at lr 0.1 diverges), links of 5 ms + 50 Mbit/s. The paper's time scales (check period 60 s, epoch 20
min, evaluation window 60 s) are scaled to this workload, which converges in tens of virtual seconds:
Gamma = 1 s, epoch 20 s, window 1 s (the same 1 : 20 : 1 ratios). Times are virtual seconds, from
evaluations every 0.5 s. Figures land in bench-out/adsp.json.

    python benchmarks/bench_adsp.py [--seeds 0,1] [--target 0.95] [--target-loss 0.2] [--only three,delay,h32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import record  # noqa: E402

from edgestream.config import validate_dict  # noqa: E402
from edgestream.metrics import EventLog  # noqa: E402
from edgestream.sim.engine import SimEngine  # noqa: E402

ALGOS: dict[str, dict[str, Any]] = {
    "adsp": {"name": "adsp", "params": {"gamma_s": 1.0, "epoch_s": 20.0, "eval_s": 1.0}},
    "bsp": {"name": "bsp"},
    "ssp": {"name": "ssp", "params": {"s": 3}},
    "fixed-adacomm-ps": {"name": "fixed-adacomm-ps"},
    "ssp-lr/M": {"name": "ssp", "params": {"s": 3}, "lr_over_m": True},
}
PAPER_REDUCTION = {"bsp": 0.80, "ssp": 0.53, "fixed-adacomm-ps": 0.33}  # 000 section 5.2, Fig. 4(b)
H32_STATIC = [3.2] * 7 + [1.8] * 5 + [1.0] * 4 + [1.6] * 2


def config(algo: str, static: list[float], seed: int, target: float, max_time: float, latency_ms: float) -> Any:
    alg = dict(ALGOS[algo])
    lr = 0.1 / len(static) if alg.pop("lr_over_m", False) else 0.1
    alg["batch"] = {"policy": "fixed", "size": 32}
    return validate_dict({
        "name": "adsp-bench-" + algo.replace("/", "-"), "seed": seed, "data": {"dataset": "digits"}, "model": {"name": "mlp"},
        "devices": {"count": len(static), "rates": {"distribution": "constant", "rate": 20000},
                    "compute": {"base_s": 0.01, "per_sample_s": 0.0005, "static": static},
                    "network": {"latency_ms": latency_ms, "bandwidth_mbps": 50}},
        "algorithm": alg,
        "optim": {"lr": lr, "momentum": 0.0, "weight_decay": 0.0},
        "stop": {"max_time_s": max_time, "target_accuracy": target}, "eval": {"every_s": 0.5}})


def run(algo: str, static: list[float], seed: int, target: float, target_loss: float, max_time: float,
        latency_ms: float) -> dict:
    log = EventLog(None, keep=True)
    engine = SimEngine(config(algo, static, seed, target, max_time, latency_ms), log)
    t0 = time.perf_counter()
    engine.run()
    wall = time.perf_counter() - t0
    evals = [e for e in log.records if e["kind"] == "eval"]
    to_acc = next((e["time"] for e in evals if e["accuracy"] >= target), None)
    to_loss = next((e["time"] for e in evals if e["loss"] <= target_loss), None)
    steps = [e for e in log.records if e["kind"] == "step"]
    ps = engine.ps.summary()
    out = {"time_to_accuracy_s": to_acc, "time_to_loss_s": to_loss, "final_accuracy": evals[-1]["accuracy"],
           "device_steps": len(steps), "pushes": sum(ps["pushes"]), "blocked_s_total": ps["blocked_s_total"],
           "wall_s": round(wall, 1)}
    if algo == "adsp":
        a = ps["adsp"]
        out.update(commit_spread_max=a["commit_spread_max"], final_d=a["d"],
                   d_trace=[d for _, d in a["d_trace"]][:40])
    return out


def mean(xs: list[float | None]) -> float | None:
    return round(statistics.fmean(xs), 3) if xs and all(x is not None for x in xs) else None


def compare(static: list[float], seeds: list[int], target: float, target_loss: float, max_time: float,
            tag: str, latency_ms: float = 5.0) -> dict:
    per = {a: [run(a, static, s, target, target_loss, max_time, latency_ms) for s in seeds] for a in ALGOS}
    out: dict[str, Any] = {"workers": len(static), "static": static, "latency_ms": latency_ms,
                           "H": round(max(static) / min(static), 2)}
    for algo, runs in per.items():
        out[algo] = {"time_to_accuracy_s": mean([r["time_to_accuracy_s"] for r in runs]),
                     "time_to_loss_s": mean([r["time_to_loss_s"] for r in runs]),
                     "runs": runs}
    a_acc, a_loss = out["adsp"]["time_to_accuracy_s"], out["adsp"]["time_to_loss_s"]
    out["reduction_vs"] = {}
    for algo in ("bsp", "ssp", "fixed-adacomm-ps", "ssp-lr/M"):
        b_acc, b_loss = out[algo]["time_to_accuracy_s"], out[algo]["time_to_loss_s"]
        out["reduction_vs"][algo] = {
            "accuracy": round(1 - a_acc / b_acc, 3) if a_acc and b_acc else None,
            "loss": round(1 - a_loss / b_loss, 3) if a_loss and b_loss else None,
            "paper": PAPER_REDUCTION.get(algo)}
    print(f"== {tag}: {out['reduction_vs']}", file=sys.stderr)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--target", type=float, default=0.95, help="test accuracy that ends each run")
    ap.add_argument("--target-loss", type=float, default=0.2, help="test loss whose time is also reported")
    ap.add_argument("--max-time", type=float, default=60.0, help="virtual seconds before a run is cut")
    ap.add_argument("--only", default="three,delay,h32")
    args = ap.parse_args()
    torch.set_num_threads(1)  # tiny model: threads only contend
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.perf_counter()
    result: dict[str, Any] = {"dataset": "digits", "model": "mlp", "target_accuracy": args.target,
                              "target_loss": args.target_loss, "seeds": seeds}
    if "three" in args.only:
        result["three_workers_1_1_3"] = compare([1, 1, 3], seeds, args.target, args.target_loss, args.max_time,
                                                "3 workers 1:1:3")
    if "delay" in args.only:  # 000 Fig. 6: extra communication delay favours the local-update methods
        result["three_workers_latency_50ms"] = compare([1, 1, 3], seeds, args.target, args.target_loss,
                                                       args.max_time, "3 workers 1:1:3, 50 ms", latency_ms=50.0)
    if "h32" in args.only:
        result["h32_18_workers"] = compare(H32_STATIC, seeds, args.target, args.target_loss, args.max_time,
                                           "18 workers H=3.2")
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    record("adsp", result)
