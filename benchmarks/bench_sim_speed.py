"""Simulator speed: simulated device-steps per wall second, batched vs per-device compute side by side,
at 16, 64, 256 (and 1024) devices (digits, mlp by default, ddl with b = 32, dense all-reduce), with the
peak memory of each run and where the wall time goes.

Each (devices, compute path) runs in its own fresh Python process, so its peak resident memory
(`resource.getrusage(RUSAGE_SELF).ru_maxrss`) is that run's alone; `rss_setup_mb` is the resident
memory once the engine is built (dataset, model, workers), `rss_growth_mb` what the run added on top.
Compute paths (edgestream.sim.batched): `batched` serves the devices' Compute requests with one
vmapped forward/backward per pass, `per-device` runs one forward/backward per device (the reference).

Categories (SimEngine.profile): forward_backward, optimizer, eval, reduce (collective arithmetic) are
torch compute; algorithm is the sync/ generators' own code (exchange arithmetic, bookkeeping); data
(stream bookkeeping and batch assembly) and engine (SimPy, request dispatch, event lines) are the
simulator's own overhead. `cpu_s` is the process CPU time of the run (on a shared machine, wall
includes waiting for a core; `load_avg` is the 1-minute load when the run started). With
`--repeat N` every configuration runs N times, in rounds that alternate the paths (so both see the
same machine load), and the table keeps each configuration's fastest run (the usual estimate on a
noisy machine); every run is in the recorded JSON.

    python benchmarks/bench_sim_speed.py [--devices 16,64,256,1024] [--device-steps 4096] [--model mlp]
                                         [--paths per-device,batched] [--threads 1] [--repeat 3]
                                         [--algorithms ddl] [--batch 32]
    python benchmarks/bench_sim_speed.py --algorithms all --batch 8 --devices 64,256 --repeat 2

Digits has 1,438 training samples: above that many devices they share them (`data.share_samples`, one
sample a device; fewer devices get the same disjoint shards as without it).

`--algorithms` runs every listed algorithm (comma-separated registered names, or `all`: every one the
simulator runs) with its default params and a fixed batch of `--batch` samples (an algorithm made for
other batch policies, ScaDLES, keeps its own default policy); the rounds alternate the paths within
each (algorithm, devices), and the table gets one row per (algorithm, devices). Anything but the
default `ddl` records bench-out/sim_speed_algorithms.json (the ddl table stays in sim_speed.json).
    python benchmarks/bench_sim_speed.py --plot docs/img/sim_scale.png   # from the recorded JSON

`--plot PATH` draws the recorded table (bench-out/sim_speed.json, or `--from FILE`) as a PNG:
device-steps per wall second and per CPU second vs devices, and peak resident memory vs devices, per path.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


#: training samples per device of `--dataset synthetic`
SYNTHETIC_PER_DEVICE = 64


def config(devices: int, steps: int, model: str, algorithm: str = "ddl", batch: int = 32,
           dataset: str = "digits") -> dict:
    from bench_sim_scale import synthetic_data

    from edgestream.sync.registry import get_algorithm

    spec = get_algorithm(algorithm)
    data = (synthetic_data(SYNTHETIC_PER_DEVICE * devices) if dataset == "synthetic"
            else {"dataset": dataset, "share_samples": True})  # digits above 1,438 devices: devices share samples
    return {
        "name": f"speed{devices}", "seed": 0, "data": data,
        "devices": {"count": devices, "rates": {"distribution": "uniform", "low": 40, "high": 200},
                    "compute": {"base_s": 0.05, "per_sample_s": 0.002}},
        "model": {"name": model},
        "algorithm": {"name": algorithm, "batch": spec.suited_batch({"policy": "fixed", "size": batch}),
                      "buffer": "persist"},
        "stop": {"target_accuracy": None, "max_time_s": None, "max_steps": steps},
        "eval": {"every_s": 1e6},
    }


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(devices: int, device_steps: int, model: str, path: str, algorithm: str = "ddl", batch: int = 32,
            dataset: str = "digits") -> dict:
    """One run in this process (call it in a fresh process for a clean peak memory)."""
    from edgestream.config import validate_dict
    from edgestream.metrics import EventLog
    from edgestream.sim.engine import SimEngine

    steps = max(8, device_steps // devices)
    raw = config(devices, steps, model, algorithm, batch, dataset)
    cfg = validate_dict(raw)
    engine = SimEngine(cfg, EventLog(None), batch_compute=(path == "batched"))
    assert engine.compute_mode == path, engine.compute_reason
    rss_setup = _current_rss_mb()
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    engine.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    prof = engine.profile(wall)
    torch_s = prof["forward_backward"] + prof["optimizer"] + prof["eval"] + prof["reduce"]
    own = prof["data"] + prof["engine"]
    peak = _rss_mb()
    n = engine.stats.device_steps
    return {
        "algorithm": algorithm, "dataset": dataset, "batch": raw["algorithm"]["batch"], "devices": devices, "path": path, "steps": steps, "device_steps": n,
        "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "load_avg": round(load, 2),
        "device_steps_per_wall_s": round(n / wall, 1),
        "device_steps_per_cpu_s": round(n / cpu, 1),
        "passes": engine.batcher.passes if engine.batcher is not None else None,
        "rss_setup_mb": round(rss_setup, 1), "rss_peak_mb": round(peak, 1),
        "rss_growth_mb": round(peak - rss_setup, 1),
        "share_torch_compute": round(torch_s / wall, 4),
        "share_algorithm_code": round(prof["algorithm"] / wall, 4),
        "overhead_share": round(own / wall, 4),
        "profile_s": prof,
    }


def child(args: argparse.Namespace) -> None:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    algorithm = args.child_algorithm
    measure(4, 64, args.model, args.child_path, algorithm, args.batch, args.dataset)  # warm-up: first torch and vmap calls
    print(json.dumps(measure(args.child_devices, args.device_steps, args.model, args.child_path, algorithm,
                             args.batch, args.dataset)))


def run_child(devices: int, path: str, args: argparse.Namespace, algorithm: str = "ddl") -> dict:
    cmd = [sys.executable, __file__, "--child-devices", str(devices), "--child-path", path,
           "--child-algorithm", algorithm, "--batch", str(args.batch),
           "--device-steps", str(args.device_steps), "--model", args.model, "--threads", str(args.threads),
           "--dataset", args.dataset]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def sim_algorithms() -> list[str]:
    """Every registered algorithm the simulator runs, in registry order."""
    from edgestream.sync.registry import ALGORITHMS

    return [n for n, s in ALGORITHMS.items() if s.engines is None or "sim" in s.engines]


def algorithm_table(rows: list[dict], paths: list[str]) -> str:
    """One row per (algorithm, devices): device-steps per wall second and per CPU second on each path
    and their ratios (each the fastest run of its configuration by wall time)."""
    by = {(r["algorithm"], r["devices"], r["path"]): r for r in rows}
    algorithms = list(dict.fromkeys(r["algorithm"] for r in rows))
    devices = sorted({r["devices"] for r in rows})
    head = ["algorithm", "devices"] + [f"{p} steps/s (wall / cpu)" for p in paths]
    if len(paths) == 2:
        head.append(f"{paths[1]} / {paths[0]} (wall / cpu)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for a in algorithms:
        for d in devices:
            cells = [a, str(d)]
            got = [by.get((a, d, p)) for p in paths]
            cells += [f"{r['device_steps_per_wall_s']:,.0f} / {r['device_steps_per_cpu_s']:,.0f}" if r else "-"
                      for r in got]
            if len(paths) == 2:
                cells.append(" / ".join(f"{got[1][k] / got[0][k]:.2f}x" for k in
                                        ("device_steps_per_wall_s", "device_steps_per_cpu_s")) if all(got) else "-")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(rows: list[dict], paths: list[str]) -> str:
    by = {(r["devices"], r["path"]): r for r in rows}
    devices = sorted({r["devices"] for r in rows})
    head = ["devices"] + [f"{p} steps/s (wall / cpu)" for p in paths]
    if len(paths) == 2:
        head.append("speed-up (wall)")
    head += [f"{p} peak RSS MB (growth)" for p in paths]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in devices:
        cells = [str(d)]
        for p in paths:
            r = by.get((d, p))
            cells.append(f"{r['device_steps_per_wall_s']:,.0f} / {r['device_steps_per_cpu_s']:,.0f}" if r else "-")
        if len(paths) == 2 and all((d, p) in by for p in paths):
            a, b = (by[(d, p)]["device_steps_per_wall_s"] for p in paths)
            cells.append(f"{b / a:.2f}x")
        elif len(paths) == 2:
            cells.append("-")
        for p in paths:
            r = by.get((d, p))
            cells.append(f"{r['rss_peak_mb']:,.0f} (+{r['rss_growth_mb']:,.0f})" if r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], paths: list[str], out: Path, title: str) -> None:
    """Device-steps per wall second and per CPU second (left) and peak RSS and its growth during the
    run (right) vs devices, one line per path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for p, color in zip(paths, ("tab:gray", "tab:blue", "tab:green"), strict=False):
        rs = sorted((r for r in rows if r["path"] == p), key=lambda r: r["devices"])
        d = [r["devices"] for r in rs]
        ax_t.plot(d, [r["device_steps_per_wall_s"] for r in rs], "o-", color=color, label=f"{p}: per wall s")
        ax_t.plot(d, [r["device_steps_per_cpu_s"] for r in rs], "s:", color=color, label=f"{p}: per CPU s")
        ax_m.plot(d, [r["rss_peak_mb"] for r in rs], "o-", color=color, label=f"{p}: peak RSS")
        ax_m.plot(d, [r["rss_growth_mb"] for r in rs], "s--", color=color, alpha=0.6, label=f"{p}: growth in run")
    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("simulated devices")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    ax_t.set_ylabel("simulated device-steps per second")
    ax_t.set_ylim(bottom=0)
    ax_m.set_ylabel("MB")
    ax_t.set_title("speed (wall: on a shared machine; CPU: the process's own time)", fontsize=9)
    ax_m.set_title("memory (peak RSS of the process; growth = during the run)", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="16,64,256,1024")
    ap.add_argument("--device-steps", type=int, default=4096, help="simulated device-steps per run (>= 8 steps)")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--dataset", default="digits", choices=("digits", "synthetic"),
                    help="digits, or synthetic 1x8x8 (10 classes, 64 training samples per device: any device count)")
    ap.add_argument("--paths", default="per-device,batched", help="compute paths to compare, in table order")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration; the table keeps the fastest")
    ap.add_argument("--plot", type=Path, help="draw the recorded table to this PNG (runs nothing)")
    ap.add_argument("--from", dest="source", type=Path, help="recorded JSON for --plot (default bench-out/sim_speed.json)")
    ap.add_argument("--algorithms", default="ddl",
                    help="comma-separated algorithms, or 'all' (every one the simulator runs)")
    ap.add_argument("--batch", type=int, default=32,
                    help="fixed batch size (an algorithm made for other batch policies keeps its default)")
    ap.add_argument("--child-devices", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-algorithm", default="ddl", help=argparse.SUPPRESS)
    ap.add_argument("--child-path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_devices:
        child(args)
        sys.exit(0)
    from common import OUT, record  # noqa: E402

    if args.plot is not None:
        rec = json.loads((args.source or OUT / "sim_speed.json").read_text())
        plot(rec["rows"], rec["paths"], args.plot,
             f"simulator cost vs devices: digits/{rec['model']}, {rec['algorithm']}, {rec['torch_threads']} torch "
             f"thread(s), best of {rec['repeat']} ({rec['when']})")
        print(f"wrote {args.plot}", file=sys.stderr)
        sys.exit(0)

    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    algorithms = (sim_algorithms() if args.algorithms.strip() == "all"
                  else [a.strip() for a in args.algorithms.split(",") if a.strip()])
    loads = [os.getloadavg()]
    runs: list[dict] = []
    for round_ in range(args.repeat):
        for a in algorithms:
            for d in (int(v) for v in args.devices.split(",")):
                for p in (paths if round_ % 2 == 0 else paths[::-1]):
                    r = run_child(d, p, args, a)
                    runs.append(r)
                    print(f"{a:>16} {d:5d} devices {p:>10}: {r['device_steps_per_wall_s']:8.1f} device-steps/s "
                          f"wall, {r['device_steps_per_cpu_s']:8.1f} per CPU s, peak RSS {r['rss_peak_mb']:.0f} MB "
                          f"(+{r['rss_growth_mb']:.0f}), torch {r['share_torch_compute']:.0%}, algorithm "
                          f"{r['share_algorithm_code']:.0%}, simulator overhead {r['overhead_share']:.0%}, load "
                          f"{r['load_avg']}", file=sys.stderr, flush=True)
        loads.append(os.getloadavg())
    best: dict[tuple[str, int, str], dict] = {}
    for r in runs:
        key = (r["algorithm"], r["devices"], r["path"])
        if key not in best or r["device_steps_per_wall_s"] > best[key]["device_steps_per_wall_s"]:
            best[key] = r
    rows = list(best.values())
    if algorithms == ["ddl"] and args.batch == 32:  # the original benchmark: its table and JSON as they were
        print(table(rows, paths), file=sys.stderr)
        record("sim_speed", {"model": args.model, "dataset": "digits", "algorithm": "ddl, b=32",
                             "torch_threads": args.threads, "paths": paths, "repeat": args.repeat, "rows": rows,
                             "runs": runs, "table": table(rows, paths),
                             "target": ">= 2,000 device-steps/s at 256 devices (digits/mlp), batched"})
        sys.exit(0)
    text = algorithm_table(rows, paths)
    print(text, file=sys.stderr)
    run_loads = [r["load_avg"] for r in runs]
    print(f"load average (1 min) at the runs' starts: {min(run_loads)}-{max(run_loads)}", file=sys.stderr)
    record("sim_speed_algorithms", {
        "model": args.model, "dataset": args.dataset, "algorithms": algorithms, "batch": args.batch,
        "device_steps": args.device_steps, "torch_threads": args.threads, "paths": paths, "repeat": args.repeat,
        "load_avg_1_5_15": loads, "rows": rows, "runs": runs, "table": text})
