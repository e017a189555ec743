"""Producer ceiling: the maximum aggregate samples/s of `edgestream produce` vs Kafka's own producer
benchmark (org.apache.kafka.tools.ProducerPerformance, same jars, same broker, same message size,
same acks/idempotence/linger/batch settings), as a ratio. Target >= 0.7.

    python benchmarks/bench_producer_ceiling.py [--seconds 15] [--devices 16]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from common import bench_broker, record  # noqa: E402

from edgestream.data import encode_sample  # noqa: E402
from edgestream.kafka import create_topics, resolve_jars  # noqa: E402
from edgestream.kafka.jars import find_java  # noqa: E402


def edgestream_rate(bootstrap: str, devices: int, seconds: float) -> tuple[float, int]:
    run_id = f"c{int(time.time())}"
    cfg = {"name": "ceiling", "data": {"dataset": "synthetic", "shape": [3, 32, 32], "n_train": 2000, "n_test": 100},
           "devices": {"count": devices, "rates": {"distribution": "constant", "rate": 1_000_000}}}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(cfg, f)
    out = subprocess.run([sys.executable, "-m", "edgestream.cli", "produce", f.name, "--bootstrap", bootstrap,
                          "--run-id", run_id, "--duration", str(seconds), "--report-every", "100"],
                         capture_output=True, text=True, timeout=seconds + 180)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    s = json.loads(out.stdout.strip().splitlines()[-1])
    return s["delivered"] / s["duration_s"], s["delivered"]


def kafka_perf_rate(bootstrap: str, records: int, size: int) -> float:
    topic = f"perf-{int(time.time())}"
    create_topics(bootstrap, {topic: 1})
    cmd = [find_java(), "-Xmx512m", "-cp", str(resolve_jars() / "*"), "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
           "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "enable.idempotence=true",
           "linger.ms=5", "batch.size=1048576", "compression.type=none"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    last = [ln for ln in out.stdout.splitlines() if "records sent" in ln][-1]
    return float(re.search(r"([\d.]+) records/sec", last).group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--devices", type=int, default=16)
    args = ap.parse_args()
    import numpy as np

    size = len(encode_sample(np.zeros((3, 32, 32), np.uint8), 0, 0, 0, 0.0))
    with bench_broker() as (bootstrap, _):
        ours, n = edgestream_rate(bootstrap, args.devices, args.seconds)
        theirs = kafka_perf_rate(bootstrap, max(n, 200_000), size)
    record("producer_ceiling", {"message_bytes": size, "devices": args.devices,
                                "edgestream_samples_per_s": round(ours), "kafka_producer_perf_per_s": round(theirs),
                                "ratio": round(ours / theirs, 3), "target": ">= 0.7"})


if __name__ == "__main__":
    main()
