"""Drift detectors (issue 56, item 3): what each built-in costs per value, how often it raises a false alarm on a
stationary stream, and how many values after a change it needs to report it (docs/stream-learning.md, "Drift
detectors"; docs/BENCHMARKS.md).

* cost: microseconds per value of `update` called value by value and of `update_many` on batches of 64 (a training
  step's samples), on 0/1 errors at p = 0.1 and on absolute Gaussian errors; River's (Rust ADWIN, Python
  PageHinkley / DDM) beside them for reference. The median of `--passes` passes, one process, one core.
* false alarms: stationary streams of `--length` values (0/1 errors at p = 0.1 and 0.3; |N(0, 1)| absolute errors),
  `--seeds` seeds each: detections per stream, per 10,000 values, and the share of streams with at least one.
* delay: `--before` stationary values, then a jump (0/1 errors p 0.1 -> 0.5 and 0.2 -> 0.4; absolute errors
  |N(0, 1)| -> |N(0, 2)|, the mean absolute error 0.80 -> 1.60): the values after the change up to and including
  the first detection at or after it (median, mean, 90th percentile), the streams where none came within
  `--after` values, and the false alarms before the change.

    python benchmarks/bench_drift_detectors.py [--seeds 20] [--length 20000] [--passes 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import record  # noqa: E402

from edgestream.drift import make_detector  # noqa: E402

DETECTORS = [("adwin", {}), ("adwin", {"direction": "both"}), ("page_hinkley", {}), ("ddm", {})]


def label(name: str, params: dict) -> str:
    return name + "".join(f" {k}={v}" for k, v in params.items())


def bernoulli(rng: np.random.Generator, p: float, n: int) -> np.ndarray:
    return (rng.random(n) < p).astype(np.float64)


def abs_gauss(rng: np.random.Generator, scale: float, n: int) -> np.ndarray:
    return np.abs(rng.normal(0.0, scale, n))


def cost(values: np.ndarray, name: str, params: dict, passes: int) -> dict:
    """Median microseconds per value: update one by one, update_many in batches of 64, and River's update."""
    listed = values.tolist()
    one, many, river = [], [], []
    for _ in range(passes):
        det = make_detector(name, params)
        t = time.perf_counter()
        for v in listed:
            det.update(v)
        one.append((time.perf_counter() - t) / len(values) * 1e6)
        det = make_detector(name, params)
        t = time.perf_counter()
        for i in range(0, len(values), 64):
            det.update_many(values[i:i + 64])
        many.append((time.perf_counter() - t) / len(values) * 1e6)
        ref = river_detector(name, params)
        if ref is not None:
            t = time.perf_counter()
            for v in listed:
                ref.update(v)
            river.append((time.perf_counter() - t) / len(values) * 1e6)
    return {"update_us": round(statistics.median(one), 3), "update_many_64_us": round(statistics.median(many), 3),
            "river_us": round(statistics.median(river), 3) if river else None}


def river_detector(name: str, params: dict):
    """River's counterpart (River's ADWIN is two-sided, so only for direction both), or None."""
    try:
        from river import drift
    except ImportError:
        return None
    if name == "adwin":
        return drift.ADWIN() if params.get("direction") == "both" else None
    if name == "page_hinkley":
        return drift.PageHinkley(mode=params.get("direction", "up"))
    return drift.binary.DDM()


def false_alarms(name: str, params: dict, make, length: int, seeds: int) -> dict:
    counts = []
    for seed in range(seeds):
        det = make_detector(name, params)
        counts.append(len(det.update_many(make(np.random.default_rng(seed), length))))
    return {"per_stream": round(float(np.mean(counts)), 3), "per_10k": round(float(np.mean(counts)) * 1e4 / length, 3),
            "streams_with_one": round(float(np.mean([c > 0 for c in counts])), 3), "max": int(max(counts))}


def delay(name: str, params: dict, before_fn, after_fn, before: int, after: int, seeds: int) -> dict:
    delays, missed, early = [], 0, []
    for seed in range(seeds):
        rng = np.random.default_rng(10_000 + seed)
        values = np.concatenate([before_fn(rng, before), after_fn(rng, after)])
        hits = make_detector(name, params).update_many(values)
        early.append(sum(h < before for h in hits))
        late = [h for h in hits if h >= before]
        if late:
            delays.append(late[0] - before + 1)
        else:
            missed += 1
    out = {"missed": missed, "false_alarms_before": round(float(np.mean(early)), 3)}
    if delays:
        out.update(median=float(np.median(delays)), mean=round(float(np.mean(delays)), 1),
                   p90=round(float(np.percentile(delays, 90)), 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--length", type=int, default=20_000, help="values of a stationary stream")
    ap.add_argument("--before", type=int, default=5_000, help="stationary values before a jump")
    ap.add_argument("--after", type=int, default=5_000, help="values after a jump")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--cost-values", type=int, default=100_000)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    streams = {"bernoulli p=0.1": bernoulli(rng, 0.1, args.cost_values),
               "|N(0,1)|": abs_gauss(rng, 1.0, args.cost_values)}
    costs = {}
    for name, params in DETECTORS:
        for sname, values in streams.items():
            if name == "ddm" and not sname.startswith("bernoulli"):
                continue
            costs[f"{label(name, params)} on {sname}"] = cost(values, name, params, args.passes)
            print(f"cost  {label(name, params):22s} {sname:16s} {costs[f'{label(name, params)} on {sname}']}")

    stationary = {"bernoulli p=0.1": lambda r, n: bernoulli(r, 0.1, n),
                  "bernoulli p=0.3": lambda r, n: bernoulli(r, 0.3, n),
                  "|N(0,1)|": lambda r, n: abs_gauss(r, 1.0, n)}
    alarms = {}
    for name, params in DETECTORS:
        for sname, make in stationary.items():
            if name == "ddm" and not sname.startswith("bernoulli"):
                continue
            key = f"{label(name, params)} on {sname}"
            alarms[key] = false_alarms(name, params, make, args.length, args.seeds)
            print(f"false alarms  {key:40s} {alarms[key]}")

    jumps = {"p 0.1 -> 0.5": (lambda r, n: bernoulli(r, 0.1, n), lambda r, n: bernoulli(r, 0.5, n)),
             "p 0.2 -> 0.4": (lambda r, n: bernoulli(r, 0.2, n), lambda r, n: bernoulli(r, 0.4, n)),
             "|N(0,1)| -> |N(0,2)|": (lambda r, n: abs_gauss(r, 1.0, n), lambda r, n: abs_gauss(r, 2.0, n))}
    delays = {}
    for name, params in DETECTORS:
        for jname, (b, a) in jumps.items():
            if name == "ddm" and jname.startswith("|"):
                continue
            key = f"{label(name, params)} on {jname}"
            delays[key] = delay(name, params, b, a, args.before, args.after, args.seeds)
            print(f"delay  {key:45s} {delays[key]}")
    record("drift_detectors", {"seeds": args.seeds, "length": args.length, "before": args.before,
                               "after": args.after, "cost_us_per_value": costs, "false_alarms": alarms,
                               "delay_values": delays})


if __name__ == "__main__":
    main()
