"""The "lockstep" engine: a config run by the in-process lockstep engine (edgestream.runner.lockstep), with
the run directory every engine writes (runner.rundir.write_run: config.yaml, events.jsonl, summary.json in the
one schema of runner.summary, plots). Importing this module registers it (edgestream.engine_names).

The workers are the plan's sessions (`WorkerGroup`: one stop rule, one event log), scheduled round robin by
`Lockstep`; `LockstepEngine` performs their data and model requests at once. No network, stream-rate or
compute model: its clock is virtual, a worker's advancing by the samples it computes (speed 1 sample per
second) and by Sleep, so stop.max_time_s counts samples; give stop.max_steps. Evaluation: at time 0, then
whenever worker 0's clock passed the next eval.every_s, and at the end, of the workers' average model (worker
0's replica for a synchronous algorithm: they are identical). Collective algorithms only (the parameter-server
family needs a coordinator: the simulator or the local engine).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from edgestream.metrics.events import EventLog
from edgestream.runner.engines import check_runs, register_engine
from edgestream.runner.evaluate import Evaluation, evaluate
from edgestream.runner.group import WorkerGroup
from edgestream.runner.lockstep import Lockstep, LockstepEngine
from edgestream.runner.plan import PlanError, RunPlan
from edgestream.runner.rundir import write_run
from edgestream.sync.requests import Log

NAME = "lockstep"


class LockstepRun:
    """One lockstep run of `plan`: `run()` fills `events`; `extra_summary` gives its time and stop reason."""

    def __init__(self, plan: Any, events: EventLog) -> None:
        self.plan = plan
        self.engine = LockstepEngine.from_plan(plan)
        self.lockstep = Lockstep(plan.world, self.engine.perform, self.engine.now)
        names = [n for n, p in self.engine.models[0].named_parameters() if p.requires_grad]
        self.group = WorkerGroup(plan, self.lockstep, events, param_names=names)
        self.engine.meters = self.group.meters  # the performer notes batch figures where the driver reads them
        ds, task = plan.dataset, plan.task
        y = torch.from_numpy(ds.y_test)
        self.x_test, self.y_test = ds.normalize(torch.from_numpy(ds.x_test)), (y.long() if task.labels else y.float())
        self.evaluation = Evaluation(self._score, events, self.group.stop, plan.eval_every_s,
                                     extra=self.group.stream_fields)
        self.next_eval = 0.0

    def _model(self) -> torch.nn.Module:
        models = self.engine.models
        if self.plan.algorithm.synchronous or len(models) == 1:
            return models[0]
        avg = copy.deepcopy(models[0])
        with torch.no_grad():
            for name, t in avg.state_dict().items():
                if t.is_floating_point():
                    t.copy_(torch.stack([m.state_dict()[name] for m in models]).mean(0))
        return avg

    def _score(self) -> dict[str, float]:
        return evaluate(self._model(), self.x_test, self.y_test, task=self.plan.task)

    def _evaluate(self) -> None:
        now = self.engine.now(0)
        self.evaluation.run(now, self.group.min_step())
        self.next_eval = now + self.evaluation.every_s

    def _on_request(self, rank: int, req: Any) -> None:
        if rank == 0 and isinstance(req, Log) and self.engine.now(0) >= self.next_eval:
            self._evaluate()  # at a Log the step is complete: the model is consistent

    def run(self) -> None:
        self._evaluate()
        self.lockstep.schedule(self.group.drivers(on_request=self._on_request))
        self.evaluation.final(self.time_s, self.group.min_step())

    @property
    def time_s(self) -> float:
        """The run's time: the furthest worker clock."""
        return max(self.engine.clocks, default=0.0)

    def extra_summary(self, wall_s: float) -> dict[str, Any]:
        return {"time_s": self.time_s, "stop_reason": self.group.stop.reason or "finished"}


def run_lockstep(cfg: Any, *, out: str | Path | None = None, run_id: str | None = None, progress: bool = True,
                 base_dir: str | Path | None = None) -> tuple[Path, dict]:
    """The "lockstep" engine's run function (edgestream.runner.engines): run `cfg` in this process and write
    its run directory; returns (path, summary). progress: unused (no display)."""
    plan = RunPlan.resolve(cfg, base_dir=base_dir)
    check_runs(NAME, plan.algorithm)  # before the run directory is written
    if plan.drift_scenario is not None:
        raise PlanError(["devices.drift: the lockstep engine streams its arrays without the devices' stream model "
                         "(no sample sequence numbers); run drift scenarios on the sim or local engine"])
    from edgestream.runner.responses import check as responses_problems

    problems = responses_problems(plan, NAME)  # a drift response this engine cannot perform (checkpoint)
    if problems:
        raise PlanError(problems)
    return write_run(plan, NAME, lambda events: LockstepRun(plan, events), out=out, run_id=run_id, clock="virtual")


register_engine(NAME, run_lockstep, host="lockstep", performs=Lockstep.performs | LockstepEngine.performs)
