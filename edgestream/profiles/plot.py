"""Draw compute profiles: step time t(b) and time per sample t(b)/b against the batch size."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def plot_profiles(profiles: Sequence[Any], path: str | Path) -> Path:
    """One PNG with two panels (log-log): seconds per step and milliseconds per sample, a line per
    (profile, model) entry. Sublinear scaling shows as a per-sample time that falls with the batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.6))
    for prof in profiles:
        for model, curve in prof.models.items():
            label = f"{prof.name}: {model}"
            ax1.plot(curve.batches, curve.seconds, marker="o", label=label)
            ax2.plot(curve.batches, [1e3 * x for x in curve.per_sample()], marker="o", label=label)
    for ax, what in ((ax1, "seconds per step"), (ax2, "ms per sample")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax1.get_legend_handles_labels()  # below the plots: inside, it hides curves
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
