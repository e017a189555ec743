"""Why ScaDLES loses to DDL at S2 / S1' / S2' on digits: isolating experiments (issue 17).

Part A, the critical batch: DDL with fast streams (no data wait) at per-device batch b, lr scaled
linearly (0.02 b / 64, the rule ScaDLES applies); steps and samples to the target. If the steps stop
falling as b grows, larger batches buy nothing past that size, whatever a step costs.

Part B, ScaDLES' learning-rate rule at S2: linear scaling (the paper's), none (base_batch set to the
mean rate, so eta_t ~ eta) and DDL at the same settings, with the cost of a batch nearly free (a GPU-like
t(b) = 0.3 + 0.0002 b) so only statistical efficiency separates them.

Part C, S1' piece by piece; part D, the paper's compute-bound regime at S2 / S2'; part E, the shipped K80 profile
(module functions).

Usage: python benchmarks/bench_isolate_scadles.py [--devices 8] [--target 0.85] [--parts ABCDE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from edgestream.reproduce.experiments import DDL, SCADLES_T6, base, compare

GPU_LIKE = {"base_s": 0.3, "per_sample_s": 0.0002}
#: virtual seconds a run may take (a run that misses the target stops here: "None" in the tables)
MAX_TIME_S = 240.0


def _rows(summaries: dict, names: dict[str, str], devices: int, fields: tuple[str, ...]) -> list[str]:
    """One table row per run: its name, time to target, steps per device, then `fields`."""
    return [f"| {what} | {summaries[label].get('time_to_target_s')} | "
            f"{(summaries[label].get('steps') or 0) // devices} | "
            + " | ".join(str(summaries[label].get(f)) for f in fields) + " |" for label, what in names.items()]


def part_a(devices: int, target: float, out: Path) -> list[str]:
    rows = ["| per-device batch b | global batch | lr | steps to target | samples to target | virtual s |",
            "|---|---|---|---|---|---|"]
    for b in (16, 64, 128, 256, 512):
        lr = round(0.02 * b / 64, 5)
        cfg = base(f"critical-b{b}", "cnn-small", target, count=devices, max_time_s=MAX_TIME_S,
                   devices={"rates": {"distribution": "constant", "rate": 5000}, "compute": GPU_LIKE},
                   optim={"lr": lr, "momentum": 0.9, "weight_decay": 0.0001},
                   algorithm={"name": "ddl", "batch": {"policy": "fixed", "size": b}, "buffer": "persist"})
        s = compare(cfg, "ddl", f"critical-b{b}", out)["ddl"]
        t = s.get("time_to_target_s")
        # the run stops at the first evaluation at or above the target (every 2 virtual s)
        per_device = s["steps"]
        rows.append(f"| {b} | {b * devices} | {lr} | {per_device if t else 'not reached'} | "
                    f"{s['samples_trained'] if t else '-'} | {t} |")
        print(rows[-1], file=sys.stderr)
    return rows


def part_b(devices: int, target: float, out: Path) -> list[str]:
    rows = ["| run | time to target (s) | steps per device | final accuracy |", "|---|---|---|---|"]
    cfg = base("scadles-lr-S2", "cnn-small", target, count=devices, max_time_s=MAX_TIME_S,
               devices={"compute": GPU_LIKE})
    cfg["devices"]["rates"] = {"preset": "S2"}
    no_scaling = SCADLES_T6[:-1] + ",algorithm.params.base_batch=300]"
    ddl_hi = DDL[:-1] + ",optim.lr=0.08]"
    sca_lo = SCADLES_T6[:-1] + ",optim.lr=0.005]"
    s = compare(cfg, ",".join([DDL, ddl_hi, SCADLES_T6, no_scaling, sca_lo]), "scadles-lr-S2", out)
    names = {DDL: "DDL b 64, lr 0.02", ddl_hi: "DDL b 64, lr 0.08",
             SCADLES_T6: "ScaDLES, linear scaling (eta_t = 0.02 sum b / 512)",
             no_scaling: "ScaDLES, no scaling (B = 300 x M: eta_t ~ 0.02)",
             sca_lo: "ScaDLES, linear scaling from lr 0.005"}
    return rows + _rows(s, names, devices, ("final_accuracy",))


def part_c(devices: int, target: float, out: Path) -> list[str]:
    """S1' piece by piece: DDL, ScaDLES as in Table VI, without compression, without truncation."""
    rows = ["| run | time to target (s) | steps per device | samples trained | final accuracy |",
            "|---|---|---|---|---|"]
    cfg = base("scadles-parts-S1p", "cnn-small", target, count=devices, max_time_s=MAX_TIME_S)
    cfg["devices"]["rates"] = {"preset": "S1'"}
    dense = "scadles[algorithm.buffer=truncate]"
    persist = "scadles[algorithm.buffer=persist]"
    s = compare(cfg, ",".join([DDL, SCADLES_T6, dense, persist]), "scadles-parts-S1p", out)
    names = {DDL: "DDL b 64, persist", SCADLES_T6: "ScaDLES, truncate + adaptive Top-k (Table VI)",
             dense: "ScaDLES, truncate, dense", persist: "ScaDLES, persist, dense"}
    return rows + _rows(s, names, devices, ("samples_trained", "final_accuracy"))


def part_d(devices: int, target: float, out: Path) -> list[str]:
    """The paper's regime: compute-bound at b = 64 (t(64) = 1.2 s, ResNet152 on a K80, 004 section II),
    t(b) = 1.2 (1 - f + f b / 64) with f the share of t(64) that grows with the batch (f = 1: a
    saturated GPU, linear through 0; small f: far from saturation)."""
    rows = ["| preset | f | t(494) s | DDL time to target | ScaDLES time to target | speedup |", "|---|---|---|---|---|---|"]
    for preset in ("S2", "S2'"):
        for f in (1.0, 0.25, 0.05):
            tag = f"scadles-k80like-{preset.replace(chr(39), 'p')}-f{int(f * 100)}"
            compute = {"base_s": round(1.2 * (1 - f), 6), "per_sample_s": round(1.2 * f / 64, 8)}
            cfg = base(tag, "cnn-small", target, count=devices, max_time_s=MAX_TIME_S, devices={"compute": compute})
            cfg["devices"]["rates"] = {"preset": preset}
            s = compare(cfg, f"{DDL},{SCADLES_T6}", tag, out)
            d, c = s[DDL].get("time_to_target_s"), s[SCADLES_T6].get("time_to_target_s")
            t494 = compute["base_s"] + compute["per_sample_s"] * 494
            rows.append(f"| {preset} | {f} | {t494:.2f} | {d} | {c} | {round(d / c, 2) if d and c else '-'} |")
            print(rows[-1], file=sys.stderr)
    return rows


def part_e(devices: int, target: float, out: Path) -> list[str]:
    """The shipped GPU-class profile: K80, ResNet-18 at CIFAR size (t(64) = 0.13 s, t(256) = 0.40 s)."""
    rows = ["| preset | DDL time to target | DDL steps/device | ScaDLES time to target | ScaDLES steps/device | speedup |",
            "|---|---|---|---|---|---|"]
    for preset in ("S1", "S2", "S1'", "S2'"):
        tag = f"scadles-k80-{preset.replace(chr(39), 'p')}"
        cfg = base(tag, "cnn-small", target, count=devices, max_time_s=MAX_TIME_S,
                   devices={"compute": {"profile": "k80", "profile_model": "resnet18-cifar"}})
        cfg["devices"]["rates"] = {"preset": preset}
        s = compare(cfg, f"{DDL},{SCADLES_T6}", tag, out)
        d, c = s[DDL], s[SCADLES_T6]
        dt, ct = d.get("time_to_target_s"), c.get("time_to_target_s")
        rows.append(f"| {preset} | {dt} | {d['steps'] // devices} | {ct} | {c['steps'] // devices} | "
                    f"{round(dt / ct, 2) if dt and ct else '-'} |")
        print(rows[-1], file=sys.stderr)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--parts", default="ABCDE")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        parts = {"A": ("the critical batch (DDL, no data wait, lr linear in b)", part_a),
                 "B": ("ScaDLES' lr rule at S2, batch nearly free", part_b),
                 "C": ("S1' piece by piece", part_c),
                 "D": ("compute-bound like the paper (t(64) = 1.2 s), S2 and S2'", part_d),
                 "E": ("the K80 profile (resnet18-cifar), all four presets", part_e)}
        for key, (title, part) in parts.items():
            if key in args.parts:
                print("\n".join([f"### {key}: {title}"] + part(args.devices, args.target, out)))
    print(f"wall {time.perf_counter() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
