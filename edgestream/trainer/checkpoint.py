"""Checkpoints of a real run: one file per rank, tensors and plain types only.

`<run dir>/checkpoints/rank<i>.pt` holds the model's state_dict, the optimizer's, the algorithm's
explicit state (WorkerContext.step and .state), the device's stream state
(`KafkaStreamDataset.state_dict()`: how far its streams were consumed) and the run's elapsed time.
It is written to a temporary file and renamed, so a crash leaves the previous checkpoint whole;
it loads with `torch.load(..., weights_only=True)` (no pickle of arbitrary objects).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

FORMAT = 2


def checkpoint_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "checkpoints" / f"rank{rank}.pt"


def save_checkpoint(path: Path, *, model, optimizer, step: int, state: dict, stream: dict, elapsed_s: float,
                    samples: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": int(step),
               "state": state, "stream": stream, "elapsed_s": float(elapsed_s), "samples": int(samples)}
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path, map_location: Any = "cpu") -> dict:
    """The checkpoint at `path` (weights_only: tensors and plain types only)."""
    data = torch.load(path, map_location=map_location, weights_only=True)
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: checkpoint format {data.get('format')!r}, this edgestream reads {FORMAT}")
    return data
