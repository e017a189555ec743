"""ElasticBSP (R = 15) vs BSP, SSP (s = 3) and ASP on the parameter server, in the simulator (digits,
virtual time): total waiting time of the workers (blocked pulls, the "ps" block's blocked_s) and time
to an accuracy target.

Scenarios (each one `run_compare`, same seed and data for every algorithm):
1. "adsp-1:1:3": 3 workers at static speeds 1:1:3 (000's heterogeneity), 10 % dynamic noise.
2. "abs-1:2:3:4": 4 workers at 1:2:3:4 (001's), 20 % dynamic noise.
Every worker computes for (a + c b) static_i (1 + U(0, dynamic)) seconds per step, b = 32; lr 0.05,
no momentum (server momentum with asynchronous pushes is implicit momentum and diverges).

Paper 003 beside ours (section 6.2; its runs are 4 homogeneous GPUs whose stragglers come from
communication, so only the direction compares): ElasticBSP finishes a fixed number of epochs faster
than BSP "due to the reduction in worker waiting time" (C3F2-Net: SSP < ASP < ElasticBSP R = 15, 30
< BSP in time), and on VGG-16 converges 1.77x faster than BSP (+12.6 % final accuracy); SSP and ASP
run more iterations but learn worse on networks with fully connected layers. Fig. 4 (n = 10, R = 15):
ZipLine's barrier costs 599 ms of waiting where the BSP barrier costs more.

Figures land in bench-out/elastic_bsp.json; run folders in bench-out/elastic_bsp_runs/.

    python benchmarks/bench_elastic_bsp.py [--target 0.9] [--only adsp,abs]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import OUT, record  # noqa: E402

from edgestream.comparisons import parse_variants, run_compare  # noqa: E402
from edgestream.config import validate_dict  # noqa: E402
from edgestream.sync import ALGORITHMS  # noqa: E402

RUNS = OUT / "elastic_bsp_runs"
ELASTIC = "elastic-bsp[algorithm.params.R=15]"
WANTED = [ELASTIC, "bsp", "ssp[algorithm.params.s=3]", "asp"]
SCENARIOS = {"adsp": ("adsp-1-1-3", [1, 1, 3], 0.1), "abs": ("abs-1-2-3-4", [1, 2, 3, 4], 0.2)}


def base(name: str, static: list[int], dynamic: float, target: float) -> dict:
    return {
        "name": name, "seed": 0, "data": {"dataset": "digits", "partition": "iid"},
        "devices": {"count": len(static), "rates": {"distribution": "constant", "rate": 5000},
                    "compute": {"base_s": 0.02, "per_sample_s": 0.001, "static": static, "dynamic": dynamic},
                    "network": {"latency_ms": 2, "bandwidth_mbps": 100}},
        "model": {"name": "mlp"},
        "optim": {"lr": 0.05, "momentum": 0.0, "weight_decay": 0.0},
        "algorithm": {"name": "asp", "batch": {"policy": "fixed", "size": 32}},
        "stop": {"target_accuracy": target, "max_time_s": 120.0},
        "eval": {"every_s": 1.0},
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def scenario(key: str, target: float, algorithms: list[str]) -> dict[str, Any]:
    tag, static, dynamic = SCENARIOS[key]
    cfg = validate_dict(base(tag, static, dynamic, target))
    t0 = time.perf_counter()
    folder, summaries, table = run_compare(cfg, parse_variants(",".join(algorithms)), out=RUNS, run_id=tag,
                                           progress=False)
    print(f"== {tag} ({time.perf_counter() - t0:.0f} s wall): {folder}\n{table}", file=sys.stderr)
    rows: dict[str, dict] = {}
    for label, s in summaries.items():
        ps = s.get("ps", {})
        t = s.get("virtual_time_s") or 0.0
        row = {"time_to_target_s": s.get("time_to_target_s"), "final_accuracy": round(s["final_accuracy"], 4),
               "steps": s.get("steps"), "virtual_time_s": t, "blocked_s_total": ps.get("blocked_s_total"),
               "blocked_share": round(ps.get("blocked_s_total", 0.0) / (t * len(static)), 4) if t else None,
               "blocked_s": ps.get("blocked_s"), "pushes": ps.get("pushes"),
               "staleness_mean": ps.get("staleness_mean"), "staleness_max": ps.get("staleness_max")}
        if "barriers" in ps:
            row.update(barriers=ps["barriers"], barrier_wait_s=ps["barrier_wait_s"],
                       barrier_wait_max_s=ps["barrier_wait_max_s"], predicted_wait_s=ps["predicted_wait_s"])
        rows[label] = row
    out: dict[str, Any] = {"static": static, "dynamic": dynamic, "runs": rows}
    e = rows.get(ELASTIC)
    if e is not None:
        for other in rows:
            if other == ELASTIC:
                continue
            o = rows[other]
            out[f"vs_{other.split('[')[0]}"] = {
                "wait_reduction": ratio(o["blocked_s_total"], e["blocked_s_total"]),
                "speedup_time_to_target": ratio(o["time_to_target_s"], e["time_to_target_s"]),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=float, default=0.9, help="test accuracy that ends each run")
    ap.add_argument("--only", default="adsp,abs")
    args = ap.parse_args()
    algorithms = [a for a in WANTED if a.split("[")[0] in ALGORITHMS]
    missing = [a for a in WANTED if a not in algorithms]
    t0 = time.perf_counter()
    result: dict[str, Any] = {"model": "mlp", "dataset": "digits", "target_accuracy": args.target,
                              "algorithms": algorithms, "missing": missing}
    for key in args.only.split(","):
        result[SCENARIOS[key][0]] = scenario(key, args.target, algorithms)
    result["paper"] = ("003 6.2: ElasticBSP finishes fixed epochs faster than BSP (less waiting); VGG-16 on "
                       "ImageNet: 1.77x faster convergence than BSP, +12.6% final accuracy; Fig. 4: 599 ms "
                       "barrier wait at n = 10, R = 15")
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    record("elastic_bsp", result)


if __name__ == "__main__":
    main()
