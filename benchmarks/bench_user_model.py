"""A user's model in the simulator vs the built-in of the same size (issue 29's acceptance): simulated
device-steps per wall second of the built-in `mlp` and of the same architecture loaded by import path
from a temporary folder (not the package), same config (digits, ddl with b = 32, auto compute path).

Variants (parameter counts are checked equal):

* `built-in`: model.name mlp (an nn.Sequential: the batched path's one-autograd-pass `DenseStack`);
* `user nn.Sequential`: `usermodels:mlp_seq`, a user factory returning the same nn.Sequential;
* `user nn.Module class`: `usermodels:MLP`, the same layers in a class of the user's own (an unknown
  module type: the simulator probes it and serves it with torch.func's vmap of grad);
* `user class per-device`: the same class forced to the per-device path (EDGESTREAM_SIM_COMPUTE), the
  reference a model falls back to when torch.func cannot run it.

Every run is a fresh Python process (no warm caches shared between variants); rounds alternate the
variants so each sees the same machine load, and the table keeps each variant's fastest run.

    python benchmarks/bench_user_model.py [--devices 64] [--device-steps 4096] [--repeat 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

USERMODELS = '''
"""A user's models: the built-in mlp's architecture, written by the user."""
import math

from torch import nn


def mlp_seq(input_shape, num_outputs, hidden=(128, 64)):
    layers, width = [nn.Flatten()], math.prod(input_shape)
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU(inplace=True)]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, num_outputs))


class MLP(nn.Module):
    def __init__(self, input_shape, num_outputs, hidden=(128, 64)):
        super().__init__()
        self.fc1 = nn.Linear(math.prod(input_shape), hidden[0])
        self.fc2 = nn.Linear(hidden[0], hidden[1])
        self.out = nn.Linear(hidden[1], num_outputs)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.out(self.act(self.fc2(self.act(self.fc1(x.flatten(1))))))
'''

#: variant -> (model.name, EDGESTREAM_SIM_COMPUTE)
VARIANTS = {
    "built-in": ("mlp", "auto"),
    "user nn.Sequential": ("usermodels:mlp_seq", "auto"),
    "user nn.Module class": ("usermodels:MLP", "auto"),
    "user class per-device": ("usermodels:MLP", "per-device"),
}


def config(devices: int, steps: int, model: str) -> dict:
    return {
        "name": f"usermodel{devices}", "seed": 0, "data": {"dataset": "digits"},
        "devices": {"count": devices, "rates": {"distribution": "uniform", "low": 40, "high": 200},
                    "compute": {"base_s": 0.05, "per_sample_s": 0.002}},
        "model": {"name": model},
        "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 32}, "buffer": "persist"},
        "stop": {"target_accuracy": None, "max_time_s": None, "max_steps": steps},
        "eval": {"every_s": 1e6},
    }


def measure(devices: int, device_steps: int, model: str) -> dict:
    from edgestream.config import validate_dict
    from edgestream.metrics import EventLog
    from edgestream.sim.engine import SimEngine

    steps = max(8, device_steps // devices)
    engine = SimEngine(validate_dict(config(devices, steps, model)), EventLog(None))
    t0, c0 = time.perf_counter(), time.process_time()
    engine.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = engine.stats.device_steps
    return {"model": model, "devices": devices, "device_steps": n, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "device_steps_per_wall_s": round(n / wall, 1), "device_steps_per_cpu_s": round(n / cpu, 1),
            "compute_path": engine.compute_mode, "compute_reason": engine.compute_reason,
            "num_params": engine.replicas.num_params, "load_avg": round(os.getloadavg()[0], 2)}


def child(args: argparse.Namespace) -> None:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    measure(4, 64, args.child_model)  # warm-up: first torch and vmap calls
    print(json.dumps(measure(args.devices, args.device_steps, args.child_model)))


def run_child(folder: str, variant: str, args: argparse.Namespace) -> dict:
    model, compute = VARIANTS[variant]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([folder, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "EDGESTREAM_SIM_COMPUTE": compute}
    cmd = [sys.executable, __file__, "--child-model", model, "--devices", str(args.devices),
           "--device-steps", str(args.device_steps), "--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{variant}: {' '.join(cmd)} failed:\n{out.stderr[-4000:]}")
    return {"variant": variant, **json.loads(out.stdout.strip().splitlines()[-1])}


def table(best: dict[str, dict]) -> str:
    base = best["built-in"]["device_steps_per_wall_s"]
    base_cpu = best["built-in"]["device_steps_per_cpu_s"]
    lines = ["| model | compute path | parameters | device-steps/s (wall / cpu) | vs built-in (wall / cpu) |",
             "|---|---|---|---|---|"]
    for variant, r in best.items():
        lines.append(f"| {variant} (`{r['model']}`) | {r['compute_path']} | {r['num_params']:,} | "
                     f"{r['device_steps_per_wall_s']:,.0f} / {r['device_steps_per_cpu_s']:,.0f} | "
                     f"{r['device_steps_per_wall_s'] / base:.2f}x / {r['device_steps_per_cpu_s'] / base_cpu:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--device-steps", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3, help="runs per variant; the table keeps the fastest")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list of the variants to run")
    ap.add_argument("--child-model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_model:
        child(args)
        sys.exit(0)
    from common import record  # noqa: E402

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="edgestream-usermodel-") as folder:
        (Path(folder) / "usermodels.py").write_text(textwrap.dedent(USERMODELS))
        for i in range(args.repeat):
            for variant in variants if i % 2 == 0 else reversed(variants):
                runs.append(run_child(folder, variant, args))
                print(json.dumps(runs[-1]), file=sys.stderr)
    best = {v: max((r for r in runs if r["variant"] == v), key=lambda r: r["device_steps_per_wall_s"])
            for v in variants}
    sizes = {r["num_params"] for r in best.values()}
    assert len(sizes) == 1, f"the variants differ in size: {sizes}"
    text = table(best)
    record("user_model", {"devices": args.devices, "device_steps": args.device_steps, "repeat": args.repeat,
                          "torch_threads": args.threads, "best": best, "runs": runs, "table": text})
    print(text)
