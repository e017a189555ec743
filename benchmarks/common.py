"""Shared benchmark helpers: a broker for the run, result recording."""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

OUT = Path(os.environ.get("EDGESTREAM_BENCH_OUT", "bench-out"))


@contextmanager
def bench_broker():
    """EDGESTREAM_BOOTSTRAP if set, else a managed local broker for this benchmark."""
    if os.environ.get("EDGESTREAM_BOOTSTRAP"):
        yield os.environ["EDGESTREAM_BOOTSTRAP"], None
        return
    from edgestream.kafka import LocalBroker

    with LocalBroker() as broker:
        yield broker.bootstrap, broker


def record(name: str, result: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    result = {"benchmark": name, "when": time.strftime("%Y-%m-%d %H:%M:%S"), **result}
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


def produce_ahead(bootstrap: str, cfg_path: Path, devices: list[int], need: int, rate: float, prefix: str) -> str:
    """Produce `need` samples on each of `devices` (the config's producer streaming at `rate` samples/s,
    as fast as it goes) before anything starts; the run id (`prefix` + a time stamp). A producer behind
    its schedule produces less: a new one continues where the topics end."""
    from edgestream.config import load_config
    from edgestream.producers.from_plan import stream_producer
    from edgestream.runner.plan import RunPlan

    cfg = load_config(cfg_path)
    run_id = f"{prefix}{int(time.time() * 1000) % 10**10}"
    done = 0
    for _ in range(50):
        plan = RunPlan.resolve(cfg)
        producer = stream_producer(plan, bootstrap, plan.run_name(run_id), list(devices))  # the trainers' topics
        summary = producer.run_for((need - done) / rate + 0.2, report_every_s=0)
        if not summary.complete:
            raise SystemExit(f"producing ahead failed: {summary.to_json()}")
        done = min(d["start_seq"] + d["delivered"] for d in summary.devices)
        if done >= need:
            return run_id
    raise SystemExit(f"could not produce {need} samples per device ahead")
