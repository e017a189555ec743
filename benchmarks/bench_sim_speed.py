"""Simulator speed: simulated device-steps per wall second at 16, 64 and 256 devices (cnn-small on
digits, ddl with b = 32, dense all-reduce), and where the wall time goes.

Categories (SimEngine.profile): forward_backward, optimizer, eval, reduce (collective arithmetic) are
torch compute; algorithm is the sync/ generators' own code (exchange arithmetic, bookkeeping); data
(stream bookkeeping and batch assembly) and engine (SimPy, request dispatch, event lines) are the
simulator's own overhead. `overhead_share` = (data + engine) / wall; target < 10 % at 64 devices.

    python benchmarks/bench_sim_speed.py [--devices 16,64,256] [--device-steps 2048] [--threads N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import record  # noqa: E402

from edgestream.config import validate_dict  # noqa: E402
from edgestream.metrics import EventLog  # noqa: E402
from edgestream.sim.engine import SimEngine  # noqa: E402


def config(devices: int, steps: int, model: str) -> dict:
    return {
        "name": f"speed{devices}", "seed": 0, "data": {"dataset": "digits"},
        "devices": {"count": devices, "rates": {"distribution": "uniform", "low": 40, "high": 200},
                    "compute": {"base_s": 0.05, "per_sample_s": 0.002}},
        "model": {"name": model},
        "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 32}, "buffer": "persist"},
        "stop": {"target_accuracy": None, "max_time_s": None, "max_steps": steps},
        "eval": {"every_s": 1e6},
    }


def measure(devices: int, device_steps: int, model: str) -> dict:
    steps = max(3, device_steps // devices)
    cfg = validate_dict(config(devices, steps, model))
    engine = SimEngine(cfg, EventLog(None))
    t0 = time.perf_counter()
    engine.run()
    wall = time.perf_counter() - t0
    prof = engine.profile(wall)
    torch_s = prof["forward_backward"] + prof["optimizer"] + prof["eval"] + prof["reduce"]
    own = prof["data"] + prof["engine"]
    return {
        "devices": devices, "steps": steps, "device_steps": engine.stats.device_steps,
        "wall_s": round(wall, 3),
        "device_steps_per_wall_s": round(engine.stats.device_steps / wall, 1),
        "virtual_s_per_wall_s": round(float(engine.env.now) / wall, 2),
        "share_torch_compute": round(torch_s / wall, 4),
        "share_algorithm_code": round(prof["algorithm"] / wall, 4),
        "overhead_share": round(own / wall, 4),
        "share_outside_forward_backward": round(1 - prof["forward_backward"] / wall, 4),
        "profile_s": prof,
    }


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="16,64,256")
    ap.add_argument("--device-steps", type=int, default=2048, help="simulated device-steps per size")
    ap.add_argument("--model", default="cnn-small")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    measure(4, 64, args.model)  # warm-up: imports, first torch calls
    rows = [measure(int(d), args.device_steps, args.model) for d in args.devices.split(",")]
    for r in rows:
        print(f"{r['devices']:4d} devices: {r['device_steps_per_wall_s']:8.1f} device-steps/s, "
              f"torch {r['share_torch_compute']:.1%}, algorithm {r['share_algorithm_code']:.1%}, "
              f"simulator overhead {r['overhead_share']:.1%}", file=sys.stderr)
    record("sim_speed", {"model": args.model, "dataset": "digits", "algorithm": "ddl, b=32",
                         "torch_threads": torch.get_num_threads(), "rows": rows,
                         "target": "overhead_share < 0.10 at 64 devices"})
