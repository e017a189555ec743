"""edgestream.launch — the local orchestrator: broker, topics, the producer and one trainer per device
as child processes, a live view, a clean stop, and the run directory (`edgestream run --engine local`)."""

from edgestream.launch.orchestrator import LaunchError, LocalRun, run_local

__all__ = ["LaunchError", "LocalRun", "run_local"]
