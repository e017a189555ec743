"""A run's Kafka consumers, built from its plan (edgestream.runner.plan.RunPlan): the trainer's device dataset
and what the run is scored on. The plan says what the run is (dataset, serde, policies, layout); these wire it
to the consumers, so runner/ knows no consumer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from edgestream.consumers.dataset import KafkaStreamDataset
from edgestream.consumers.holdout import FixedEvalSet, HoldoutSet

if TYPE_CHECKING:
    from edgestream.runner.plan import RunPlan


def eval_data(plan: RunPlan, bootstrap: str, run: str, device: Any = None) -> Any:
    """What the run is scored on (`EvalData.get() -> (x, y) | None`, edgestream.consumers.holdout): the
    dataset's test split or eval.path normalised, on `device`; with eval.holdout the streams' held-out
    records as they arrive."""
    if plan.external and plan.holdout is not None:
        return HoldoutSet(bootstrap, run, plan.layout(run, bootstrap), plan.serde, plan.world, plan.holdout,
                          plan.holdout_max, start=plan.start, security=plan.security,
                          task_labels=plan.task.labels, device=device)
    ds = plan.dataset
    y = torch.from_numpy(ds.y_test)
    return FixedEvalSet(ds.normalize(torch.from_numpy(ds.x_test)), y.long() if plan.task.labels else y.float(),
                        device)


def kafka_dataset(plan: RunPlan, bootstrap: str, run: str, device: int, **kw: Any) -> KafkaStreamDataset:
    """Device `device`'s `KafkaStreamDataset`: its stream shaped by the run's buffer and batch
    policies, validated against the run's sample spec, normalised as the dataset is."""
    kw.setdefault("max_lag_s", plan.max_lag_s)
    kw.setdefault("lag_warning_s", plan.lag_warning_s)
    kw.setdefault("layout", plan.layout(run, bootstrap))
    kw.setdefault("start", plan.start)
    if plan.external:
        kw.setdefault("holdout", plan.holdout)
    return KafkaStreamDataset(bootstrap, run, device, num_devices=plan.world, serde=plan.serde, batch=plan.batch,
                              buffer=plan.buffer, injection=plan.injection, seed=plan.seed,
                              security=plan.security, **kw)
