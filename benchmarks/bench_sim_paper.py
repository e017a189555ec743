"""Paper-shaped results in the simulator (digits, virtual time), each ratio from one `run_compare`:

1. ScaDLES vs DDL (b = 64), 16 devices, for each stream preset S1, S2, S1', S2' (paper 004 Table VI:
   ScaDLES 1.15x-3.29x faster to the target). ScaDLES as in Table VI: rate batches, truncation,
   adaptive Top-k (CR 0.1, delta 0.3); DDL: fixed 64, persistence.
2. Persistence vs truncation: buffer at the end of a ScaDLES run to the target (004 Table IV:
   848x-9429x smaller with truncation), on S2' (high-volume streams) with slow devices.
3. ABS-SGD vs DDL and DBS-SGD, 4 workers with static heterogeneity 1:2:3:4 and fast streams (001
   Table 1: 1.41x over DDL, 1.28x over DBS).
4. Adaptive Top-k vs dense ScaDLES: floats sent to the same target accuracy (004 Table V).

Every device computes with t_i(b) = (a + c b) static_i; times are virtual seconds. Figures land in
bench-out/sim_paper.json; the run folders (compare.md, compare.png) in bench-out/sim_paper_runs/.

    python benchmarks/bench_sim_paper.py [--model cnn-small] [--target 0.9] [--only scadles,buffer,abs,topk]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import OUT, record  # noqa: E402

from edgestream.reproduce import experiments as ex  # noqa: E402  (the experiments `edgestream reproduce` runs)

RUNS = OUT / "sim_paper_runs"


def scadles_vs_ddl(model: str, target: float) -> dict:
    return {preset: ex.scadles_vs_ddl(preset, model, target, RUNS) for preset in ("S1", "S2", "S1'", "S2'")}


def persist_vs_truncate(model: str, target: float) -> dict:
    return ex.persist_vs_truncate(model, target, RUNS)


def abs_vs_ddl_dbs(model: str, target: float) -> dict:
    return ex.abs_vs_ddl_dbs(model, target, RUNS)


def topk_vs_dense(model: str, target: float) -> dict:
    return ex.topk_vs_dense(model, target, RUNS)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cnn-small")
    ap.add_argument("--target", type=float, default=0.9, help="test accuracy that ends each run")
    ap.add_argument("--only", default="scadles,buffer,abs,topk")
    args = ap.parse_args()
    parts = {"scadles": ("scadles_vs_ddl", scadles_vs_ddl), "buffer": ("persist_vs_truncate", persist_vs_truncate),
             "abs": ("abs_vs_ddl_dbs", abs_vs_ddl_dbs), "topk": ("adaptive_topk_vs_dense", topk_vs_dense)}
    t0 = time.perf_counter()
    result: dict[str, Any] = {"model": args.model, "dataset": "digits", "target_accuracy": args.target}
    for key in args.only.split(","):
        name, fn = parts[key]
        result[name] = fn(args.model, args.target)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    record("sim_paper", result)
