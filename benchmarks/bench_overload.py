"""A stream that outruns training (issue 32 item 3): trainer memory and consumer lag under overload.

One real `edgestream run --engine local` (digits, mlp, ddl, fixed batch, persist buffer: nothing is
skipped unless --max-lag-s is given) with every device streaming at --rate samples/s, far more than the
trainers can train on this machine, for --duration seconds. While it runs, every --every seconds:

* each trainer's RSS (VmRSS of the `edgestream train` process in pids.json) and the producer's;
* each device's lag from its rank file's newest step line: `buffer_samples` (samples) and `lag_s`
  (seconds of data, when the trainers write it).

Result (bench-out/bench_overload[-LABEL].json): the series, and per trainer the RSS at the first sample
taken after training began, at the end and at most, the growth over the run's second half (a flat
memory shows ~0), and the lag at the end.

    python benchmarks/bench_overload.py [--devices 4] [--rate 2000] [--duration 300] [--batch 32]
                                        [--max-lag-s S] [--every 5] [--label before] [--keep]

EDGESTREAM_BOOTSTRAP: a running broker (else a managed local one for this benchmark).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from common import bench_broker, record  # noqa: E402


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class _LastStep:
    """The newest step line of a growing rank file (read incrementally)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial, self.last = path, 0, b"", None

    def read(self) -> dict | None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.last
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in reversed(lines):
            if b'"kind":"step"' in line:
                self.last = json.loads(line)
                break
        return self.last


def config(name: str, devices: int, rate: float, duration: float, batch: int, max_lag_s: float | None) -> dict:
    algorithm = {"name": "ddl", "batch": {"policy": "fixed", "size": batch}, "buffer": "persist"}
    if max_lag_s is not None:
        algorithm["max_lag_s"] = max_lag_s
    return {"name": name, "seed": 0, "data": {"dataset": "digits", "partition": "iid"},
            "devices": {"count": devices, "rates": {"distribution": "constant", "rate": rate}},
            "model": {"name": "mlp"}, "optim": {"lr": 0.05, "momentum": 0.9}, "algorithm": algorithm,
            "stop": {"target_accuracy": None, "max_time_s": duration, "max_steps": None},
            "eval": {"every_s": 30}}


def run(args: argparse.Namespace, bootstrap: str) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-overload-"))
    name = f"overload-{int(time.time())}"
    cfg = tmp / "c.yaml"
    cfg.write_text(yaml.safe_dump(config(name, args.devices, args.rate, args.duration, args.batch, args.max_lag_s)))
    out = tmp / "runs"
    cmd = [sys.executable, "-m", "edgestream.cli", "run", str(cfg), "--engine", "local", "--bootstrap", bootstrap,
           "--out", str(out), "--run-id", "r1", "--quiet"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = out / f"{name}-r1"
    tails = {r: _LastStep(run_dir / "ranks" / f"{r}.jsonl") for r in range(args.devices)}
    samples: list[dict] = []
    pids: dict | None = None
    try:
        while proc.poll() is None:
            time.sleep(args.every)
            if pids is None and (run_dir / "pids.json").is_file():
                pids = json.loads((run_dir / "pids.json").read_text())
            if pids is None or "trainers" not in pids:
                continue
            steps = {r: t.read() for r, t in tails.items()}
            point = {"t": round(time.monotonic() - t0, 1),
                     "rss_mb": {r: _rss_mb(int(p)) for r, p in pids["trainers"].items()},
                     "producer_rss_mb": _rss_mb(int(pids["producer"])) if pids.get("producer") else None,
                     "step": {r: s.get("step") if s else None for r, s in steps.items()},
                     "lag": {r: s.get("buffer_samples") if s else None for r, s in steps.items()},
                     "lag_s": {r: s.get("lag_s") if s else None for r, s in steps.items()}}
            samples.append(point)
            print(json.dumps(point), flush=True)
            if pids.get("producer") is None:  # the producer starts when every trainer is ready
                pids = None
    finally:
        if proc.poll() is None:
            proc.terminate()
        _, err = proc.communicate(timeout=120)
    if proc.returncode != 0:
        print(err[-3000:], file=sys.stderr)
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    steps_lines = [json.loads(ln) for r in range(args.devices)
                   for ln in (run_dir / "ranks" / f"{r}.jsonl").read_text().splitlines() if '"kind":"step"' in ln]
    dropped = {r: sum(int(s.get("dropped") or 0) for s in steps_lines if s["device"] == r) for r in range(args.devices)}
    # while training: every trainer alive and still stepping after the sample (not its start-up, not the
    # stop and the run's end)
    alive = [p for p in samples if all(v is not None for v in p["step"].values())
             and all(v is not None for v in p["rss_mb"].values())]
    trained = [p for p, q in zip(alive, alive[1:], strict=False) if q["step"] != p["step"]]
    per: dict[str, dict] = {}
    for r in map(str, range(args.devices)):
        rss = [(p["t"], p["rss_mb"][r]) for p in trained if p["rss_mb"].get(r) is not None]
        if not rss:
            continue
        half = [v for t, v in rss if t >= rss[0][0] + (rss[-1][0] - rss[0][0]) / 2]
        per[r] = {"rss_first_mb": round(rss[0][1], 1), "rss_mid_mb": round(rss[len(rss) // 2][1], 1),
                  "rss_end_mb": round(rss[-1][1], 1),
                  "rss_max_mb": round(max(v for _, v in rss), 1),
                  "rss_second_half_growth_mb": round(half[-1] - half[0], 1) if half else None,
                  "lag_end": trained[-1]["lag"][int(r)] if trained else None,
                  "lag_s_end": trained[-1]["lag_s"][int(r)] if trained else None,
                  "lag_max": max((p["lag"][int(r)] or 0) for p in trained),
                  "dropped": dropped[int(r)], "steps": trained[-1]["step"][int(r)] if trained else None}
    if args.keep:
        print(f"run directory: {run_dir}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"devices": args.devices, "rate": args.rate, "duration_s": args.duration, "batch": args.batch,
            "max_lag_s": args.max_lag_s, "returncode": proc.returncode, "wall_s": round(time.monotonic() - t0, 1),
            "samples_trained": summary.get("samples_trained"), "dropped_total": summary.get("dropped_total"),
            "per_trainer": per, "series": samples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--duration", type=float, default=300.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-lag-s", type=float, default=None)
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--label", default="")
    ap.add_argument("--keep", action="store_true", help="keep the run directory (printed) instead of removing it")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with bench_broker() as (bootstrap, _):
        result = run(args, bootstrap)
    record("bench_overload" + (f"-{args.label}" if args.label else ""), result)


if __name__ == "__main__":
    main()
