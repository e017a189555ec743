"""A rich progress bar for in-process runs: engine time (virtual in the simulator), the task's primary
metric (accuracy; rmse for regression), steps; silent when not on a terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class RunProgress:
    """Shows engine time out of `total_s` (or a spinner-free counter without it), the last test value
    of `metric` and the steps done. Inactive (every call a no-op) unless `enabled` and stderr is a
    terminal. `clock` names the time in the bar ("virtual" in the simulator)."""

    def __init__(self, label: str, total_s: float | None, enabled: bool = True,
                 console: Console | None = None, clock: str = "virtual", metric: str = "accuracy") -> None:
        console = console or Console(stderr=True)
        self.active = bool(enabled and console.is_terminal)
        self._progress: Progress | None = None
        self._task: Any = None
        if self.active:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(),
                TextColumn(clock + " {task.completed:,.1f}/{task.fields[total_s]} s"),
                TextColumn(("acc" if metric == "accuracy" else metric) + " {task.fields[acc]}"),
                TextColumn("steps {task.fields[steps]:,}"),
                TimeElapsedColumn(), console=console, transient=False)
            self._task = self._progress.add_task(label, total=total_s, total_s=(f"{total_s:,.0f}" if total_s
                                                                                else "?"), acc="-", steps=0)
            self._progress.start()

    def update(self, time_s: float, steps: int, accuracy: float | None = None) -> None:
        """accuracy: the latest value of the bar's metric (None: unchanged)."""
        if self._progress is None:
            return
        fields: dict[str, Any] = {"steps": steps}
        if accuracy is not None:
            fields["acc"] = f"{accuracy:.3f}"
        self._progress.update(self._task, completed=time_s, **fields)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
