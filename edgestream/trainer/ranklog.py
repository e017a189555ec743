"""A trainer's own files: its log (ranks/<rank>.log), the event log as the evaluation thread writes it, and the one
line a write the disk refused ends the trainer with."""

from __future__ import annotations

import errno
import logging
import sys
from pathlib import Path
from typing import Any

from edgestream.metrics.logfile import attach_log_file


class RankLogHandler(logging.FileHandler):
    """The rank's log file. A write that fails (a full disk) is remembered in `error` and logging to the
    file stops, instead of logging's "--- Logging error ---" traceback on stderr: the trainer's own writes
    then fail too and end it with one line naming the path (`disk_error`)."""

    error: OSError | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.error is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError) and self.error is None:
            self.error = exc
            return
        super().handleError(record)


class GuardedEvents:
    """The rank's EventLog as the evaluation thread sees it: a write that fails with an OSError (a full
    disk) is remembered in `error`, not raised in the thread (the training thread's next write names it)."""

    def __init__(self, events: Any) -> None:
        self._events, self.error = events, None

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._events, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            try:
                return attr(*args, **kw)
            except OSError as exc:
                self.error = self.error or exc
                return None
        return call


def disk_error(rank: Any, exc: OSError, where: Path | str) -> str:
    """One line for a file the trainer could not write: the path (the error's own, else `where`), why, and
    the device."""
    path = exc.filename if exc.filename is not None else where
    why = exc.strerror or type(exc).__name__
    hint = {errno.ENOSPC: " (the disk is full)", errno.EROFS: " (choose a writable --out)",
            errno.EACCES: " (choose a writable --out)"}.get(exc.errno, "")
    return f"device {rank}: cannot write {path}: {why}{hint}"


def setup_logging(path: Path) -> logging.Handler:
    """The rank's log file (`RankLogHandler`) for the `edgestream` logger (edgestream.metrics.logfile)."""
    return attach_log_file(path, RankLogHandler)
