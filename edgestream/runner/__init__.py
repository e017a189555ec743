"""edgestream.runner — the engine-neutral run core: the run plan (the one place a config is
interpreted), the one request driver and the worker session around it, the stop rule, evaluation, the
workers of an in-process run, the run directory, its one summary schema (`edgestream.runner.summary`) and
comparison; and the in-process lockstep engine for tests (`edgestream.runner.lockstep`, registered as the
engine "lockstep" by `edgestream.runner.lockstep_run`). Engines (sim/, trainer/, launch/) perform
requests and nothing else; they register by name (`register_engine`), so this package imports none
of them."""

from edgestream.lazy import lazy_exports
from edgestream.runner.evaluate import evaluate  # noqa: F401 - also its module's name: bound here, not lazily

#: public name -> the module that defines it (loaded on first use: the run directory's readers need no torch)
_EXPORTS = {
    "LINE_ORDER": "edgestream.runner.driver",
    "Performer": "edgestream.runner.performer",
    "StepMeter": "edgestream.runner.driver",
    "drive": "edgestream.runner.driver",
    "run_blocking": "edgestream.runner.driver",
    "step_line": "edgestream.runner.driver",
    "EngineError": "edgestream.runner.engines",
    "EngineUnavailable": "edgestream.runner.engines",
    "check_runs": "edgestream.runner.engines",
    "engine_names": "edgestream.runner.engines",
    "get_engine": "edgestream.runner.engines",
    "register_engine": "edgestream.runner.engines",
    "BackgroundEvaluation": "edgestream.runner.evaluate",
    "Evaluation": "edgestream.runner.evaluate",
    "evaluate": "edgestream.runner.evaluate",
    "WorkerGroup": "edgestream.runner.group",
    "PlanError": "edgestream.runner.plan",
    "RunPlan": "edgestream.runner.plan",
    "run_config": "edgestream.runner.run",
    "RunDir": "edgestream.runner.rundir",
    "RunInterrupted": "edgestream.runner.rundir",
    "buffer_series": "edgestream.runner.rundir",
    "write_run": "edgestream.runner.rundir",
    "WorkerSession": "edgestream.runner.session",
    "StopRule": "edgestream.runner.stop",
    "SUMMARY_KEYS": "edgestream.runner.summary",
    "build_summary": "edgestream.runner.summary",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
