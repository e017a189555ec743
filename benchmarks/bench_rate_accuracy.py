"""Rate accuracy at scale: N concurrent device streams at R samples/s each, 3,072-byte samples, one
producer process (`edgestream produce`), the local broker on the same machine, measured by an
independent consumer: effective rate per stream as % of target (median, min), p99 inter-arrival jitter, and the
producer process's own CPU (user + sys, as a share of one core over its run).

    python benchmarks/bench_rate_accuracy.py [--seconds 30] [--grid 16x100,16x600,32x100,32x600,64x100,64x600]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import yaml
from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).parent))
from common import bench_broker, record  # noqa: E402

from edgestream.data import SampleSerde  # noqa: E402
from edgestream.kafka import consumer_config, device_topic  # noqa: E402
from edgestream.runid import run_name  # noqa: E402


def measure(bootstrap: str, streams: int, rate: float, seconds: float) -> dict:
    name = f"rate{streams}x{int(rate)}"
    run_id = f"b{int(time.time())}"
    run = run_name(name, "ddl", run_id)  # the producer's topics: <name>-<algorithm>-<run id>.dev.<i>
    cfg = {"name": name, "seed": 0,
           "data": {"dataset": "synthetic", "shape": [3, 32, 32], "n_train": 2000, "n_test": 100},
           "algorithm": {"name": "ddl"}, "devices": {"count": streams, "rates": {"distribution": "constant", "rate": rate}}}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(cfg, f)
    warmup = 3.0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # the producer is this process's only child
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "edgestream.cli", "produce", f.name, "--bootstrap", bootstrap,
                             "--run-id", run_id, "--duration", str(seconds + warmup), "--report-every", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # independent consumer, on all device topics, started while the producer runs
    times: dict[int, list[float]] = {d: [] for d in range(streams)}
    done = threading.Event()
    expected = {"n": None}

    def consume():
        c = Consumer(consumer_config(bootstrap, f"{run}.bench"))
        assigned = False
        while not done.is_set():
            if not assigned:
                try:
                    c.assign([TopicPartition(device_topic(run, d), 0, 0) for d in range(streams)])
                    assigned = True
                except Exception:
                    time.sleep(0.2)
                    continue
            for m in c.consume(10000, timeout=0.2):
                if m.error() is None:  # header only
                    h = SampleSerde.header(m.value())
                    times[h.device].append(h.produce_time)
            if expected["n"] is not None and sum(len(t) for t in times.values()) >= expected["n"]:
                break
        c.close()

    th = threading.Thread(target=consume, daemon=True)
    th.start()
    out, err = proc.communicate(timeout=seconds + 120)
    ran_s = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        done.set()
        raise RuntimeError(err[-2000:])
    summary = json.loads(out.strip().splitlines()[-1])
    expected["n"] = summary["delivered"]  # the consumer drains everything the producer delivered
    th.join(timeout=120)
    done.set()
    th.join()
    t_start = min(min(ts) for ts in times.values() if ts)
    lo, hi = t_start + warmup, t_start + warmup + seconds
    pct, jitter = [], []
    for ts in times.values():
        ts = np.sort(np.asarray(ts))
        window = ts[(ts >= lo) & (ts < hi)]
        pct.append(100.0 * len(window) / (rate * seconds))
        if len(window) > 2:
            jitter.append(np.abs(np.diff(window) - 1.0 / rate))
    jit = np.concatenate(jitter) if jitter else np.zeros(1)
    return {"streams": streams, "rate": rate, "seconds": seconds,
            "effective_pct_median": round(float(np.median(pct)), 2), "effective_pct_min": round(float(min(pct)), 2),
            "jitter_p99_ms": round(float(np.percentile(jit, 99)) * 1000, 3),
            "producer_cpu_s": round(cpu_s, 2), "producer_core_share": round(cpu_s / ran_s, 3),
            "producer_delivered": summary["delivered"], "consumer_received": int(sum(len(t) for t in times.values()))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--grid", default="16x100,16x600,32x100,32x600,64x100,64x600")
    args = ap.parse_args()
    rows = []
    with bench_broker() as (bootstrap, _):
        for cell in args.grid.split(","):
            n, r = cell.split("x")
            row = measure(bootstrap, int(n), float(r), args.seconds)
            print(row, flush=True)
            rows.append(row)
    record("rate_accuracy", {"rows": rows, "target": "every stream >= 98% of target at 64 x 600/s"})


if __name__ == "__main__":
    main()
