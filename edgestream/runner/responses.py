"""What a run does when a drift detector fires (`drift.on_detect`; docs/stream-learning.md, "Responses").

A response is attached to every worker session (`attach(plan, session)`) and runs right after the `drift` line of
a detection on that worker's device is written, at the step boundary (the step is applied, `ctx` consistent):

* `warn`: a log line naming the device, the samples it had seen, the sequence number (external streams: the
  offset) and the detector's statistic;
* `reweight: {factor, steps}`: the drifted device's fresh samples weigh `factor` times more in the aggregation for
  the next `steps` steps: its exchange weight w_i (ScaDLES' b_i, ddl's 1) is multiplied by `factor`
  (`WorkerContext.reweight`, read by the weighted exchange every synchronous algorithm shares,
  edgestream.sync.exchange.synchronous_step). Every worker receives the same weighted mean, so the replicas stay
  identical. With ScaDLES the linear LR rule sees the larger total weight, so the step's learning rate rises by
  the same share: the paper's rule applied to the re-weighted batch.

* `reset_optimizer`, `lr_boost: {factor, steps}`, `checkpoint`: group responses. In a synchronous algorithm every
  worker applies the same update, so these happen on every worker at the same step: the drifted worker votes at
  its next exchange and all of them act on the vote's count (edgestream.sync.drift.GroupDrift): the optimizer's
  state is reset before that step's update, the learning rate multiplied by `factor` for `steps` steps, every
  rank checkpointed at that step (real runs with checkpoints on).

Where a response cannot be performed, `check` says so in one line naming `drift.on_detect`.
"""

from __future__ import annotations

import logging
from typing import Any

from edgestream.runner.report import drift_line

log = logging.getLogger("edgestream.drift")

#: the responses the group performs together (agreed through the exchange: edgestream.sync.drift)
GROUP = ("reset_optimizer", "lr_boost", "checkpoint")


def check(plan: Any, engine: str | None = None) -> list[str]:
    """One line per response of `drift.on_detect` that this run cannot perform (on `engine`, when known)."""
    problems = []
    alg = plan.algorithm.name
    for name in plan.drift_responses:
        if name == "warn":
            continue
        if not plan.algorithm.weighted_exchange:
            what = ("changes a device's weight in the weighted gradient exchange" if name == "reweight" else
                    "is performed by every worker of a synchronous group at one step, agreed through the weighted "
                    "gradient exchange")
            problems.append(f"drift.on_detect: {name} {what} (`synchronous_step`: ddl, scadles, dbs-sgd); "
                            f"algorithm {alg} has none (it can warn)")
        elif name == "checkpoint":
            if engine is not None and engine != "local":
                problems.append(f"drift.on_detect: checkpoint: engine {engine} writes no checkpoints (real runs, "
                                "engine local, do)")
            elif not plan.checkpoints:
                problems.append("drift.on_detect: checkpoint needs checkpoint.every_steps or checkpoint.every_s "
                                "(the checkpoints it adds one to)")
    return problems


def group_drift(plan: Any) -> Any:
    """The group's drift responses for a worker's context (edgestream.sync.drift.GroupDrift), or None when the run
    has none to agree on."""
    responses = plan.drift_responses
    if not any(name in GROUP for name in responses) or not plan.algorithm.weighted_exchange:
        return None
    from edgestream.sync.drift import GroupDrift

    boost = responses.get("lr_boost")
    return GroupDrift(reset_optimizer="reset_optimizer" in responses,
                      lr_boost=None if boost is None else (float(boost["factor"]), int(boost["steps"])),
                      checkpoint="checkpoint" in responses)


def attach(plan: Any, session: Any) -> None:
    """Give `session` the responses of `drift.on_detect` (nothing without a `drift:` section)."""
    responses = plan.drift_responses
    if not responses:
        return

    def respond(s: Any, drift: dict[str, Any]) -> None:
        if drift.get("scope") != "device":
            return
        if "warn" in responses:
            log.warning("%s", drift_line(drift))
        rw = responses.get("reweight")
        if rw is not None:
            s.ctx.reweight = (float(rw["factor"]), int(s.ctx.step) + int(rw["steps"]))
        if s.ctx.drift is not None:
            s.ctx.drift.vote = True  # the group acts on it at this worker's next exchange

    session.ctx.drift = group_drift(plan)
    session.on_drift.append(respond)
