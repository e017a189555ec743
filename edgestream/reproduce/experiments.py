"""The simulator experiments behind the claims of paper 004 (ScaDLES) and 001 (ABS-SGD), shared by
`edgestream reproduce` and `benchmarks/bench_sim_paper.py`. Each runs one `run_compare` on digits in
virtual time and returns the figures it compares."""

from __future__ import annotations

import sys
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from edgestream.comparisons import parse_variants, run_compare
from edgestream.config import validate_dict
from edgestream.profiles import load_profile
from edgestream.profiles.select import entry_for, with_profile

#: (profile NAME|FILE, entry or None) that `reproduce --profile` puts in place of every experiment's
#: t(b) = base_s + per_sample_s b (static factors kept); None: the experiments' own step times
PROFILE: ContextVar[tuple[str, str | None] | None] = ContextVar("reproduce_profile", default=None)

#: ScaDLES as in 004 Table VI: rate batches, truncation, adaptive Top-k (CR 0.1, delta 0.3)
SCADLES_T6 = ("scadles[algorithm.buffer=truncate,compression.name=adaptive-topk,compression.ratio=0.1,"
              "compression.delta=0.3]")
DDL = "ddl[algorithm.buffer=persist]"


def base(name: str, model: str, target: float, count: int = 16, max_time_s: float = 1500.0,
         **over: Any) -> dict:
    """The shared setup: digits, 16 devices at S1, t(b) = 0.2 + 0.002 b, 20 ms / 10 Mbit/s links,
    DDL with b = 64 and persistence, SGD lr 0.02 momentum 0.9; `over` replaces one level deep."""
    cfg = {
        "name": name, "seed": 0, "data": {"dataset": "digits", "partition": "iid"},
        "devices": {"count": count, "rates": {"preset": "S1"},
                    "compute": {"base_s": 0.2, "per_sample_s": 0.002},
                    "network": {"latency_ms": 20, "bandwidth_mbps": 10}},
        "model": {"name": model},
        "optim": {"lr": 0.02, "momentum": 0.9, "weight_decay": 0.0001},
        "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 64}, "buffer": "persist"},
        "stop": {"target_accuracy": target, "max_time_s": max_time_s},
        "eval": {"every_s": 2.0},
    }
    for key, value in over.items():  # one level deep: devices={"rates": ...} replaces devices.rates
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and key in cfg else value
    return cfg


def compare(cfg: dict, algorithms: str, tag: str, out: Path) -> dict[str, dict]:
    """{label: summary} of one run_compare of `algorithms` on `cfg` (run folders under `out`); with
    PROFILE set, the devices' step times are that profile's (ProfileError when it lacks the model)."""
    chosen = PROFILE.get()
    if chosen is not None:
        spec, entry = chosen
        cfg = with_profile(cfg, spec, entry_for(load_profile(spec), entry, cfg["model"]["name"]))
    t0 = time.perf_counter()
    folder, summaries, table = run_compare(validate_dict(cfg), parse_variants(algorithms), out=out, run_id=tag,
                                           progress=False)
    print(f"== {tag} ({time.perf_counter() - t0:.0f} s wall): {folder}\n{table}", file=sys.stderr)
    return summaries


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def keep(s: dict, *keys: str) -> dict:
    return {k: s.get(k) for k in keys}


def scadles_vs_ddl(preset: str, model: str, target: float, out: Path, devices: int = 16) -> dict:
    """Time to `target`: DDL (b = 64, persistence) vs ScaDLES as in Table VI, at stream preset `preset`."""
    tag = "scadles-vs-ddl-" + preset.replace("'", "p")
    cfg = base(tag, model, target, count=devices)
    cfg["devices"]["rates"] = {"preset": preset}
    s = compare(cfg, f"{DDL},{SCADLES_T6}", tag, out)
    ddl, sca = s[DDL], s[SCADLES_T6]
    return {
        "speedup_time_to_target": ratio(ddl["time_to_target_s"], sca["time_to_target_s"]),
        "ddl": keep(ddl, "time_to_target_s", "final_accuracy", "steps", "buffer_final_samples", "floats_sent_total"),
        "scadles": keep(sca, "time_to_target_s", "final_accuracy", "steps", "buffer_final_samples",
                        "floats_sent_total", "cnc_ratio", "dropped_total"),
    }


def persist_vs_truncate(model: str, target: float, out: Path, devices: int = 16) -> dict:
    """Samples held on the devices at the end of a ScaDLES run to `target`: persistence vs truncation, on
    S2' (high-volume streams) with slow devices (Table IV)."""
    tag = "buffer-S2p"
    cfg = base(tag, model, target, count=devices)
    cfg["devices"]["rates"] = {"preset": "S2'"}
    cfg["devices"]["compute"] = {"base_s": 0.5, "per_sample_s": 0.004}
    s = compare(cfg, "scadles[algorithm.buffer=persist],scadles[algorithm.buffer=truncate]", tag, out)
    p, t = s["scadles[algorithm.buffer=persist]"], s["scadles[algorithm.buffer=truncate]"]
    fields = ("time_to_target_s", "final_accuracy", "buffer_final_samples", "held_final_samples",
              "buffer_max_samples", "dropped_total")
    return {
        "reduction_held_samples": ratio(p["held_final_samples"], t["held_final_samples"]),
        "persist": keep(p, *fields), "truncate": keep(t, *fields),
        "note": "held = samples buffered on the devices when they took their last batch (sum over devices); "
                "truncation leaves no backlog after a take, so backlog ratios are unbounded",
    }


def abs_vs_ddl_dbs(model: str, target: float, out: Path, latency_ms: float = 20.0) -> dict:
    """ABS-SGD vs DDL and DBS-SGD, 4 workers at static heterogeneity 1:2:3:4, fast streams (001 Table 1),
    links of `latency_ms` at 10 Mbit/s (the all-reduce time ABS-SGD hides behind computation)."""
    tag = "abs-static-1234" + (f"-{latency_ms:g}ms" if latency_ms != 20.0 else "")
    # 001 section 6: per-worker batch 32 (DBS: global 4 x 32), reference batch 32, lambda 0.5, lr 0.01 and
    # plain SGD (its update rule w - eta g~); DBS re-assigns every 10 steps (about one digits epoch)
    cfg = base(tag, model, target,
               devices={"count": 4, "rates": {"distribution": "constant", "rate": 5000},
                        "compute": {"base_s": 0.02, "per_sample_s": 0.004, "static": [1, 2, 3, 4]},
                        "network": {"latency_ms": latency_ms, "bandwidth_mbps": 10}},
               optim={"lr": 0.01, "momentum": 0.0, "weight_decay": 0.0},
               algorithm={"name": "ddl", "batch": {"policy": "fixed", "size": 32}, "buffer": "persist"})
    dbs_label = "dbs-sgd[algorithm.params.base_batch=32,algorithm.params.every=10]"
    s = compare(cfg, f"ddl,{dbs_label},abs-sgd", tag, out)
    ddl, dbs, abs_ = s["ddl"], s[dbs_label], s["abs-sgd"]
    fields = ("time_to_target_s", "final_accuracy", "steps", "samples_trained")
    return {
        "abs_speedup_vs_ddl": ratio(ddl["time_to_target_s"], abs_["time_to_target_s"]),
        "abs_speedup_vs_dbs": ratio(dbs["time_to_target_s"], abs_["time_to_target_s"]),
        "ddl": keep(ddl, *fields), "dbs-sgd": keep(dbs, *fields), "abs-sgd": keep(abs_, *fields),
    }


def topk_vs_dense(model: str, target: float, out: Path, devices: int = 16) -> dict:
    """Floats sent to `target`: dense ScaDLES vs adaptive Top-k (CR 0.1, delta 0.3), S1' (Table V)."""
    tag = "topk-S1p"
    cfg = base(tag, model, target, count=devices,
               algorithm={"name": "scadles", "batch": {"policy": "rate", "min": 8, "max": 1024},
                          "buffer": "truncate"})
    cfg["devices"]["rates"] = {"preset": "S1'"}
    adaptive = "scadles[compression.name=adaptive-topk,compression.ratio=0.1,compression.delta=0.3]"
    s = compare(cfg, f"scadles,{adaptive}", tag, out)
    dense, ad = s["scadles"], s[adaptive]
    fields = ("time_to_target_s", "final_accuracy", "floats_sent_total", "cnc_ratio", "steps")
    return {
        "floats_reduction": ratio(dense["floats_sent_total"], ad["floats_sent_total"]),
        "floats_per_step_reduction": ratio(dense["floats_sent_total"] / max(1, dense["device_steps_total"]),
                                           ad["floats_sent_total"] / max(1, ad["device_steps_total"])),
        "dense": keep(dense, *fields), "adaptive_topk": keep(ad, *fields),
    }


# ---------------------------------------------------------------- parameter-server family (000, 002, 003)
def ps_base(name: str, static: list[float], target: float, max_time_s: float, *, dynamic: float = 0.0,
            latency_ms: float = 5.0, lr: float = 0.1, seed: int = 0) -> dict:
    """3+ PS workers on digits/mlp, fast streams, t(b) = 0.01 + 0.0005 b times static_i, batch 32, plain SGD
    (no momentum anywhere: the papers' PS rule w <- w - lr u)."""
    return {
        "name": name, "seed": seed, "data": {"dataset": "digits", "partition": "iid"},
        "devices": {"count": len(static), "rates": {"distribution": "constant", "rate": 20000},
                    "compute": {"base_s": 0.01, "per_sample_s": 0.0005, "static": static, "dynamic": dynamic},
                    "network": {"latency_ms": latency_ms, "bandwidth_mbps": 50}},
        "model": {"name": "mlp"},
        "optim": {"lr": lr, "momentum": 0.0, "weight_decay": 0.0},
        "algorithm": {"name": "asp", "batch": {"policy": "fixed", "size": 32}},
        "stop": {"target_accuracy": target, "max_time_s": max_time_s},
        "eval": {"every_s": 0.5},
    }


def adsp_vs_baselines(target: float, out: Path, *, latency_ms: float = 5.0, seeds: tuple[int, ...] = (0,),
                      max_time_s: float = 60.0) -> dict:
    """ADSP (its time scales derived from the step time) vs BSP, SSP(3) and Fixed ADACOMM on 3 workers at
    1:1:3 (000 Fig. 4b): mean time to `target` over `seeds`, and ADSP's reduction 1 - t_ADSP / t_other."""
    algs = ["adsp", "bsp", "ssp[algorithm.params.s=3]", "fixed-adacomm-ps"]
    times: dict[str, list[float | None]] = {a: [] for a in algs}
    for seed in seeds:
        tag = f"adsp-{int(latency_ms)}ms-seed{seed}"
        s = compare(ps_base(tag, [1, 1, 3], target, max_time_s, latency_ms=latency_ms, seed=seed), ",".join(algs),
                    tag, out)
        for a in algs:
            times[a].append(s[a].get("time_to_target_s"))
    mean = {a: (sum(v) / len(v) if v and all(x is not None for x in v) else None) for a, v in times.items()}
    red = {a: (round(1 - mean["adsp"] / mean[a], 3) if mean["adsp"] and mean[a] else None) for a in algs[1:]}
    return {"time_to_target_s": mean, "per_seed": times, "reduction_vs": red, "latency_ms": latency_ms}


def heterogeneity_aware_vs_ssp(alg: str, lr: float, target: float, out: Path, *, ssp_lr: float = 0.1,
                               max_time_s: float = 20.0) -> dict:
    """ConSGD / DynSGD vs SSP (s = 3) at heterogeneity level 2: 5 workers, one at 2.5x the step time (002's
    table, HL 2); each rule at its own lr (the tuned values of docs/BENCHMARKS.md); speedup = t_SSP / t."""
    static = [1, 1, 1, 1, 2.501]
    cfg = ps_base(f"{alg}-hl2", static, target, max_time_s, lr=ssp_lr, latency_ms=1.0)
    label = f"{alg}[algorithm.params.s=3,optim.lr={lr}]"
    s = compare(cfg, f"ssp[algorithm.params.s=3],{label}", f"{alg}-hl2", out)
    ssp, other = s["ssp[algorithm.params.s=3]"], s[label]
    return {"speedup_vs_ssp": ratio(ssp.get("time_to_target_s"), other.get("time_to_target_s")),
            "ssp": keep(ssp, "time_to_target_s", "final_accuracy", "steps"),
            alg: keep(other, "time_to_target_s", "final_accuracy", "steps")}


def elastic_bsp_vs_bsp(target: float, out: Path, max_time_s: float = 120.0) -> dict:
    """ElasticBSP (R = 15) vs BSP on 3 workers at 1:1:3 with 10% dynamic noise (003): time to `target`
    and the workers' total waiting (blocked pulls)."""
    cfg = ps_base("elastic-1-1-3", [1, 1, 3], target, max_time_s, dynamic=0.1, lr=0.05, latency_ms=2.0)
    label = "elastic-bsp[algorithm.params.R=15]"
    s = compare(cfg, f"{label},bsp", "elastic-1-1-3", out)
    e, b = s[label], s["bsp"]
    return {"speedup_vs_bsp": ratio(b.get("time_to_target_s"), e.get("time_to_target_s")),
            "waiting_reduction_vs_bsp": ratio(b.get("ps", {}).get("blocked_s_total"),
                                              e.get("ps", {}).get("blocked_s_total")),
            "elastic-bsp": keep(e, "time_to_target_s", "final_accuracy", "steps"),
            "bsp": keep(b, "time_to_target_s", "final_accuracy", "steps")}


# ---------------------------------------------------------------- non-IID data (004)
def non_iid_injection(target: float, out: Path, devices: int = 10, max_time_s: float = 300.0) -> dict:
    """Each device streams one label (004's non-IID CIFAR10 setup, 10 devices): DDL vs ScaDLES with
    randomized data injection (alpha 0.5, beta 0.1: the config's defaults); final accuracies and whether
    each reached `target`. (With beta 0.5 the injected samples fill every rate batch to its 1,024 cap:
    steps take 7x longer and the linearly scaled lr, 16x the base, diverges: accuracy 0.10.)"""
    cfg = base("non-iid", "cnn-small", target, count=devices, max_time_s=max_time_s)
    cfg["data"] = {"dataset": "digits", "partition": "labels", "labels_per_device": 1}
    inj = "scadles[algorithm.buffer=truncate,algorithm.injection.alpha=0.5,algorithm.injection.beta=0.1]"
    s = compare(cfg, f"{DDL},{inj}", "non-iid", out)
    d, sc = s[DDL], s[inj]
    return {"accuracy_ratio": ratio(sc.get("final_accuracy"), d.get("final_accuracy")),
            "ddl": keep(d, "time_to_target_s", "final_accuracy", "steps"),
            "scadles_injection": keep(sc, "time_to_target_s", "final_accuracy", "steps")}


# ---------------------------------------------------------------- ZipLine (003)
def zipline_runtime(n: int, r: int, seeds: int = 3) -> dict:
    """ZipLineOptBS vs the exact FullGridScan on 003's synthetic instances (section 6.1: intervals
    U(1000, 1500) ms, starts U(10, 50) ms, push j of worker p at s_p + j i_p): best-of-3 seconds per call
    and whether both found the same least wait d_Z*, over `seeds` instances."""
    import numpy as np

    from edgestream.sync.zipline import full_grid_scan, zipline_opt_bs

    def best(fn: Any, m: Any) -> tuple[float, Any]:
        out, t = None, float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            out = fn(m)
            t = min(t, time.perf_counter() - t0)
        return t, out

    fast, exact, same = [], [], True
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        iv, start = rng.uniform(1000.0, 1500.0, n), rng.uniform(10.0, 50.0, n)
        m = start[:, None] + np.arange(1, r + 1)[None, :] * iv[:, None]
        t_fast, z = best(zipline_opt_bs, m)
        t_exact, g = best(full_grid_scan, m)
        fast.append(t_fast)
        exact.append(t_exact)
        same = same and abs(z.wait - g.wait) < 1e-9
    return {"n": n, "R": r, "seeds": seeds, "zipline_opt_bs_us": round(1e6 * sum(fast) / seeds, 1),
            "full_grid_scan_us": round(1e6 * sum(exact) / seeds, 1), "same_optimum": same,
            "speedup": ratio(sum(exact), sum(fast))}


def drift_recovery(model: str, out: Path, *, devices: int = 16, max_time_s: float = 600.0) -> dict:
    """A concept drift on S1 streams (examples/drift.yaml): at half time the two fastest devices' labels are
    permuted; ScaDLES, DDL, SSP and ADSP (truncated streams, a LAN, ADWIN on every device) compared on the
    all-devices prequential window accuracy: before the change, its worst after, its last, the time back within
    0.02 of before (edgestream.metrics.prequential.recovery), the detections."""
    from edgestream.metrics.events import read_events
    from edgestream.metrics.prequential import recovery, window_curve
    from edgestream.runner.plan import RunPlan

    cfg = base("drift", model, 0.9, count=devices, max_time_s=max_time_s,
               devices={"network": {"latency_ms": 5, "bandwidth_mbps": 1000}},
               algorithm={"buffer": "truncate"}, stop={"target_accuracy": None, "max_time_s": max_time_s},
               eval={"every_s": 10.0, "prequential": {"window": 1000}},
               drift={"detector": "adwin", "on_detect": ["warn"]})
    plan = RunPlan.resolve(validate_dict(cfg))
    fastest = sorted(range(devices), key=plan.rate_model.base_rate)[-2:]
    cfg["devices"]["drift"] = [{"at_s": max_time_s / 2, "devices": fastest, "kind": "label_swap"}]
    summaries = compare(cfg, "scadles,ddl,ssp,adsp", "drift", out)
    out_: dict[str, Any] = {"drifted_devices": fastest, "at_s": max_time_s / 2}
    for label, s in summaries.items():
        records = read_events(Path(s["run_dir"]) / "events.jsonl")
        starts = [float(e["time"]) for e in records if e.get("kind") == "drift_start"]
        if not starts:
            out_[label] = {"note": "its batches never reached the change", "detections": 0}
            continue
        r = recovery(window_curve(records, "accuracy"), min(starts))
        r["detections"] = (s.get("drift") or {}).get("detections")
        out_[label] = r
    return out_
