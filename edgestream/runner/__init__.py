"""edgestream.runner — the engine-neutral run core: the one request driver, the stop rule, evaluation,
events, summary, run directory and comparison. Engines (sim/, trainer/, the lockstep engine) perform
requests and nothing else; they register by name, so this package imports none of them."""

from edgestream.runner.driver import LINE_ORDER, Performer, StepMeter, drive, run_blocking, step_line
from edgestream.runner.evaluate import evaluate
from edgestream.runner.stop import StopRule

__all__ = ["LINE_ORDER", "Performer", "StepMeter", "StopRule", "drive", "evaluate", "run_blocking", "step_line"]
