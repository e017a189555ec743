"""Measure a model's forward+backward step time per batch size on this machine (`edgestream profile`)."""

from __future__ import annotations

import platform
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any


def time_steps(model: Any, in_shape: Sequence[int], num_classes: int, batches: Sequence[int], *,
               device: str = "cpu", repeats: int = 5, warmup: int = 2, task: Any = None) -> list[float]:
    """Best-of-`repeats` seconds of one forward+backward (the task's loss, gradients zeroed first) per batch
    size, on `device` (CUDA: synchronised before each clock read). task: edgestream.tasks' (default:
    classification over `num_classes` classes, regression when num_classes is 0; regression targets are
    shaped as the model's output). The model's gradients are cleared after."""
    import torch

    from edgestream.tasks import CLASSIFICATION, REGRESSION

    task = task or (CLASSIFICATION if num_classes else REGRESSION)
    dev = torch.device(device)
    model = model.to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out = []
    for b in batches:
        x = torch.randn(int(b), *in_shape, device=dev)
        if task.labels:
            y = torch.randint(0, num_classes, (int(b),), device=dev)
        else:
            with torch.no_grad():
                y = torch.randn_like(model(x))
        best = float("inf")
        for i in range(warmup + repeats):
            sync()
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            task.loss(model(x), y).backward()
            sync()
            if i >= warmup:
                best = min(best, time.perf_counter() - t0)
        out.append(best)
    model.zero_grad(set_to_none=True)
    return out


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name(torch.device(device))}, torch {torch.__version__}"
    cpu = platform.processor() or platform.machine()
    return f"CPU {cpu}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"


def measure_profile(plan: Any, *, device: str, batches: Sequence[int], repeats: int, name: str,
                    command: str) -> dict[str, Any]:
    """A profile document (edgestream.profiles) of the plan's model on `device`."""
    ds = plan.dataset
    shape = [int(x) for x in ds.shape]
    secs = time_steps(plan.build_model(), shape, int(ds.num_classes), batches, device=device, repeats=repeats,
                      task=plan.task)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"name": name, "device": device_name(device), "measured": now,
            "source": f"measured by `{command}` on {now} (best of {repeats} forward+backward steps per batch)",
            "models": {plan.model_name: {"shape": shape,
                                         "seconds": {int(b): round(float(s), 6) for b, s in zip(batches, secs,
                                                                                                strict=True)}}}}
