"""Metrics: the event log, run summaries and plots (matplotlib loads with the plots); comparison tables are
edgestream.runner.report's."""

from edgestream.lazy import lazy_exports

#: public name -> the module that defines it (loaded on first use)
_EXPORTS = {
    "EventLog": "edgestream.metrics.events",
    "read_events": "edgestream.metrics.events",
    "accuracy_plot": "edgestream.metrics.plots",
    "buffer_plot": "edgestream.metrics.plots",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
