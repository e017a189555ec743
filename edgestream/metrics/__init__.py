"""Metrics: the event log, run summaries, plots and comparison tables."""

from edgestream.metrics.compare import markdown_table
from edgestream.metrics.events import EventLog, read_events
from edgestream.metrics.plots import accuracy_plot, buffer_plot
from edgestream.metrics.rundir import RunDir

__all__ = ["EventLog", "RunDir", "accuracy_plot", "buffer_plot", "markdown_table", "read_events"]
