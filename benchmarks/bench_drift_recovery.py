"""Drift responses measured (issue 56, item 4): how long the all-devices prequential window accuracy takes to come
back to its level before a drift, with each response of `drift.on_detect` and with none, in the simulator and on
real trainers (managed broker, `edgestream run --engine local`), side by side in one run.

Scenarios (digits, 4 devices at 150 samples/s, mlp, ScaDLES with fixed batches of 32, ADWIN on each device):

* `shift`: an input shift (x * 0.5 + 128: pale, low-contrast digits, a region the other devices never visit) on devices 0 and 1
  at their sample 6,000 -- a change the shared model can learn beside the old concept;
* `swap`: a label swap (a seeded derangement) on every device at sample 6,000 -- a new concept everywhere.

Responses: none (warn only), reweight {factor 3, steps 30} (the drifted devices weigh 3x in the aggregation),
reset_optimizer, lr_boost {factor 3, steps 30}. Reported per run: the window accuracy just before the change, its
worst after, its last, and the seconds from the change until it is back within 0.02 of before (virtual seconds in
the simulator, wall seconds on real trainers; `edgestream.metrics.prequential.recovery`), with the samples trained
on all devices in that time.

    python benchmarks/bench_drift_recovery.py [--engines sim,local] [--scenarios shift,swap] [--seeds 1,2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import bench_broker, record  # noqa: E402

from edgestream.config import validate_dict  # noqa: E402
from edgestream.metrics.events import read_events  # noqa: E402
from edgestream.metrics.prequential import recovery, window_curve  # noqa: E402
from edgestream.runner import run_config  # noqa: E402

AT = 6000
RESPONSES: dict[str, list[Any]] = {
    "none": ["warn"], "reweight": ["warn", {"reweight": {"factor": 3, "steps": 30}}],
    "reset_optimizer": ["warn", "reset_optimizer"], "lr_boost": ["warn", {"lr_boost": {"factor": 3, "steps": 30}}]}
SCENARIOS = {"shift": {"kind": "input_shift", "scale": 0.5, "offset": 128.0, "devices": [0, 1]},
             "swap": {"kind": "label_swap", "devices": "all"}}


def config(scenario: str, response: str, seed: int) -> dict[str, Any]:
    return {"name": f"rec-{scenario}-{response.replace('_', '')}", "seed": seed,
            "data": {"dataset": "digits", "partition": "iid"},
            "devices": {"count": 4, "rates": {"distribution": "constant", "rate": 150},
                        "compute": {"base_s": 0.01, "per_sample_s": 0.0002},
                        "drift": [{"at_sample": AT, **SCENARIOS[scenario]}]},
            "model": {"name": "mlp"}, "optim": {"lr": 0.05, "momentum": 0.9},
            "algorithm": {"name": "scadles", "batch": {"policy": "fixed", "size": 32}, "buffer": "truncate"},
            "stop": {"max_steps": 400, "max_time_s": 300, "target_accuracy": None},
            "eval": {"every_s": 30, "prequential": {"window": 300}},
            "drift": {"detector": "adwin", "on_detect": RESPONSES[response]}}


def measure(run_dir: Path) -> dict[str, Any]:
    records = read_events(run_dir / "events.jsonl")
    curve = window_curve(records, "accuracy")
    starts = [float(e["time"]) for e in records if e.get("kind") == "drift_start"]
    if not starts:
        return {"note": "the change was never trained on"}
    at = min(starts)
    r = recovery(curve, at)
    if r["recovered_s"] is not None:  # samples trained on all devices between the change and the recovery
        until = at + r["recovered_s"]
        n = {}
        for e in records:
            if e.get("kind", "step") == "step" and "preq_n" in e and at <= float(e["time"]) <= until:
                n.setdefault(e["device"], []).append(int(e["preq_n"]))
        r["samples"] = sum(v[-1] - v[0] for v in n.values())
    r["detections"] = sum(1 for e in records if e.get("kind") == "drift")
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--engines", default="sim,local")
    ap.add_argument("--scenarios", default="shift,swap")
    ap.add_argument("--responses", default=",".join(RESPONSES))
    ap.add_argument("--seeds", default="1")
    args = ap.parse_args()
    engines = args.engines.split(",")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, (bench_broker() if "local" in engines else _nothing()) as held:
        broker = held[0] if held else None
        for scenario in args.scenarios.split(","):
            for response in args.responses.split(","):
                for engine in engines:
                    for seed in (int(s) for s in args.seeds.split(",")):
                        cfg = validate_dict(config(scenario, response, seed))
                        opts = {"bootstrap": broker} if engine == "local" else {}
                        path, _ = run_config(cfg, engine, out=Path(tmp) / engine, progress=False, **opts)
                        key = f"{scenario} {response} {engine} seed {seed}"
                        results[key] = measure(path)
                        print(f"{key}: {json.dumps(results[key])}", flush=True)
    record("drift_recovery", results)


class _nothing:
    def __enter__(self) -> tuple | None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


if __name__ == "__main__":
    main()
