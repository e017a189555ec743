"""Prequential evaluation's cost on a real trainer's step (issue 56, item 1): the step of `TrainerPerformer` (its
forward/backward `do_compute` and optimizer step `do_apply`, the code a trainer process runs) without scoring and
with it (the batch's per-sample sums taken from the same forward, `Task.sample_sums`, then the device's counters and
an ADWIN detector updated as the session does at the step's Log, `DeviceWatch.step`), side by side in one process,
alternating in rounds; the ratio of the median step times. Goal: <= 1.15x for cnn-small at b = 64 on this machine.

    python benchmarks/bench_prequential.py [--models cnn-small,mlp] [--batches 64] [--steps 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import record  # noqa: E402

from edgestream.config import validate_dict  # noqa: E402
from edgestream.runner.plan import RunPlan  # noqa: E402
from edgestream.runner.watch import DeviceWatch  # noqa: E402
from edgestream.sync.requests import Apply, Compute  # noqa: E402
from edgestream.trainer.performer import TrainerBatch, TrainerPerformer  # noqa: E402


class _Batch(TrainerBatch):
    """A TrainerBatch without a stream behind it (the benchmark's fixed tensors)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y, self.n, self.stream = x, y, int(len(y)), None


def _plan(model: str) -> RunPlan:
    return RunPlan.resolve(validate_dict({
        "name": "bench", "seed": 0, "data": {"dataset": "synthetic", "shape": [1, 28, 28], "num_classes": 10,
                                             "n_train": 2000, "n_test": 200},
        "devices": {"count": 1}, "model": {"name": model}, "optim": {"lr": 0.01, "momentum": 0.9},
        "algorithm": {"name": "ddl"}, "eval": {"prequential": {"window": 1000}},
        "drift": {"detector": "adwin", "on_detect": ["warn"]}}))


def _steps(plan: RunPlan, batch: int, steps: int, scoring: bool) -> list[float]:
    torch.manual_seed(0)
    model = plan.build_model()
    optimizer = plan.build_optimizer(model)
    perf = TrainerPerformer(0, model, optimizer, None, None, {}, device=torch.device("cpu"), task=plan.task,
                            scoring=scoring)
    watch = DeviceWatch.of(plan, 0) if scoring else None
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    b = _Batch(x, y)
    out = []
    for i in range(steps):
        t0 = time.perf_counter()
        res = perf.do_compute(0, Compute(b))
        perf.do_apply(0, Apply(res.grads, 0.01))
        if watch is not None:
            watch.step([(res.scores, None)], time=float(i), step=i)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="cnn-small,mlp")
    ap.add_argument("--batches", default="64")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    for model in args.models.split(","):
        plan = _plan(model)
        for batch in (int(b) for b in args.batches.split(",")):
            times: dict[bool, list[float]] = {False: [], True: []}
            for r in range(args.rounds):
                for scoring in ((False, True) if r % 2 == 0 else (True, False)):
                    times[scoring] += _steps(plan, batch, args.steps + args.warmup, scoring)[args.warmup:]
            off, on = statistics.median(times[False]), statistics.median(times[True])
            key = f"{model} b={batch}"
            results[key] = {"step_ms_without": round(off * 1e3, 3), "step_ms_with": round(on * 1e3, 3),
                            "ratio": round(on / off, 3)}
            print(f"{key}: step {off * 1e3:.2f} ms without prequential, {on * 1e3:.2f} ms with "
                  f"(scores + counters + ADWIN): {on / off:.3f}x", flush=True)
    record("prequential", results)


if __name__ == "__main__":
    main()
