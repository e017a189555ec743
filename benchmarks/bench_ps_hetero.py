"""Heterogeneity-aware parameter servers: DynSGD and ConSGD vs SSP at HL = 1 and HL = 2 (paper 002's table).

Paper 002 (Jiang et al., SIGMOD'17, "Experiment" table) compares run time to convergence and the number
of updates the PS applied for SSP (Petuum/Bosen), ConSGD and DynSGD at s = 3 and s = 10, with 20% of
the workers slowed down so that HL = (t_c^s + t_t^s) / (t_c^f + t_t^f) = 2. Here, in the simulator
(virtual time): 5 workers, the last one slow (20%), digits + mlp, batch 32, streams fast enough that
the per-step time is compute + push + pull. The slow worker's static compute factor f is set so that
HL counts communication too: f t_c + t_t = HL (t_c + t_t), t_c and t_t read from a one-step probe run.

Two views (figures: mean over seeds of virtual seconds to the target test accuracy, and the updates
the PS applied by then, `Coordinator.version`; per-update time = their ratio, as 002's third block):

1. Tuned: each algorithm at its best worker lr of a grid. SSP sums the updates, ConSGD scales each by
   lambda = 1/M and DynSGD averages the ones of one clock, so ConSGD/DynSGD take the SSP grid times M
   (the same per-clock step). With the server's plain SGD, ConSGD at lr eta is exactly SSP at lr
   lambda eta, so its row repeats SSP's.
2. Common lr (002's setting: one worker lr, the PS rule differs), HL = 2, s = 10: SSP's best lr and
   one where SSP diverges.

DSSP (s_low 3, r 12) is run beside them at HL = 2 on SSP's grid.

    python benchmarks/bench_ps_hetero.py [--target 0.92] [--seeds 0,1,2,3] [--lrs 0.05,0.1,0.2] [--common 0.1,0.4]

Figures land in bench-out/ps_hetero.json.
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

WORKERS = 5
SLOW = 1  # 20% of the workers, as 002's sleep() setup

#: 002's table (LR and SVM on URL and CTR): run time (s) and # updates at s = 3 and s = 10, HL = 1 and 2;
#: columns Petuum SSP, ConSGD, DynSGD
PAPER = {
    "run_time": {
        "LR-URL": {1: {3: (87, 85, 82), 10: (78, 78, 73)}, 2: {3: (250, 196, 147), 10: (549, 116, 93)}},
        "LR-CTR": {1: {3: (570, 456, 342), 10: (646, 532, 456)}, 2: {3: (2233, 1414, 546), 10: (4501, 798, 714)}},
        "SVM-URL": {1: {3: (60, 55, 51), 10: (62, 52, 44)}, 2: {3: (188, 133, 102), 10: (454, 84, 60)}},
        "SVM-CTR": {1: {3: (528, 539, 360), 10: (544, 479, 416)}, 2: {3: (3690, 1907, 873), 10: (6534, 1036, 555)}},
    },
    "updates": {
        "LR-URL": {1: {3: (847, 862, 833), 10: (949, 948, 887)}, 2: {3: (1243, 1062, 851), 10: (3756, 1144, 891)}},
        "LR-CTR": {1: {3: (278, 229, 164), 10: (492, 406, 353)}, 2: {3: (606, 404, 204), 10: (2035, 517, 453)}},
        "SVM-URL": {1: {3: (752, 687, 628), 10: (969, 824, 692)}, 2: {3: (1128, 822, 639), 10: (3518, 986, 758)}},
        "SVM-CTR": {1: {3: (322, 318, 229), 10: (467, 447, 387)}, 2: {3: (890, 511, 253), 10: (2912, 773, 434)}},
    },
}
ALGS = ("ssp", "consgd", "dynsgd")


def config(alg: str, params: dict, lr: float, static: list[float], seed: int, target: float,
           max_time: float = 10.0, steps: int | None = None) -> Any:
    return validate_dict({
        "name": f"ps-hetero-{alg}", "seed": seed, "data": {"dataset": "digits", "partition": "iid"},
        "devices": {"count": WORKERS, "rates": {"distribution": "constant", "rate": 5000},
                    "compute": {"base_s": 0.01, "per_sample_s": 0.0005, "static": static},
                    "network": {"latency_ms": 1, "bandwidth_mbps": 100}},
        "model": {"name": "mlp"},
        "optim": {"lr": lr, "momentum": 0.0, "weight_decay": 0.0},
        "algorithm": {"name": alg, "batch": {"policy": "fixed", "size": 32}, "params": params},
        "stop": {"target_accuracy": None if steps else target, "max_time_s": None if steps else max_time,
                 "max_steps": steps},
        "eval": {"every_s": 0.1},
    })


def simulate(cfg: Any) -> tuple[SimEngine, list[dict]]:
    log = EventLog(None, keep=True)
    engine = SimEngine(cfg, log)
    engine.run()
    log.close()
    return engine, log.records or []


def step_parts() -> tuple[float, float]:
    """(t_c, t_t) of a fast worker's step: compute, and push + pull on the wire (a one-step probe)."""
    _, events = simulate(config("asp", {}, 0.1, [1.0] * WORKERS, 0, 1.0, steps=1))
    step = next(e for e in events if e["kind"] == "step" and e["device"] == 0)
    return float(step["compute_s"]), float(step["comm_s"]) - float(step.get("blocked_s", 0.0))


def measured_hl(events: list[dict]) -> float:
    """Slowest over fastest mean step time (compute + communication, blocked pulls excluded)."""
    per: dict[int, list[float]] = {}
    for e in events:
        if e["kind"] == "step":
            per.setdefault(e["device"], []).append(e["compute_s"] + e["comm_s"] - e.get("blocked_s", 0.0))
    means = [statistics.mean(v) for v in per.values()]
    return max(means) / min(means)


def one(alg: str, params: dict, lr: float, static: list[float], seed: int, target: float) -> dict:
    engine, events = simulate(config(alg, params, lr, static, seed, target))
    evals = [e for e in events if e["kind"] == "eval"]
    hit = next((e for e in evals if e["accuracy"] >= target), None)
    ps = engine.ps.summary() if engine.ps is not None else {}
    return {"time_to_target_s": hit["time"] if hit else None, "updates": ps.get("version"),
            "final_accuracy": evals[-1]["accuracy"], "staleness_mean": ps.get("staleness_mean"),
            "blocked_s_total": ps.get("blocked_s_total"), "hl": measured_hl(events)}


def mean_of(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["time_to_target_s"] is not None]
    out: dict[str, Any] = {"reached": f"{len(ok)}/{len(runs)}"}
    if len(ok) == len(runs):
        out["time_to_target_s"] = round(statistics.mean(r["time_to_target_s"] for r in ok), 3)
        out["updates"] = round(statistics.mean(r["updates"] for r in ok), 1)
        out["per_update_s"] = round(out["time_to_target_s"] / out["updates"], 5)
    for k in ("staleness_mean", "blocked_s_total", "hl"):
        out[k] = round(statistics.mean(r[k] for r in runs), 3)
    return out


_CACHE: dict[tuple, dict] = {}


def cached(alg: str, params: dict, lr: float, static: list[float], seed: int, target: float) -> dict:
    key = (alg, tuple(sorted(params.items())), lr, tuple(static), seed, target)
    if key not in _CACHE:
        _CACHE[key] = one(alg, params, lr, static, seed, target)
    return _CACHE[key]


def at_lr(alg: str, params: dict, lr: float, static: list[float], seeds: list[int], target: float) -> dict:
    return {"lr": lr, **mean_of([cached(alg, params, lr, static, seed, target) for seed in seeds])}


def best_lr(alg: str, params: dict, static: list[float], seeds: list[int], lrs: list[float], target: float) -> dict:
    """Every lr of the grid over the seeds; the best (all seeds reach the target, least mean time)."""
    by_lr = {lr: at_lr(alg, params, lr, static, seeds, target) for lr in lrs}
    ok = [lr for lr, r in by_lr.items() if "time_to_target_s" in r]
    best = min(ok, key=lambda lr: by_lr[lr]["time_to_target_s"]) if ok else None
    return {**(by_lr[best] if best is not None else {"lr": None}),
            "by_lr": {str(lr): {k: r.get(k) for k in ("reached", "time_to_target_s", "updates")}
                      for lr, r in by_lr.items()}}


def vs(r: dict, base: dict) -> tuple[str, str]:
    t, u, bt, bu = r.get("time_to_target_s"), r.get("updates"), base.get("time_to_target_s"), base.get("updates")
    return (f"{bt / t:.2f}x" if t and bt else "-"), (f"{u / bu:.2f}" if u and bu else "-")


def paper_cells(hl: int, s: int, i: int) -> str:
    pt, pu = PAPER["run_time"]["LR-URL"][hl][s], PAPER["updates"]["LR-URL"][hl][s]
    st, su = PAPER["run_time"]["SVM-CTR"][hl][s], PAPER["updates"]["SVM-CTR"][hl][s]
    return (f"{pt[0] / pt[i]:.2f}x / {pu[i] / pu[0]:.2f} | {st[0] / st[i]:.2f}x / {su[i] / su[0]:.2f}")


def table(result: dict) -> str:
    head = ("| HL | s | algorithm | lr | time to target (s) | # updates | per-update (s) | speedup vs SSP "
            "| updates vs SSP | paper LR-URL: speedup / updates vs SSP | paper SVM-CTR: same |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|")
    lines = ["Tuned: each algorithm at its best lr of its grid", "", head]
    for key, rows in result["tuned"].items():
        hl, s = (int(x) for x in key.split(","))
        for i, alg in enumerate(ALGS):
            r = rows[alg]
            t, u = vs(r, rows["ssp"])
            lines.append(f"| {hl} | {s} | {alg} | {r.get('lr')} | {r.get('time_to_target_s')} | {r.get('updates')} "
                         f"| {r.get('per_update_s')} | {t} | {u} | {paper_cells(hl, s, i)} |")
    d = result.get("dssp_hl2")
    if d:
        lines.append(f"| 2 | 3..15 | dssp | {d.get('lr')} | {d.get('time_to_target_s')} | {d.get('updates')} "
                     f"| {d.get('per_update_s')} | {vs(d, result['tuned']['2,3']['ssp'])[0]} (vs SSP s=3) "
                     f"| {vs(d, result['tuned']['2,3']['ssp'])[1]} | - | - |")
    lines += ["", "Common worker lr (the paper's setting: one lr, the PS rule differs), HL = 2, s = 10", "", head]
    for lr, rows in result["common_lr_hl2_s10"].items():
        for i, alg in enumerate(ALGS):
            r = rows[alg]
            t, u = vs(r, rows["ssp"])
            lines.append(f"| 2 | 10 | {alg} | {lr} | {r.get('time_to_target_s', 'not reached')} | {r.get('updates')} "
                         f"| {r.get('per_update_s')} | {t} | {u} | {paper_cells(2, 10, i)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=float, default=0.92, help="test accuracy that ends each run")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--lrs", default="0.05,0.1,0.2", help="SSP's lr grid; ConSGD/DynSGD take it times M")
    ap.add_argument("--common", default="0.1,0.4", help="the common lrs of the paper-style comparison")
    args = ap.parse_args()
    torch.set_num_threads(1)  # a tiny model: one thread is fastest and keeps the wall time steady on a shared box
    seeds = [int(x) for x in args.seeds.split(",")]
    lrs = [float(x) for x in args.lrs.split(",")]
    grids = {"ssp": lrs, "consgd": [round(lr * WORKERS, 6) for lr in lrs], "dynsgd": [round(lr * WORKERS, 6) for lr in lrs]}
    t0 = time.perf_counter()
    t_c, t_t = step_parts()
    statics = {}
    for hl in (1, 2):
        f = 1.0 + (hl - 1.0) * (t_c + t_t) / t_c  # f t_c + t_t = HL (t_c + t_t)
        statics[hl] = [1.0] * (WORKERS - SLOW) + [round(f, 4)] * SLOW
    result: dict[str, Any] = {"dataset": "digits", "model": "mlp", "workers": WORKERS, "slow_workers": SLOW,
                              "target_accuracy": args.target, "seeds": seeds, "lr_grids": grids,
                              "t_c_s": round(t_c, 6), "t_t_s": round(t_t, 6),
                              "static": {str(k): v for k, v in statics.items()}, "tuned": {}}
    # HL = 1: no pull ever blocks at equal speeds, so s = 10 runs exactly as s = 3 (blocked_s_total 0)
    for hl, s in ((1, 3), (2, 3), (2, 10)):
        rows = result["tuned"][f"{hl},{s}"] = {}
        for alg in ALGS:
            rows[alg] = best_lr(alg, {"s": s}, statics[hl], seeds, grids[alg], args.target)
            print(f"HL={hl} s={s} {alg}: {({k: v for k, v in rows[alg].items() if k != 'by_lr'})}", file=sys.stderr)
    result["dssp_hl2"] = best_lr("dssp", {}, statics[2], seeds, lrs, args.target)
    result["common_lr_hl2_s10"] = {
        str(lr): {alg: at_lr(alg, {"s": 10}, lr, statics[2], seeds, args.target) for alg in ALGS}
        for lr in (float(x) for x in args.common.split(","))}
    result["table_md"] = table(result)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    print(result["table_md"], file=sys.stderr)
    record("ps_hetero", result)
