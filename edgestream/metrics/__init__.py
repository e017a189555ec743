"""Metrics: the event log, run summaries, plots and comparison tables."""

from edgestream.metrics.compare import markdown_table
from edgestream.metrics.events import EventLog, read_events
from edgestream.metrics.plots import accuracy_plot, buffer_plot

__all__ = ["EventLog", "accuracy_plot", "buffer_plot", "markdown_table", "read_events"]
