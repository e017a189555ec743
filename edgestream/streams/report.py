"""What a config's stream rates are, and what they imply, before anything runs (`edgestream rates`).

From the rate model the producers and the simulator use (`RunPlan.rate_model`: the same draws, the
same seed): each device's base rate S_i, its rate over time S_i(t) with the configured variation
(mean, min and max over [0, duration] on a grid), the heterogeneity (max/min and the coefficient of
variation of the mean rates), and the consequences for training:

* samples per device per minute;
* ScaDLES' batch b_i = clip(round(S_i), min, max) (the config's rate-batch bounds, else 8..1024);
* DDL with a fixed batch b (the config's, else 64): stream-bound, a synchronous step cannot end before
  the slowest device has streamed b samples, so it waits b / min_i S_i per step (at the mean rates)
  while the fastest device's surplus piles up in its buffer (persist) or is dropped (truncate).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgestream.streams.policies import FixedBatch, RateBatch

GRID_POINTS = 600


def rate_report(model: Any, duration_s: float, batch: Any = None) -> dict[str, Any]:
    """The figures of the module doc for `model` (a RateModel) over [0, duration_s]; `batch` is the
    config's batch policy (FixedBatch / RateBatch / AvailableBatch or None)."""
    if not duration_s > 0:
        raise ValueError(f"--duration: {duration_s} is not allowed; must be > 0 seconds")
    n = model.num_devices
    grid = np.linspace(0.0, duration_s, GRID_POINTS)
    over_time = np.array([[model.rate(d, float(t)) for t in grid] for d in range(n)])
    mean = np.array([model.cumulative(d, duration_s) / duration_s for d in range(n)])
    base = np.asarray(model.base_rates, dtype=float)
    rate_batch = batch if isinstance(batch, RateBatch) else RateBatch()
    fixed = batch if isinstance(batch, FixedBatch) else FixedBatch(64)
    b = fixed.size
    slowest, fastest = int(np.argmin(mean)), int(np.argmax(mean))
    step_s = b / mean[slowest]
    steps = int(model.cumulative(slowest, duration_s) // b)
    return {
        "duration_s": duration_s, "devices": n,
        "base": base.tolist(), "mean": mean.tolist(),
        "min_over_time": over_time.min(axis=1).tolist(), "max_over_time": over_time.max(axis=1).tolist(),
        "grid_s": grid.tolist(), "rate_over_time": over_time.tolist(),
        "heterogeneity": {"max_over_min": float(mean.max() / mean.min()), "cv": float(mean.std() / mean.mean()),
                          "base_max_over_min": float(base.max() / base.min()),
                          "base_cv": float(base.std() / base.mean()),
                          "over_time_max_over_min": float(over_time.max() / over_time.min())},
        "samples_per_minute": (mean * 60.0).tolist(),
        "scadles": {"min": rate_batch.min, "max": rate_batch.max,
                    "batch": [rate_batch.target(float(r), 0) for r in mean],
                    "batch_range_over_time": [[rate_batch.target(float(row.min()), 0),
                                               rate_batch.target(float(row.max()), 0)] for row in over_time]},
        "ddl": {"batch": b, "slowest_device": slowest, "fastest_device": fastest,
                "wait_per_step_s": float(step_s), "steps_in_duration": steps,
                "fastest_surplus_per_step": float(b * (mean[fastest] / mean[slowest] - 1.0)),
                "idle_share_of_fastest": float(1.0 - mean[slowest] / mean[fastest])},
    }


def format_report(rep: dict[str, Any], describe: dict[str, Any]) -> str:
    """The printed table and lines of `edgestream rates`."""
    n, d = rep["devices"], rep["duration_s"]
    lines = [f"rates: {describe['rates']}  variation: {describe['variation']}  min_rate {describe['min_rate']:g}",
             f"{n} device(s), over the first {d:g} s:",
             f"{'device':>6} {'S_i base':>9} {'mean':>9} {'min(t)':>9} {'max(t)':>9} {'samples/min':>12} "
             f"{'ScaDLES b':>10}"]
    sc = rep["scadles"]
    for i in range(n):
        lo, hi = sc["batch_range_over_time"][i]
        brange = f"{sc['batch'][i]}" + (f" ({lo}-{hi})" if lo != hi else "")
        lines.append(f"{i:>6} {rep['base'][i]:>9.2f} {rep['mean'][i]:>9.2f} {rep['min_over_time'][i]:>9.2f} "
                     f"{rep['max_over_time'][i]:>9.2f} {rep['samples_per_minute'][i]:>12,.0f} {brange:>10}")
    h = rep["heterogeneity"]
    lines.append(f"heterogeneity: max/min {h['max_over_min']:.2f}, CV {h['cv']:.2f} of the mean rates "
                 f"(base rates: {h['base_max_over_min']:.2f}, {h['base_cv']:.2f}); over time the rates span "
                 f"{h['over_time_max_over_min']:.2f}x")
    lines.append(f"ScaDLES (rate batch {sc['min']}..{sc['max']}): b_i = clip(round(S_i)) = {sc['batch']}: each step "
                 "trains on about one second of every stream")
    dd = rep["ddl"]
    lines.append(f"DDL (fixed b {dd['batch']}): stream-bound, each synchronous step waits "
                 f"{dd['wait_per_step_s']:.2f} s for device {dd['slowest_device']} (the slowest) -> at most "
                 f"{dd['steps_in_duration']} steps in {d:g} s; device {dd['fastest_device']} streams "
                 f"{dd['fastest_surplus_per_step']:,.0f} surplus samples a step (buffered with persist, dropped "
                 f"with truncate) and idles {dd['idle_share_of_fastest']:.0%} of the time")
    return "\n".join(lines)


def plot_rates(rep: dict[str, Any], path: str, title: str) -> None:
    """Two panels: the rate over time of every device (at most 24 drawn; else percentile bands), and the
    mean rates sorted, with ScaDLES' batch bounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    grid = np.asarray(rep["grid_s"])
    rates = np.asarray(rep["rate_over_time"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [2, 1]})
    if len(rates) <= 24:
        for i, row in enumerate(rates):
            ax1.plot(grid, row, lw=1, label=f"device {i}" if len(rates) <= 8 else None)
        if len(rates) <= 8:
            ax1.legend(fontsize=7, ncol=2)
    else:
        for lo, hi, alpha in ((0, 100, 0.15), (10, 90, 0.25), (25, 75, 0.4)):
            ax1.fill_between(grid, np.percentile(rates, lo, axis=0), np.percentile(rates, hi, axis=0),
                             alpha=alpha, color="C0", lw=0, label=f"p{lo}-p{hi}")
        ax1.plot(grid, np.median(rates, axis=0), color="C0", lw=1.5, label="median")
        ax1.legend(fontsize=7)
    ax1.set_xlabel("time since the streams began (s)")
    ax1.set_ylabel("rate S_i(t) (samples/s)")
    ax1.set_ylim(bottom=0)
    ax1.grid(alpha=0.3)
    ax1.set_title(title, fontsize=9)
    mean = np.sort(np.asarray(rep["mean"]))
    ax2.bar(np.arange(len(mean)), mean, color="C1")
    sc = rep["scadles"]
    for y, name in ((sc["min"], "ScaDLES min b"), (sc["max"], "ScaDLES max b")):
        if y <= mean.max() * 1.5:
            ax2.axhline(y, ls="--", lw=0.8, color="gray")
            ax2.text(0, y, name, fontsize=7, va="bottom")
    h = rep["heterogeneity"]
    ax2.set_title(f"mean rates, sorted (max/min {h['max_over_min']:.1f}, CV {h['cv']:.2f})", fontsize=9)
    ax2.set_xlabel("devices (sorted)")
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.set_ylabel("samples/s")
    ax2.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
