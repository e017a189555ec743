"""Fit the supported rate distributions to a measured trace (`edgestream rates --fit TRACE.csv`).

A trace (trace.py's CSV: ``time,device,rate``, one row per rate change) is reduced per device to

* its base rate: the time-weighted mean rate over the trace's span (what `devices.rates` draws once
  per device), and
* its variation: the steps of log(rate) between consecutive rows, whose standard deviation per
  median row interval is a `random_walk` variation's ``sigma`` at ``step_s`` = that interval.

The base rates are fitted by maximum likelihood with every distribution `devices.rates` supports
(constant, uniform, normal, lognormal, exponential; lognormal in the config's parametrisation: the
mean of the rate and the std of log(rate)), ranked by AIC (2 k - 2 log L), and the best one is
printed as a config block. With few devices the ranking is weak: every candidate's AIC is shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgestream.streams.trace import read_trace

#: a relative spread below this is a constant rate
CONSTANT_CV = 1e-9


@dataclass(frozen=True)
class Fit:
    """One distribution fitted to the base rates: its config fields, log-likelihood and AIC."""

    distribution: str
    params: dict[str, float]
    loglik: float
    aic: float

    def spec(self) -> dict[str, Any]:
        """The `devices.rates` mapping of this fit."""
        return {"distribution": self.distribution, **{k: _round(v) for k, v in self.params.items()}}


@dataclass(frozen=True)
class TraceSummary:
    """A trace reduced per device (module doc)."""

    path: str
    base_rates: np.ndarray        # time-weighted mean rate per device, in device order
    devices: list[int]
    span_s: float                 # the trace's time span used for the means
    step_s: float | None          # median interval between a device's rows (None: one row each)
    log_step_std: float | None    # std of log-rate steps per step_s (None: no steps)


def _round(v: float) -> float:
    return float(f"{v:.4g}")


def summarize_trace(path: str | Path) -> TraceSummary:
    """Per-device base rates and the log-rate random-walk of a trace file (ValueError names problems)."""
    rows = read_trace(path)
    if not rows:
        raise ValueError(f"--fit: {path}: the trace has no rows")
    end = max(t for pts in rows.values() for t, _ in pts)
    devices = sorted(rows)
    means, steps, intervals = [], [], []
    for d in devices:
        pts = rows[d]
        times = [t for t, _ in pts]
        rates = np.array([r for _, r in pts], dtype=float)
        if np.any(rates <= 0):
            raise ValueError(f"--fit: {path}: device {d} has a rate <= 0 (rates are samples/s, > 0)")
        # each row holds until the next; the first also covers [0, t0), the last until the trace's end
        edges = [0.0] + times[1:] + [max(end, times[-1])]
        widths = np.diff(edges)
        means.append(float((rates * widths).sum() / widths.sum()) if widths.sum() > 0 else float(rates.mean()))
        if len(pts) > 1:
            steps.extend(np.diff(np.log(rates)).tolist())
            intervals.extend(np.diff(times).tolist())
    step_s = float(np.median(intervals)) if intervals else None
    log_std = float(np.std(steps, ddof=1)) if len(steps) > 1 else None
    return TraceSummary(str(path), np.asarray(means), devices, float(end), step_s, log_std)


def fit_distributions(x: np.ndarray) -> list[Fit]:
    """Every supported distribution fitted to the samples `x` (> 0) by maximum likelihood, best AIC first."""
    x = np.asarray(x, dtype=float)
    if x.size == 0 or np.any(~np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("rates to fit must be finite and > 0")
    n, mean = x.size, float(x.mean())
    if x.size == 1 or float(x.std()) <= CONSTANT_CV * mean:
        return [Fit("constant", {"rate": mean}, math.inf, -math.inf)]
    fits: list[Fit] = []

    def add(name: str, params: dict[str, float], loglik: float, k: int) -> None:
        fits.append(Fit(name, params, float(loglik), float(2 * k - 2 * loglik)))

    lo, hi = float(x.min()), float(x.max())
    add("uniform", {"low": lo, "high": hi}, -n * math.log(hi - lo), 2)
    std = float(x.std())  # the MLE (ddof 0)
    add("normal", {"mean": mean, "std": std},
        float(np.sum(-0.5 * ((x - mean) / std) ** 2 - math.log(std * math.sqrt(2 * math.pi)))), 2)
    logs = np.log(x)
    mu, s = float(logs.mean()), float(logs.std())
    if s > 0:
        loglik = float(np.sum(-logs - math.log(s * math.sqrt(2 * math.pi)) - 0.5 * ((logs - mu) / s) ** 2))
        add("lognormal", {"mean": math.exp(mu + s * s / 2), "sigma": s}, loglik, 2)
    add("exponential", {"mean": mean}, float(-n * math.log(mean) - x.sum() / mean), 1)
    return sorted(fits, key=lambda f: f.aic)


def variation_spec(summary: TraceSummary) -> dict[str, Any]:
    """The `devices.variation` mapping a trace suggests: a random walk of log(rate), or none."""
    if summary.step_s is None or summary.log_step_std is None or summary.log_step_std < 1e-6:
        return {"kind": "none"}
    return {"kind": "random_walk", "sigma": _round(summary.log_step_std), "step_s": _round(summary.step_s)}


def fit_report(path: str | Path) -> tuple[str, dict[str, Any]]:
    """The printed report of `rates --fit` and the suggested `devices` block (a dict)."""
    import yaml

    summary = summarize_trace(path)
    fits = fit_distributions(summary.base_rates)
    best = fits[0]
    block = {"devices": {"count": len(summary.devices), "rates": best.spec(), "variation": variation_spec(summary)}}
    lines = [f"trace {summary.path}: {len(summary.devices)} device(s) over {summary.span_s:g} s; base rate = each "
             f"device's time-weighted mean: min {summary.base_rates.min():.4g}, mean {summary.base_rates.mean():.4g}, "
             f"max {summary.base_rates.max():.4g} samples/s"]
    if len(fits) > 1:
        lines.append("fits (maximum likelihood; lower AIC is better):")
        for f in fits:
            params = ", ".join(f"{k} {_round(v):g}" for k, v in f.params.items())
            lines.append(f"  {f.distribution:<12} AIC {f.aic:10.1f}   {params}")
    if len(summary.devices) < 20:
        lines.append(f"note: {len(summary.devices)} devices are few for telling distributions apart; "
                     "compare the AICs above")
    if summary.log_step_std is not None:
        lines.append(f"variation: log(rate) steps std {summary.log_step_std:.4g} per {summary.step_s:g} s "
                     "(a random walk; or use the trace itself: devices.rates {distribution: trace, path: ...})")
    lines.append("config block:")
    lines.append(yaml.safe_dump(block, sort_keys=False, default_flow_style=None).rstrip())
    return "\n".join(lines), block
