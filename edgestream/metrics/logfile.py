"""A process's log file: the `edgestream` logger's lines (every module's) at INFO and above, one format for every
process that keeps one (a trainer's ranks/<rank>.log, the parameter server's ranks/ps.log)."""

from __future__ import annotations

import logging
from pathlib import Path

#: one line per record: time, logger, level, message
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def attach_log_file(path: Path | str, handler_class: type[logging.FileHandler] = logging.FileHandler
                    ) -> logging.FileHandler:
    """Log the `edgestream` logger's INFO and above to `path` (appended) through a new `handler_class`; returns
    the handler (the caller removes it when the process's work ends)."""
    handler = handler_class(path)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger("edgestream")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler
