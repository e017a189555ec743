"""PNG plots of a run (the test metric -- accuracy, or rmse for regression -- vs time, buffer samples vs
step on a log scale) and comparisons."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _line_plot(series: Mapping[str, list[tuple[float, float]]], path: str | Path, *, title: str, xlabel: str,
               ylabel: str, log_y: bool = False, floor: float | None = None,
               marks: Mapping[str, float] | None = None) -> Path:
    """One line per label of (x, y) points, saved as a PNG; marks: {label: x} drawn as dashed vertical lines."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for label, pts in series.items():
        if pts:
            ys = [p[1] if floor is None else max(p[1], floor) for p in pts]
            ax.plot([p[0] for p in pts], ys, label=label, linewidth=1.4)
    for label, x in (marks or {}).items():
        ax.axvline(x, color="0.3", linestyle="--", linewidth=1.0, label=label)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both" if log_y else "major")
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def accuracy_plot(series: Mapping[str, list[tuple[float, float]]], path: str | Path, title: str = "",
                  xlabel: str = "virtual time (s)", ylabel: str = "test accuracy") -> Path:
    """A test metric (accuracy unless `ylabel` names another) against time, one line per label."""
    return _line_plot(series, path, title=title, xlabel=xlabel, ylabel=ylabel)


def prequential_plot(series: Mapping[str, list[tuple[float, float]]], path: str | Path, *, marks: Mapping[str, float],
                     title: str = "", xlabel: str = "virtual time (s)", ylabel: str = "prequential accuracy") -> Path:
    """The all-devices prequential window metric against time, one line per run, the drifts marked (`marks`:
    {"drift (device 3)": time})."""
    return _line_plot(series, path, title=title, xlabel=xlabel, ylabel=ylabel, marks=marks)


def buffer_plot(series: Mapping[str, list[tuple[int, float]]], path: str | Path, title: str = "") -> Path:
    """Buffer samples vs step, log scale (paper 004 Fig. 7)."""
    return _line_plot(series, path, title=title, xlabel="step", ylabel="buffer (samples, max over devices)",
                      log_y=True, floor=1)
