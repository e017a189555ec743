"""A run's producer, built from its plan (edgestream.runner.plan.RunPlan): the plan says what the device streams
are (shards, rate model, serde, stream identity, layout); this wires them to a `StreamProducer`, so runner/
knows no producer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgestream.producers.stream_producer import StreamProducer
from edgestream.runner.plan import PlanError

if TYPE_CHECKING:
    from edgestream.runner.plan import RunPlan


def stream_producer(plan: RunPlan, bootstrap: str, run: str, devices: list[int], **kw: Any) -> StreamProducer:
    """A `StreamProducer` of `devices` of run `run`: each device streams its shard at its rate, and
    the run's stream identity is pinned in `<run>.meta` (RunConfigConflict when it differs)."""
    if plan.external:
        raise PlanError(["streams.source: external: the run reads streams others write; there is nothing for "
                         "edgestream's producer to replay (devices publish with their own clients, or "
                         "edgestream.DeviceProducer)"])
    ds = plan.dataset
    kw.setdefault("run_config", plan.stream_identity())
    kw.setdefault("layout", plan.layout(run))
    kw.setdefault("topic_settings", plan.topic_settings(bootstrap))
    kw.setdefault("drift", plan.drift_scenario)
    return StreamProducer(bootstrap, run, devices, ds.x_train, ds.y_train, plan.shards, plan.rate_model,
                          plan.serde.encode, seed=plan.seed, security=plan.security, **kw)
