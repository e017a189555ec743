"""Isolating experiments for the three parameter-server claims of `edgestream reproduce --quick` that do
not hold (issue 17): adsp-vs-ssp (000 Fig. 4b), consgd-vs-ssp and dynsgd-vs-ssp (002, HL 2).

Every run is the claims' own setup (`edgestream.reproduce.experiments.ps_base`: digits, mlp, batch 32,
plain SGD, fast streams, t(b) = (0.01 + 0.0005 b) x static_i), run with `run_compare` in the simulator
(virtual time); one factor is varied at a time.

1. adsp: ADSP (Gamma derived from the step time, as the claim) and ADSP with the hand-set time scales of
   benchmarks/bench_adsp.py (Gamma 1 s, epoch 20 s, window 1 s) vs SSP(3); 3 workers 1:1:3; seeds
   0..N-1; links 5 / 20 / 50 ms at 50 Mbit/s and 5 ms at 5 Mbit/s (a push 10x as long on the wire: a
   larger model). Evaluations every 0.1 s, runs go on to 0.96 (or 15 / 25 virtual s); the times to 0.9
   (the quick claim's target) and 0.95 (the full claim's and bench_adsp's) are read at that resolution
   and on the claims' 0.5 s grid (the evaluations at multiples of 0.5 s).
2. consgd: SSP at lr eta and ConSGD at lr M eta (lambda = 1/M) on 002's HL 2 setup (5 workers, one at
   2.501x), eta over a grid; whether the two runs are identical (every step loss, every evaluation, and
   the final PS weights of one pair run directly on SimEngine), and ConSGD at SSP's own lr (002's
   common-lr setting).
3. dynsgd: DynSGD vs SSP, each at its best lr of its grid and at common lrs, over the straggler's step
   factor (2.501 / 4 / 8), the number of stragglers (1 / 2 of 5) and the staleness bound s (3 / 8 / 16);
   evaluations every 0.1 s (the claims: 0.5 s).

    python benchmarks/bench_isolate_ps_claims.py [--only adsp,consgd,dynsgd] [--quick] [--seeds N]
        [--hetero-seeds N] [--dyn-cells F:N:S,...] [--confirm-seeds N] [--out DIR] [--json FILE]

Defaults: ADSP seeds 0-5, ConSGD/DynSGD seeds 0-1, DynSGD cells where it wins re-run on seeds 0-7 (about 13 min
wall on a shared 2-core box). --quick: ADSP 3 seeds, others 1, 5 DynSGD cells, confirmation on 4 seeds. Prints one markdown table per claim (and
progress on stderr). torch runs at one thread (the mlp's steps are tiny; more threads only contend).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from edgestream.comparisons import parse_variants, run_compare
from edgestream.config import validate_dict
from edgestream.metrics import EventLog
from edgestream.metrics.events import read_events
from edgestream.reproduce.experiments import ps_base
from edgestream.sim.engine import SimEngine

T0 = time.perf_counter()
SSP3 = "ssp[algorithm.params.s=3]"
ADSP_HAND = "adsp[algorithm.params.gamma_s=1.0,algorithm.params.epoch_s=20.0,algorithm.params.eval_s=1.0]"
HL2 = [1, 1, 1, 1, 2.501]  # the claims' HL 2: one worker in five at 2.501x the step time


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.0f} s] {msg}", file=sys.stderr, flush=True)


def evals(summary: dict) -> list[tuple[float, float, float]]:
    """(time, accuracy, loss) of every evaluation of a run."""
    return [(float(e["time"]), float(e["accuracy"]), float(e["loss"]))
            for e in read_events(Path(summary["run_dir"]) / "events.jsonl") if e.get("kind") == "eval"]


def time_to(ev: list[tuple[float, float, float]], target: float, grid: float | None = None) -> float | None:
    """First evaluation time with accuracy >= target; grid: only evaluations at multiples of `grid`."""
    for t, a, _ in ev:
        if grid is not None and abs(t / grid - round(t / grid)) > 1e-6:
            continue
        if a >= target:
            return round(t, 3)
    return None


def step_trace(summary: dict) -> list[tuple]:
    """(time, device, step, loss, PS version) of every step of a run (the event log's 6 digits)."""
    return [(e["time"], e["device"], e["step"], e["loss"], e.get("version"))
            for e in read_events(Path(summary["run_dir"]) / "events.jsonl") if e.get("kind") == "step"]


def comm_per_step(summary: dict) -> tuple[float, float]:
    """Mean (compute_s, push + pull s) of a run's steps: a step's compute vs its push + pull (comm_s less the
    time the pull was blocked by the staleness bound)."""
    st = [e for e in read_events(Path(summary["run_dir"]) / "events.jsonl") if e.get("kind") == "step"]
    return (round(statistics.fmean(e["compute_s"] for e in st), 4),
            round(statistics.fmean(e.get("comm_s", 0.0) - e.get("blocked_s", 0.0) for e in st), 4))


def runs(cfg: dict, variants: list[str], tag: str, out: Path) -> dict[str, dict]:
    t = time.perf_counter()
    _, summaries, _ = run_compare(validate_dict(cfg), parse_variants(",".join(variants)), out=out, run_id=tag,
                                  progress=False)
    log(f"{tag}: {len(variants)} runs, {time.perf_counter() - t:.1f} s wall")
    return summaries


def mean(xs: list[float | None]) -> float | None:
    return round(statistics.fmean(xs), 3) if xs and all(x is not None for x in xs) else None  # type: ignore[arg-type]


def pmean(xs: list[float | None]) -> str:
    """The mean, or where some seeds have no figure the mean of the others and how many they are."""
    got = [x for x in xs if x is not None]
    if len(got) == len(xs) or not got:
        return fmt(mean(xs))
    return f"{statistics.fmean(got):.3g} ({len(got)}/{len(xs)})"


def fmt(x: Any, nd: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}g}" if abs(x) < 1000 else f"{x:.0f}"
    return str(x)


def red(adsp: float | None, ssp: float | None) -> float | None:
    """ADSP's reduction of the time to target, 1 - t_ADSP / t_SSP."""
    return round(1 - adsp / ssp, 3) if adsp and ssp else None


# ---------------------------------------------------------------- 1. ADSP vs SSP
def adsp_claim(seeds: list[int], out: Path) -> dict:
    nets = [("5 ms, 50 Mbit/s", 5.0, 50), ("20 ms, 50 Mbit/s", 20.0, 50), ("50 ms, 50 Mbit/s", 50.0, 50),
            ("5 ms, 5 Mbit/s", 5.0, 5)]
    algs = {"adsp (Gamma derived)": "adsp", "adsp (Gamma 1 s by hand)": ADSP_HAND, "ssp(3)": SSP3}
    cells = []
    for name, lat, bw in nets:
        per: dict[str, dict[str, list]] = {a: {} for a in algs}
        info: dict[str, Any] = {}
        for seed in seeds:
            # runs go on to 0.96 (or max_time) so that the first 0.5 s evaluation at >= 0.95 is seen too
            cfg = ps_base(f"iso-adsp-{int(lat)}ms-{bw}mb", [1, 1, 3], 0.96, 15.0 if bw >= 50 else 25.0,
                          latency_ms=lat, seed=seed)
            cfg["devices"]["network"]["bandwidth_mbps"] = bw
            cfg["eval"]["every_s"] = 0.1
            s = runs(cfg, list(algs.values()), f"adsp-{int(lat)}ms-{bw}mb-seed{seed}", out)
            for a, label in algs.items():
                ev = evals(s[label])
                for key, target, grid in (("t90@0.5", 0.9, 0.5), ("t90@0.1", 0.9, None), ("t95@0.5", 0.95, 0.5),
                                          ("t95@0.1", 0.95, None)):
                    per[a].setdefault(key, []).append(time_to(ev, target, grid))
                if label == SSP3 and seed == seeds[0]:
                    info["ssp_compute_s, comm_s per step"] = comm_per_step(s[label])
                if label != SSP3:
                    ad = s[label].get("ps", {}).get("adsp", {})
                    info.setdefault(a, {"gamma_s": ad.get("gamma_s"), "final_d": []})["final_d"].append(ad.get("d"))
        cells.append({"network": name, "latency_ms": lat, "bandwidth_mbps": bw, "per_seed": per, "adsp": info})
    return {"seeds": seeds, "cells": cells}


def adsp_table(r: dict) -> str:
    rows = ["| links | target | eval grid | ADSP derived (s) | ADSP Gamma 1 s (s) | SSP(3) (s) | reduction derived "
            "/ hand vs SSP | seeds ADSP-derived faster / slower / tie or n.a. | per seed derived ; hand ; SSP |",
            "|---|---|---|---|---|---|---|---|---|"]
    for c in r["cells"]:
        p = c["per_seed"]
        for key in ("t90@0.5", "t90@0.1", "t95@0.5", "t95@0.1"):
            d, h, s = p["adsp (Gamma derived)"][key], p["adsp (Gamma 1 s by hand)"][key], p["ssp(3)"][key]
            md, mh, ms = mean(d), mean(h), mean(s)
            win = sum(1 for x, y in zip(d, s, strict=True) if x is not None and y is not None and x < y)
            lose = sum(1 for x, y in zip(d, s, strict=True) if x is not None and y is not None and x > y)
            tie = len(d) - win - lose
            rows.append(f"| {c['network']} | {key[1:3]} % | {key.split('@')[1]} s | {pmean(d)} | {pmean(h)} | {pmean(s)} "
                        f"| {fmt(red(md, ms))} / {fmt(red(mh, ms))} | {win} / {lose} / {tie} "
                        f"| {', '.join(fmt(x) for x in d)} ; {', '.join(fmt(x) for x in h)} ; "
                        f"{', '.join(fmt(x) for x in s)} |")
    extra = ["", "| links | derived Gamma (s) | final D derived / hand (per seed) | SSP step: compute / push+pull (s) |",
             "|---|---|---|---|"]
    for c in r["cells"]:
        d, h = c["adsp"]["adsp (Gamma derived)"], c["adsp"]["adsp (Gamma 1 s by hand)"]
        cs = c["adsp"]["ssp_compute_s, comm_s per step"]
        extra.append(f"| {c['network']} | {fmt(d['gamma_s'])} | {d['final_d']} / {h['final_d']} | {cs[0]} / {cs[1]} |")
    return "\n".join(rows + extra) + "\n"


# ---------------------------------------------------------------- 2. ConSGD vs SSP
def consgd_claim(seeds: list[int], out: Path) -> dict:
    m = len(HL2)
    etas = [0.05, 0.1, 0.2, 0.4]
    rows = []
    for eta in etas:
        for seed in seeds:
            cfg = ps_base("iso-consgd", HL2, 0.9, 20.0, lr=eta, latency_ms=1.0, seed=seed)
            con = f"consgd[algorithm.params.s=3,optim.lr={round(m * eta, 6)}]"
            common = "consgd[algorithm.params.s=3]"  # ConSGD at SSP's own lr (002's common lr)
            s = runs(cfg, [SSP3, con, common], f"consgd-lr{eta}-seed{seed}", out)
            es, ec = evals(s[SSP3]), evals(s[con])
            steps_s, steps_c = step_trace(s[SSP3]), step_trace(s[con])
            rows.append({"eta": eta, "seed": seed, "consgd_lr": m * eta,
                         "t_ssp": time_to(es, 0.9), "t_consgd_M_eta": time_to(ec, 0.9),
                         "t_consgd_eta": time_to(evals(s[common]), 0.9),
                         "updates_ssp": s[SSP3].get("ps", {}).get("version"),
                         "updates_consgd": s[con].get("ps", {}).get("version"),
                         "evals_identical": es == ec, "n_evals": len(es),
                         "step_losses_identical": steps_s == steps_c, "n_steps": len(steps_s),
                         "max_eval_acc_diff": max((abs(a[1] - b[1]) for a, b in zip(es, ec, strict=False)), default=None)})
    # final weights of one pair, run on SimEngine directly (run_compare does not keep the model)
    weights = {}
    for label, alg, lr in (("ssp lr 0.1", "ssp", 0.1), ("consgd lr 0.5", "consgd", 0.5)):
        cfg = ps_base("iso-consgd-w", HL2, 0.9, 20.0, lr=lr, latency_ms=1.0, seed=0)
        cfg["algorithm"] = {**cfg["algorithm"], "name": alg, "params": {"s": 3}}
        eng = SimEngine(validate_dict(cfg), EventLog(None, keep=True))
        eng.run()
        weights[label] = [t.clone() for t in eng.ps.coord.model()]
    a, b = weights.values()
    wdiff = max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))
    lam_lr = [(eta, (1.0 / m) * (m * eta), (1.0 / m) * (m * eta) == eta) for eta in etas]
    log(f"consgd: final weights max |diff| = {wdiff}")
    return {"rows": rows, "final_weights_max_abs_diff": wdiff, "lambda_times_lr": lam_lr, "M": m}


def consgd_table(r: dict) -> str:
    m = r["M"]
    out = [f"| SSP lr eta | SSP t(0.9) (s) | ConSGD lr {m} eta | ConSGD t(0.9) (s) | speedup SSP/ConSGD | evals identical "
           f"| step losses identical | ConSGD at lr eta (common lr) t(0.9) | common-lr speedup |",
           "|---|---|---|---|---|---|---|---|---|"]
    for eta in sorted({x["eta"] for x in r["rows"]}):
        xs = [x for x in r["rows"] if x["eta"] == eta]
        ts, tc, tco = mean([x["t_ssp"] for x in xs]), mean([x["t_consgd_M_eta"] for x in xs]), \
            mean([x["t_consgd_eta"] for x in xs])
        ident = all(x["evals_identical"] for x in xs)
        sid = all(x["step_losses_identical"] for x in xs)
        sp = round(ts / tc, 3) if ts and tc else None
        spc = round(ts / tco, 3) if ts and tco else None
        out.append(f"| {eta} | {fmt(ts)} | {fmt(round(m * eta, 6))} | {fmt(tc)} | {fmt(sp)} "
                   f"| {'yes' if ident else 'NO'} ({sum(x['n_evals'] for x in xs)} evals) "
                   f"| {'yes' if sid else 'NO'} ({sum(x['n_steps'] for x in xs)} steps) | {fmt(tco)} | {fmt(spc)} |")
    return ("\n".join(out) + f"\n\nFinal PS weights, SSP lr 0.1 vs ConSGD lr 0.5 (seed 0): max |diff| = "
            f"{r['final_weights_max_abs_diff']}; (1/M)(M eta) == eta in floating point: "
            f"{all(x[2] for x in r['lambda_times_lr'])}\n")


# ---------------------------------------------------------------- 3. DynSGD vs SSP
SSP_LRS = [0.05, 0.1, 0.2, 0.4]
DYN_LRS = [0.1, 0.2, 0.4, 0.8, 1.6]


def hl(factor: float) -> float:
    """002's heterogeneity level (f t_c + t_t) / (t_c + t_t), t_c = 0.026 s compute, t_t = 0.013 s push + pull
    (docs/BENCHMARKS.md, 1 ms links)."""
    return round((factor * 0.026 + 0.013) / (0.026 + 0.013), 2)


def _dyn_runs(factor: float, n_slow: int, s: int, labels: list[str], seeds: list[int], out: Path,
              times: dict[str, list]) -> None:
    static = [1.0] * (5 - n_slow) + [factor] * n_slow
    max_time = 20.0 * max(1.0, factor / 2.501)
    for seed in seeds:
        cfg = ps_base("iso-dynsgd", static, 0.9, max_time, lr=0.1, latency_ms=1.0, seed=seed)
        cfg["eval"]["every_s"] = 0.1  # times of 2-15 s: the claims' 0.5 s grid would quantise them by 5-25 %
        sm = runs(cfg, labels, f"dynsgd-f{factor}-n{n_slow}-s{s}-seed{seed}", out)
        for label, summ in sm.items():
            times.setdefault(label, []).append(summ.get("time_to_target_s"))


def _lab(alg: str, s: int, lr: float) -> str:
    return f"{alg}[algorithm.params.s={s},optim.lr={lr}]"


DYN_CELLS = [(2.501, 1, 3), (4, 1, 3), (8, 1, 3), (2.501, 2, 3), (4, 2, 3), (8, 2, 3), (2.501, 1, 8),
             (2.501, 1, 16), (8, 1, 16), (8, 2, 16)]
DYN_CELLS_QUICK = [(2.501, 1, 3), (8, 1, 3), (2.501, 2, 3), (2.501, 1, 16), (8, 1, 16)]


def dynsgd_claim(seeds: list[int], out: Path, cells: list[tuple[float, int, int]], confirm: int) -> dict:
    """The grid over `cells` on `seeds`; then every cell where the tuned DynSGD beat the tuned SSP again, on
    seeds up to `confirm`, at SSP's lrs 0.05 / 0.1 / 0.2 and DynSGD's best lr and its grid neighbours."""
    res = []
    for factor, n_slow, s in cells:
        t: dict[str, list] = {}
        _dyn_runs(factor, n_slow, s, [_lab("ssp", s, lr) for lr in SSP_LRS] + [_lab("dynsgd", s, lr) for lr in DYN_LRS],
                  seeds, out, t)
        res.append({"factor": factor, "stragglers": n_slow, "s": s, "hl": hl(factor), "times": t})
    confirmed = []
    for c in res:
        _, t_s = _best(c["times"], "ssp", SSP_LRS, c["s"])
        lr_d, t_d = _best(c["times"], "dynsgd", DYN_LRS, c["s"])
        more = list(range(len(seeds), confirm))
        if not (t_s and t_d and t_d < t_s and more):
            continue
        i = DYN_LRS.index(lr_d)
        ssp_lrs, dyn_lrs = [0.05, 0.1, 0.2], DYN_LRS[max(0, i - 1):i + 2]
        t = {k: list(v) for k, v in c["times"].items() if k in
             [_lab("ssp", c["s"], lr) for lr in ssp_lrs] + [_lab("dynsgd", c["s"], lr) for lr in dyn_lrs]}
        log(f"confirming f {c['factor']} x{c['stragglers']} s {c['s']} on seeds {more[0]}-{more[-1]}")
        _dyn_runs(c["factor"], c["stragglers"], c["s"], list(t), more, out, t)
        confirmed.append({**{k: c[k] for k in ("factor", "stragglers", "s", "hl")}, "times": t,
                          "ssp_lrs": ssp_lrs, "dyn_lrs": dyn_lrs, "seeds": confirm})
    return {"seeds": seeds, "cells": res, "ssp_lrs": SSP_LRS, "dyn_lrs": DYN_LRS, "confirmed": confirmed}


def _best(times: dict[str, list], prefix: str, lrs: list[float], s: int) -> tuple[float | None, float | None]:
    best = (None, None)
    for lr in lrs:
        m = mean(times[f"{prefix}[algorithm.params.s={s},optim.lr={lr}]"])
        if m is not None and (best[1] is None or m < best[1]):
            best = (lr, m)
    return best


def dynsgd_table(r: dict) -> str:
    common = sorted(set(r["ssp_lrs"]) & set(r["dyn_lrs"]))
    head = ("| straggler factor (HL) | stragglers of 5 | s | SSP best lr: t(0.9) (s) | DynSGD best lr: t(0.9) (s) "
            "| tuned speedup SSP/DynSGD | " + " | ".join(f"common lr {lr}: SSP / DynSGD (s)" for lr in common) + " |")
    out = [head, "|" + "---|" * (6 + len(common))]
    for c in r["cells"]:
        s = c["s"]
        lr_s, t_s = _best(c["times"], "ssp", r["ssp_lrs"], s)
        lr_d, t_d = _best(c["times"], "dynsgd", r["dyn_lrs"], s)
        sp = round(t_s / t_d, 3) if t_s and t_d else None
        cm = []
        for lr in common:
            a = mean(c["times"][f"ssp[algorithm.params.s={s},optim.lr={lr}]"])
            b = mean(c["times"][f"dynsgd[algorithm.params.s={s},optim.lr={lr}]"])
            cm.append(f"{fmt(a)} / {fmt(b)}" + (f" ({a / b:.2f}x)" if a and b else ""))
        out.append(f"| {c['factor']} ({c['hl']}) | {c['stragglers']} | {s} | {lr_s}: {fmt(t_s)} | {lr_d}: {fmt(t_d)} "
                   f"| {fmt(sp)} | " + " | ".join(cm) + " |")
    grid = "\n\nAll lrs (mean t(0.9) over seeds; - = not reached):\n\n| cell | " + \
        " | ".join([f"SSP {lr}" for lr in r["ssp_lrs"]] + [f"DynSGD {lr}" for lr in r["dyn_lrs"]]) + " |\n|" + \
        "---|" * (1 + len(r["ssp_lrs"]) + len(r["dyn_lrs"])) + "\n"
    for c in r["cells"]:
        s = c["s"]
        vals = [mean(c["times"][f"ssp[algorithm.params.s={s},optim.lr={lr}]"]) for lr in r["ssp_lrs"]] + \
               [mean(c["times"][f"dynsgd[algorithm.params.s={s},optim.lr={lr}]"]) for lr in r["dyn_lrs"]]
        grid += f"| f {c['factor']} x{c['stragglers']} s {s} | " + " | ".join(fmt(v) for v in vals) + " |\n"
    conf = ""
    for c in r["confirmed"]:
        conf += (f"\n\nConfirmation, f {c['factor']} x{c['stragglers']} s {c['s']}, seeds 0-{c['seeds'] - 1} "
                 f"(mean t(0.9) s; per seed):\n\n| rule, lr | mean | per seed |\n|---|---|---|\n")
        for alg, lrs in (("ssp", c["ssp_lrs"]), ("dynsgd", c["dyn_lrs"])):
            for lr in lrs:
                v = c["times"][_lab(alg, c["s"], lr)]
                conf += f"| {alg} {lr} | {fmt(mean(v))} | {', '.join(fmt(x) for x in v)} |\n"
        _, t_s = _best(c["times"], "ssp", c["ssp_lrs"], c["s"])
        _, t_d = _best(c["times"], "dynsgd", c["dyn_lrs"], c["s"])
        conf += f"\nTuned speedup SSP / DynSGD over {c['seeds']} seeds: {fmt(round(t_s / t_d, 3) if t_s and t_d else None)}\n"
    return "\n".join(out) + grid + conf


def tables_of(results: dict) -> str:
    """The markdown tables of `results` (one section per claim run)."""
    tables = []
    if "adsp" in results:
        r = results["adsp"]
        tables.append(f"### adsp-vs-ssp: 3 workers 1:1:3, SSP s = 3, lr 0.1, seeds 0-{r['seeds'][-1]}\n\n{adsp_table(r)}")
    if "consgd" in results:
        r = results["consgd"]
        tables.append(f"### consgd-vs-ssp: HL 2 (5 workers, one at 2.501x), s = 3, seeds 0-{r['rows'][-1]['seed']}"
                      f"\n\n{consgd_table(r)}")
    if "dynsgd" in results:
        r = results["dynsgd"]
        tables.append(f"### dynsgd-vs-ssp: 5 workers, 1 ms links, target 0.9, seeds 0-{r['seeds'][-1]}\n\n"
                      f"{dynsgd_table(r)}")
    return "\n\n".join(tables)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="adsp,consgd,dynsgd")
    ap.add_argument("--quick", action="store_true", help="fewer seeds and DynSGD cells")
    ap.add_argument("--seeds", type=int, default=None, help="seeds for ADSP (default 6, quick 3)")
    ap.add_argument("--hetero-seeds", type=int, default=None, help="seeds for ConSGD/DynSGD (default 2, quick 1)")
    ap.add_argument("--dyn-cells", default=None,
                    help="DynSGD cells factor:stragglers:s, comma-separated (default: the grid in DYN_CELLS)")
    ap.add_argument("--confirm-seeds", type=int, default=None,
                    help="re-run DynSGD cells where it won on seeds up to N-1 (default 8, quick 4)")
    ap.add_argument("--out", default=None, help="run folders (default: a temporary folder, removed)")
    ap.add_argument("--json", default=None, help="write all figures to this file")
    ap.add_argument("--tables-from", default=None, help="print the tables of a --json file (runs nothing)")
    a = ap.parse_args()
    if a.tables_from:
        print(tables_of(json.loads(Path(a.tables_from).read_text())))
        return
    torch.set_num_threads(1)
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    seeds = list(range(a.seeds if a.seeds is not None else (3 if a.quick else 6)))
    hseeds = list(range(a.hetero_seeds if a.hetero_seeds is not None else (1 if a.quick else 2)))
    tmp = None if a.out else tempfile.TemporaryDirectory(prefix="isolate-ps-")
    out = Path(a.out) if a.out else Path(tmp.name)  # type: ignore[union-attr]
    results: dict[str, Any] = {}
    if "adsp" in only:
        results["adsp"] = adsp_claim(seeds, out)
    if "consgd" in only:
        results["consgd"] = consgd_claim(hseeds, out)
    if "dynsgd" in only:
        cells = DYN_CELLS_QUICK if a.quick else DYN_CELLS
        if a.dyn_cells:
            cells = [(float(f), int(n), int(s)) for f, n, s in (c.split(":") for c in a.dyn_cells.split(","))]
        confirm = a.confirm_seeds if a.confirm_seeds is not None else (4 if a.quick else 8)
        results["dynsgd"] = dynsgd_claim(hseeds, out, cells, confirm)
    log("done")
    print(tables_of(results))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1, default=str))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
