"""edgestream.runner — the engine-neutral run core: the one request driver, the stop rule, evaluation,
the workers of an in-process run, events, summary, run directory and comparison; and the in-process
lockstep engine for tests (`edgestream.runner.lockstep`). Engines (sim/, trainer/, launch/) perform
requests and nothing else; they register by name (`register_engine`), so this package imports none
of them."""

from edgestream.runner.driver import LINE_ORDER, Performer, StepMeter, drive, run_blocking, step_line
from edgestream.runner.engines import (
    EngineError,
    EngineUnavailable,
    engine_names,
    get_engine,
    register_engine,
)
from edgestream.runner.evaluate import Evaluation, evaluate
from edgestream.runner.group import WorkerGroup
from edgestream.runner.run import buffer_series, run_config, write_run
from edgestream.runner.stop import StopRule

__all__ = ["LINE_ORDER", "EngineError", "EngineUnavailable", "Evaluation", "Performer", "StepMeter", "StopRule",
           "WorkerGroup", "buffer_series", "drive", "engine_names", "evaluate", "get_engine", "register_engine",
           "run_blocking", "run_config", "step_line", "write_run"]
