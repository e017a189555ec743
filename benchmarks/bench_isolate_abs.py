"""Why ABS-SGD does not beat DBS-SGD in the quick claim (001 Table 1: 1.28x): the all-reduce time it hides.

ABS-SGD's gain over a balanced synchronous step is computation during the all-reduce: while the
reduction of iteration t is in flight every worker keeps computing reference batches. When the
all-reduce takes less than a batch of the slowest worker there is nothing to hide and a worker computes one reference batch
per iteration (at least one), so the iteration waits for the slowest worker's batch, while DBS-SGD's
speed-proportional batches keep every worker busy. This runs the claim's experiment (4 workers at
1:2:3:4, digits, mlp, target 0.85, 10 Mbit/s links) at link latencies from 20 ms (the claim) to 600 ms.

Usage: python benchmarks/bench_isolate_abs.py [--latencies 20,200,600] [--model mlp] [--target 0.85]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from edgestream.reproduce.experiments import abs_vs_ddl_dbs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latencies", default="20,200,600")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--target", type=float, default=0.85)
    args = ap.parse_args()
    rows = ["| link latency (ms) | DDL (s) | DBS-SGD (s) | ABS-SGD (s) | ABS steps | ABS vs DDL | ABS vs DBS |",
            "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for lat in (float(x) for x in args.latencies.split(",")):
            r = abs_vs_ddl_dbs(args.model, args.target, Path(tmp), latency_ms=lat)
            rows.append(f"| {lat:g} | {r['ddl']['time_to_target_s']} | {r['dbs-sgd']['time_to_target_s']} | "
                        f"{r['abs-sgd']['time_to_target_s']} | {r['abs-sgd']['steps']} | {r['abs_speedup_vs_ddl']} | "
                        f"{r['abs_speedup_vs_dbs']} |")
            print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
