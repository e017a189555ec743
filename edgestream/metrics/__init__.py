"""Metrics: the event log, run summaries, plots and comparison tables (matplotlib loads with the plots)."""

from edgestream.lazy import lazy_exports

#: public name -> the module that defines it (loaded on first use)
_EXPORTS = {
    "markdown_table": "edgestream.metrics.table",
    "EventLog": "edgestream.metrics.events",
    "read_events": "edgestream.metrics.events",
    "accuracy_plot": "edgestream.metrics.plots",
    "buffer_plot": "edgestream.metrics.plots",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
