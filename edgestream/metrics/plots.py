"""PNG plots of a run (accuracy vs time, buffer samples vs step on a log scale) and comparisons."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def accuracy_plot(series: Mapping[str, list[tuple[float, float]]], path: str | Path, title: str = "",
                  xlabel: str = "virtual time (s)") -> Path:
    """One line per label of (time, accuracy) points."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for label, pts in series.items():
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, linewidth=1.6)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def buffer_plot(series: Mapping[str, list[tuple[int, float]]], path: str | Path, title: str = "") -> Path:
    """Buffer samples vs step, log scale (paper 004 Fig. 7)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for label, pts in series.items():
        if pts:
            ax.plot([p[0] for p in pts], [max(p[1], 1) for p in pts], label=label, linewidth=1.2)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("buffer (samples, max over devices)")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
