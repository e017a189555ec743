"""edgestream.launch — the local orchestrator: broker, topics, the producer and one trainer per device
as child processes, a live view, a clean stop, and the run directory (`edgestream run --engine local`).

Importing it registers the engine "local" with the runner's engine registry (runner/engines.py), so
`edgestream compare --engine local` and `runner.run.run_config(cfg, "local")` reach `run_local`."""

from edgestream.launch.orchestrator import LaunchError, LocalRun, run_local
from edgestream.runner.engines import register_engine
from edgestream.sync.requests import REQUESTS

# what the trainer's performer performs (TrainerPerformer.performs, derived from its do_* methods: every kind),
# declared here because the performer imports torch (tests/unit/test_layers.py holds the two equal)
register_engine("local", run_local, host="processes", performs=REQUESTS)

__all__ = ["LaunchError", "LocalRun", "run_local"]
