"""Simulator fidelity: the simulator's predicted time to target against a real run's, same configs.

Runs `make demo`'s experiment (4 devices, digits, preset S1, cnn-small, target 0.85): ddl and scadles
trained for real (`compare --engine local`: a producer and one trainer process per device over Kafka
and gloo), then simulated with the compute model calibrated on this machine. Records both times and
their ratio per algorithm.

    python benchmarks/bench_sim_fidelity.py [--max-time 50]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import record  # noqa: E402

KEYS = ("time_to_target_s", "final_accuracy", "steps", "buffer_max_samples", "dropped_total", "wall_s")


def main() -> None:
    from rich.console import Console

    from edgestream.demo import run_demo

    ap = argparse.ArgumentParser()
    ap.add_argument("--max-time", type=float, default=50.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = run_demo(bootstrap=os.environ.get("EDGESTREAM_BOOTSTRAP"), console=Console(stderr=True), out=tmp,
                          max_time_s=args.max_time)
    rows = {}
    for label, both in result.items():
        real, sim = both["real"], both["sim"]
        rt, st = real.get("time_to_target_s"), sim.get("time_to_target_s")
        rows[label] = {"real": {k: real.get(k) for k in KEYS}, "sim": {k: sim.get(k) for k in KEYS},
                       "sim_over_real": round(st / rt, 3) if rt and st else None}
    record("sim_fidelity", {"devices": 4, "preset": "S1", "target_accuracy": 0.85, "runs": rows})


if __name__ == "__main__":
    main()
