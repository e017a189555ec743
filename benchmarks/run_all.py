"""`make bench`: run every benchmark; results land in bench-out/*.json (copy figures to docs/BENCHMARKS.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
BENCHES = ["bench_consumer_decode.py", "bench_producer_ceiling.py", "bench_rate_accuracy.py",
           "bench_sim_paper.py", "bench_sim_speed.py", "bench_runtime_cost.py", "bench_sim_fidelity.py",
           "bench_zipline.py", "bench_adsp.py", "bench_ps_hetero.py", "bench_elastic_bsp.py",
           "bench_ps_roundtrip.py", "bench_ps_real_vs_sim.py", "bench_vs_ddp.py", "bench_sim_scale.py",
           "bench_many_streams.py", "bench_startup.py", "bench_record_decode.py", "bench_allreduce.py"]

if __name__ == "__main__":
    only = sys.argv[1:]
    failed = []
    for name in BENCHES:
        if only and not any(o in name for o in only):
            continue
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(HERE / name)]).returncode != 0:
            failed.append(name)
    sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
