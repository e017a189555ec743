"""Time to the first training step: `edgestream run --engine local` beside torchrun + plain DDP (issue 35 item 1).

Both sides start from nothing but a running Kafka broker (a managed one started before the timing, or
EDGESTREAM_BOOTSTRAP) and train cnn-small on digits with the same world size (gloo, CPU):

* **edgestream**: `edgestream run CONFIG --engine local` (ddl, fixed batch 64, 1,500 samples/s per device
  streamed by its producer, max 20 steps). Timed from the command's start to the first step line in
  ranks/0.jsonl, with each phase on the way: the trainers started (pids.json: forked from the run's fork
  server once it imported torch), all of them ready (ranks/<rank>.ready: rendezvous done, device stream
  open), the streams released (ranks/streams.go) and the producer streaming (producer.status.json).
* **torchrun + DDP**: `python -m torch.distributed.run --nproc-per-node W script.py`, the script a user
  writes: import torch, `sklearn.datasets.load_digits`, the same model (the zoo's cnn-small), DDP, SGD;
  timed from the command's start to the end of rank 0's first step (a marker file).

Runs alternate (--rounds each, the side going first alternating); medians and the ratio edgestream /
torchrun (above 1: edgestream is slower to its first step).

    python benchmarks/bench_startup.py [--world 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_runtime_cost import _free_port  # noqa: E402
from common import bench_broker, record  # noqa: E402

DDP_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from torch.nn.parallel import DistributedDataParallel as DDP
    from edgestream.models import build_model

    marker = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    d = load_digits()
    x = torch.tensor(d.images[rank::world, None] / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target[rank::world])
    torch.manual_seed(0)
    model = DDP(build_model("cnn-small", (1, 8, 8), 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(20):
        i = (step * 64) % (len(x) - 64)
        opt.zero_grad()
        F.cross_entropy(model(x[i:i + 64]), y[i:i + 64]).backward()
        opt.step()
        if step == 0 and rank == 0:
            open(marker, "w").write(str(time.monotonic()))
    dist.destroy_process_group()
""")


def _wait_for(check, timeout: float = 180.0, every: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise SystemExit("timed out waiting for the first step")


def _first_step(path: Path) -> bool:
    try:
        return any(json.loads(line).get("kind") == "step" for line in path.read_text().splitlines() if line)
    except (OSError, ValueError):
        return False


def edgestream_once(tmp: Path, bootstrap: str, world: int, n: int) -> dict:
    import yaml

    cfg = tmp / "startup.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "startup", "seed": 0, "data": {"dataset": "digits"}, "model": {"name": "cnn-small"},
        "devices": {"count": world, "rates": {"distribution": "constant", "rate": 1500}},
        "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 64}},
        "stop": {"max_steps": 20, "target_accuracy": None}}))
    run_id = f"s{os.getpid()}-{n}-{int(time.time())}"
    run_dir = tmp / f"startup-ddl-{run_id}"  # <name>-<algorithm>-<run id>
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "edgestream.cli", "run", str(cfg), "--engine", "local",
                             "--bootstrap", bootstrap, "--out", str(tmp), "--run-id", run_id],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ranks = run_dir / "ranks"
    phases = {  # in the order they happen; each timed when its file appears (polled every 2 ms)
        "trainers_started_s": lambda: (run_dir / "pids.json").exists(),  # forked from the fork server
        "ready_s": lambda: all((ranks / f"{r}.ready").exists() for r in range(world)),  # rendezvous, streams open
        "released_s": lambda: (ranks / "streams.go").exists(),  # the producer may stream
        "streaming_s": lambda: (run_dir / "producer.status.json").exists(),  # its first sample goes out
        "first_step_s": lambda: _first_step(ranks / "0.jsonl"),  # rank 0's first step line
    }
    seen: dict[str, float] = {}
    deadline = t0 + 180
    while len(seen) < len(phases) and time.monotonic() < deadline and proc.poll() is None:
        for name, check in phases.items():
            if name not in seen and check():
                seen[name] = round(time.monotonic() - t0, 2)
        time.sleep(0.002)
    if len(seen) < len(phases):
        raise SystemExit(f"timed out waiting for the first step (seen: {seen})")
    proc.wait(timeout=300)
    return {**{k: seen[k] for k in phases}, "exit": proc.returncode, "wall_s": round(time.monotonic() - t0, 2)}


def torchrun_once(tmp: Path, world: int, n: int) -> dict:
    script = tmp / "ddp_startup.py"
    script.write_text(DDP_SCRIPT)
    marker = tmp / f"first-step-{n}"
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // world)))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world}",
                             f"--master-port={_free_port()}", str(script), str(marker)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    first = float(_wait_for(lambda: marker.exists() and marker.read_text())) - t0
    proc.wait(timeout=300)
    return {"first_step_s": round(first, 2), "exit": proc.returncode, "wall_s": round(time.monotonic() - t0, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    ours, theirs = [], []
    with bench_broker() as (bootstrap, _broker), tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for n in range(args.rounds):
            pair = [("edgestream", lambda n=n: ours.append(edgestream_once(tmp, bootstrap, args.world, n))),
                    ("torchrun", lambda n=n: theirs.append(torchrun_once(tmp, args.world, n)))]
            for name, go in (pair if n % 2 == 0 else pair[::-1]):
                go()
                print(f"round {n + 1} {name}: {(ours if name == 'edgestream' else theirs)[-1]}", flush=True)
    med = {k: statistics.median(r[k] for r in ours) for k in ours[0] if k.endswith("_s") and k != "wall_s"}
    ddp = statistics.median(r["first_step_s"] for r in theirs)
    record("startup", {"world": args.world, "cpus": os.cpu_count(), "rounds": args.rounds,
                       "edgestream_median": med, "torchrun_ddp_first_step_s": ddp,
                       "ratio_first_step": round(med["first_step_s"] / ddp, 2), "edgestream": ours, "torchrun": theirs})


if __name__ == "__main__":
    main()
