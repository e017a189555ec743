"""edgestream.runner — the engine-neutral run core: the run plan (the one place a config is
interpreted), the one request driver and the worker session around it, the stop rule, evaluation, the
workers of an in-process run, the run directory and comparison; and the in-process
lockstep engine for tests (`edgestream.runner.lockstep`). Engines (sim/, trainer/, launch/) perform
requests and nothing else; they register by name (`register_engine`), so this package imports none
of them."""

from edgestream.runner.driver import LINE_ORDER, Performer, StepMeter, drive, run_blocking, step_line
from edgestream.runner.engines import (
    EngineError,
    EngineUnavailable,
    check_runs,
    engine_names,
    get_engine,
    register_engine,
)
from edgestream.runner.evaluate import BackgroundEvaluation, Evaluation, evaluate
from edgestream.runner.group import WorkerGroup
from edgestream.runner.plan import PlanError, RunPlan
from edgestream.runner.run import run_config
from edgestream.runner.rundir import RunDir, buffer_series, write_run
from edgestream.runner.session import WorkerSession
from edgestream.runner.stop import StopRule

__all__ = ["LINE_ORDER", "BackgroundEvaluation", "EngineError", "EngineUnavailable", "Evaluation", "Performer",
           "PlanError", "RunDir", "RunPlan", "StepMeter", "StopRule", "WorkerGroup", "WorkerSession", "buffer_series",
           "check_runs", "drive", "engine_names", "evaluate", "get_engine", "register_engine", "run_blocking",
           "run_config", "step_line", "write_run"]
