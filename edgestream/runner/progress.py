"""Progress of an in-process run: engine time (virtual in the simulator), the task's primary metric (accuracy;
rmse for regression), steps. On a terminal a rich progress bar; otherwise (output to a file or a pipe) a plain
line (runner.report.progress_line) every `every_s` seconds of wall time, EDGESTREAM_PROGRESS_EVERY_S or
PLAIN_EVERY_S by default, 0: at every update."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from edgestream import settings
from edgestream.runner.report import progress_line

#: seconds of wall time between two plain progress lines when the output is not a terminal (the local engine's
#: status line too: launch.view.View)
PLAIN_EVERY_S = 5.0
PLAIN_EVERY_ENV = settings.PROGRESS_EVERY_S.name


def plain_every_s() -> float:
    """PLAIN_EVERY_S, or EDGESTREAM_PROGRESS_EVERY_S when it is a number >= 0."""
    value = settings.progress_every_s()
    return PLAIN_EVERY_S if value is None else value


class RunProgress:
    """Shows engine time out of `total_s` (or a spinner-free counter without it), the last test value
    of `metric` and the steps done. Inactive (every call a no-op) unless `enabled`; a bar when the console
    (stderr) is a terminal, else plain lines every `every_s` wall seconds (see the module doc). `clock`
    names the time ("virtual" in the simulator)."""

    def __init__(self, label: str, total_s: float | None, enabled: bool = True,
                 console: Console | None = None, clock: str = "virtual", metric: str = "accuracy",
                 every_s: float | None = None) -> None:
        console = console or Console(stderr=True)
        self.active = bool(enabled)
        self._progress: Progress | None = None
        self._task: Any = None
        self._plain = None if not self.active or console.is_terminal else console.file
        self._label, self._total, self._clock, self._metric = label, total_s, clock, metric
        self._every = plain_every_s() if every_s is None else float(every_s)
        self._last_line: float | None = None
        self._value: float | None = None
        self._note = ""
        if self.active and self._plain is None:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(),
                TextColumn(clock + " {task.completed:,.1f}/{task.fields[total_s]} s"),
                TextColumn(("acc" if metric == "accuracy" else metric) + " {task.fields[acc]}"),
                TextColumn("steps {task.fields[steps]:,}"), TextColumn("{task.fields[note]}"),
                TimeElapsedColumn(), console=console, transient=False)
            self._task = self._progress.add_task(label, total=total_s, total_s=(f"{total_s:,.0f}" if total_s
                                                                                else "?"), acc="-", steps=0,
                                                note="")
            self._progress.start()

    def update(self, time_s: float, steps: int, accuracy: float | None = None, note: str | None = None) -> None:
        """accuracy: the latest value of the bar's metric (None: unchanged); note: what follows it (the prequential
        figure and the drifts: runner.report.stream_note; None: unchanged)."""
        if accuracy is not None:
            self._value = accuracy
        if note is not None:
            self._note = note
        if self._plain is not None:
            now = time.monotonic()
            if self._last_line is None or now - self._last_line >= self._every:
                self._last_line = now
                try:
                    self._plain.write(progress_line(self._label, time_s, self._total, steps, self._metric,
                                                    self._value, self._clock, self._note) + "\n")
                    self._plain.flush()
                except (OSError, ValueError):  # a closed pipe: the run goes on without its progress lines
                    self._plain = None
            return
        if self._progress is None:
            return
        fields: dict[str, Any] = {"steps": steps, "note": self._note}
        if accuracy is not None:
            fields["acc"] = f"{accuracy:.3f}"
        self._progress.update(self._task, completed=time_s, **fields)

    def close(self) -> None:
        self._plain = None
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
