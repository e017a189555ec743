"""The learning task: ONE object that owns the loss and the metrics (`config.task`).

    task = get_task("regression")
    loss = task.loss(model(x), y)                 # the training loss, a mean over the batch
    per = task.per_sample_loss(output, y)         # [B]: the batched simulator's weighted sums
    sums = task.metric_sums(output, y)            # additive sums over a chunk (evaluation)
    metrics = task.finish(sums, n)                # {"loss": .., "accuracy": ..} or {"loss", "rmse", "mae"}

- classification: targets are class indices (int64 [B]); the model outputs logits [B, num_classes];
  loss cross-entropy; metrics accuracy (higher is better) and loss.
- regression: targets are float scalars [B] or float vectors [B, K]; the model outputs [B, K] (K = 1 for
  a scalar target); loss mean squared error; metrics rmse and mae (lower is better) and loss.

`DIRECTIONS` says which way each metric improves (stop.target_metric and time-to-target use it).
Importing this module does not import torch (the config schema uses the names).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

TASKS = ("classification", "regression")  # the built-ins (edgestream.plugins.TASKS)
#: metric name -> True when higher is better
DIRECTIONS: dict[str, bool] = {"accuracy": True, "loss": False, "rmse": False, "mae": False}


def reached(metric: str, value: float | None, target: float) -> bool:
    """Whether `value` of `metric` reached `target`: >= for a metric where higher is better (accuracy),
    <= for an error (rmse, mae, loss); a missing value never does."""
    if value is None:
        return False
    return value >= target if DIRECTIONS.get(metric, True) else value <= target


@dataclass(frozen=True)
class Task:
    """The loss and metrics of one task (see the module doc)."""

    name: str
    metrics: tuple[str, ...]  # what evaluation reports, the primary metric first
    labels: bool              # targets are class indices (label-based features apply)

    @property
    def primary(self) -> str:
        """The metric a run is judged by (summary's final metric, the default stop target)."""
        return self.metrics[0]

    def num_outputs(self, num_classes: int | None, target_shape: tuple[int, ...] = ()) -> int:
        """How many outputs the model needs: the classes, or the target's length (1 for a scalar)."""
        if self.labels:
            return int(num_classes or 0)
        return int(math.prod(target_shape)) if target_shape else 1

    # ------------------------------------------------------------------ torch side
    def _match(self, output: Any, target: Any) -> Any:
        """A regression output shaped as the target ([B] for scalar targets, [B, K] for vectors)."""
        if output.shape == target.shape:
            return output
        if output.numel() != target.numel():
            raise ValueError(f"task regression: the model's output {tuple(output.shape)} does not match the "
                             f"targets {tuple(target.shape)} (num_outputs must be the target's length)")
        return output.reshape(target.shape)

    def loss(self, output: Any, target: Any) -> Any:
        """The mean training loss of a batch."""
        import torch.nn.functional as F

        if self.labels:
            return F.cross_entropy(output, target)
        return F.mse_loss(self._match(output, target), target.to(output.dtype))

    def per_sample_loss(self, output: Any, target: Any) -> Any:
        """The loss of each sample, [B] (mean over a vector target's elements)."""
        import torch.nn.functional as F

        if self.labels:
            return F.cross_entropy(output, target, reduction="none")
        out = self._match(output, target)
        sq = (out - target.to(out.dtype)) ** 2
        return sq.reshape(len(sq), -1).mean(dim=1)

    def metric_sums(self, output: Any, target: Any) -> dict[str, float]:
        """Additive sums over a chunk, for `finish`: loss_sum, and correct (classification) or sse, sae and
        elements (regression)."""
        import torch.nn.functional as F

        if self.labels:
            return {"loss_sum": float(F.cross_entropy(output, target, reduction="sum")),
                    "correct": float((output.argmax(dim=1) == target).sum())}
        out = self._match(output, target)
        diff = out - target.to(out.dtype)
        per = (diff ** 2).reshape(len(diff), -1).mean(dim=1)
        return {"loss_sum": float(per.sum()), "sse": float((diff ** 2).sum()), "sae": float(diff.abs().sum()),
                "elements": float(diff.numel())}

    # ------------------------------------------------------------------ prequential (test-then-train) scores
    @property
    def sum_keys(self) -> tuple[str, ...]:
        """The columns of `sample_sums`: the keys of `metric_sums`, which `finish` reads."""
        return ("correct", "loss_sum") if self.labels else ("sse", "sae", "elements", "loss_sum")

    def sample_sums(self, output: Any, target: Any) -> Any:
        """Each sample's share of `metric_sums`, [B, len(sum_keys)] float64 on the CPU (summing the rows gives
        `metric_sums` of the batch): what prequential evaluation keeps per sample (edgestream.metrics.prequential).
        `output` is the forward pass the training step takes its gradients from (scored before the update)."""
        import torch

        with torch.no_grad():
            output = output.detach()
            loss = self.per_sample_loss(output, target).to(torch.float64)  # the task's own loss, per sample
            if self.labels:
                cols = [(output.argmax(dim=1) == target).to(torch.float64), loss]
            else:
                out = self._match(output, target)
                diff = (out - target.to(out.dtype)).reshape(len(out), -1).to(torch.float64)
                cols = [(diff ** 2).sum(dim=1), diff.abs().sum(dim=1),
                        torch.full((len(diff),), float(diff.shape[1]), dtype=torch.float64), loss]
            return torch.stack(cols, dim=1).cpu()

    def sample_errors(self, sums: Any) -> Any:
        """The prequential error of each sample from its `sample_sums` rows (numpy [B, m] -> [B]): what drift
        detectors read. Classification: 1 - correct (0 or 1); regression: the absolute error (mean over a
        vector target's elements)."""
        if self.labels:
            return 1.0 - sums[:, 0]
        return sums[:, 1] / sums[:, 2]

    def finish(self, sums: dict[str, float], n: int) -> dict[str, float]:
        """The metrics of `n` samples from accumulated `metric_sums`."""
        n = max(1, int(n))
        if self.labels:
            return {"accuracy": sums.get("correct", 0.0) / n, "loss": sums.get("loss_sum", 0.0) / n}
        e = max(1.0, sums.get("elements", 0.0))
        return {"rmse": math.sqrt(sums.get("sse", 0.0) / e), "mae": sums.get("sae", 0.0) / e,
                "loss": sums.get("loss_sum", 0.0) / n}


CLASSIFICATION = Task("classification", ("accuracy", "loss"), labels=True)
REGRESSION = Task("regression", ("rmse", "mae", "loss"), labels=False)
_TASKS = {t.name: t for t in (CLASSIFICATION, REGRESSION)}


def get_task(name: str) -> Task:
    """The task `name` resolves to through edgestream.plugins.TASKS (a built-in of TASKS, an import path to a
    `Task`, or an entry point in the group edgestream.tasks); PluginError (a ValueError, one line) otherwise."""
    if name in _TASKS:
        return _TASKS[name]
    from edgestream.plugins import TASKS as REGISTRY

    return REGISTRY.load(name, "task")
