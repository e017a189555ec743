"""Per-device stream rates S_i(t): a base rate per device times an optional variation over time.

`build_rate_model(rates, variation, num_devices, seed, min_rate)` takes the config's
``devices.rates`` and ``devices.variation`` sections as plain dicts:

rates (base_i drawn once per device)
    ``{"preset": "S1"}``                     paper 004 Table I (see presets.py for the numbers)
    ``{"distribution": "constant", "rate": r}``
    ``{"distribution": "uniform", "low": l, "high": h}``     low is clipped up to min_rate
    ``{"distribution": "normal", "mean": m, "std": s}``
    ``{"distribution": "lognormal", "mean": m, "sigma": s}`` m is the MEAN OF THE RATE and s the
        std of log(rate): log(rate) ~ N(ln m - s^2/2, s^2), so E[rate] = m
    ``{"distribution": "exponential", "mean": m}``
    ``{"distribution": "trace", "path": "rates.csv"}``       see trace.py; needs variation none
    A ``min_rate`` key is also accepted here (the config section holds it) and overrides the argument.

variation (factor v_i(t) on base_i)
    ``{"kind": "none"}``
    ``{"kind": "sinusoid", "period_s": 60, "amplitude": 0.5}``  v = 1 + A sin(2 pi t / P + phase_i)
    ``{"kind": "random_walk", "sigma": 0.1, "step_s": 1.0}``    log v does a Gaussian random walk,
        one step of std sigma per step_s, piecewise constant; v = 1 on the first interval
    ``{"kind": "bursts", "every_s": 30, "duration_s": 5, "factor": 4.0}``  v = factor for
        duration_s out of every every_s seconds, starting at a per-device offset in [0, every_s)
    Fields left out take the values shown above.

The floor min_rate (default 1 sample/s) keeps every rate positive, so the integral C_i(t) is
strictly increasing and `due_time` is well defined:
- base rates are draws truncated below at min_rate: normal, lognormal and exponential draws under
  min_rate are redrawn (up to 100 times, then set to min_rate); uniform draws use
  U(max(low, min_rate), high); a constant rate below min_rate is an error;
- sinusoid: the amplitude is lowered per device to min(A, 1 - min_rate / base_i), so the minimum
  b_i (1 - A_i) is >= min_rate while the period mean stays base_i and the integral stays exact;
- random walk, bursts and trace: every piece's rate is max(min_rate, piece rate).

Randomness comes from generators seeded by (seed, device, purpose), so a device's base rate,
phase, offset and walk do not depend on how many devices there are or on the order of queries.
Time t is seconds since the run start; before t = 0 nothing has streamed (cumulative is 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgestream.streams._spec import check_keys, choice, number
from edgestream.streams.presets import preset
from edgestream.streams.rate_profiles import (
    BurstProfile,
    ConstantProfile,
    Profile,
    RandomWalkProfile,
    SinusoidProfile,
)
from edgestream.streams.trace import trace_profiles

DISTRIBUTION_FIELDS: dict[str, tuple[str, ...]] = {
    "constant": ("rate",), "uniform": ("low", "high"), "normal": ("mean", "std"),
    "lognormal": ("mean", "sigma"), "exponential": ("mean",), "trace": ("path",),
}
VARIATION_DEFAULTS: dict[str, dict[str, float]] = {
    "none": {},
    "sinusoid": {"period_s": 60.0, "amplitude": 0.5},
    "random_walk": {"sigma": 0.1, "step_s": 1.0},
    "bursts": {"every_s": 30.0, "duration_s": 5.0, "factor": 4.0},
}
_TAG_BASE, _TAG_VARIATION = 7_100_001, 7_100_002
_MAX_REDRAWS = 100


def _rng(seed: int, device: int, tag: int) -> np.random.Generator:
    return np.random.default_rng([seed % 2**64, device, tag])


class RateModel:
    """S_i(t) for devices 0..M-1: rate, integral, and the integral's inverse, all pure in t."""

    def __init__(self, profiles: Sequence[Profile], base_rates: Sequence[float], *, rates: Mapping[str, Any],
                 variation: Mapping[str, Any], min_rate: float,
                 resolved: Mapping[str, Any] | None = None) -> None:
        if len(profiles) != len(base_rates) or not profiles:
            raise ValueError("need one profile and one base rate per device, at least one device")
        self._profiles = list(profiles)
        self._base = np.asarray(base_rates, dtype=float)
        self.spec, self.variation, self.min_rate = dict(rates), dict(variation), float(min_rate)
        self.resolved = dict(resolved if resolved is not None else rates)
        self.num_devices = len(self._profiles)

    def _profile(self, device: int) -> Profile:
        if not 0 <= device < self.num_devices:
            raise IndexError(f"device {device} is out of range; this model has devices "
                             f"0..{self.num_devices - 1}")
        return self._profiles[device]

    def base_rate(self, device: int) -> float:
        """base_i: the device's drawn rate (for a trace, its rate at t = 0)."""
        self._profile(device)
        return float(self._base[device])

    @property
    def base_rates(self) -> np.ndarray:
        return self._base.copy()

    def rate(self, device: int, t: float) -> float:
        """S_i(t) in samples/s (for t < 0, the rate at t = 0)."""
        return self._profile(device).rate(max(0.0, t))

    def rates(self, t: float) -> np.ndarray:
        """S_i(t) of every device."""
        t = max(0.0, t)
        return np.array([p.rate(t) for p in self._profiles])

    def cumulative(self, device: int, t: float) -> float:
        """C_i(t) = integral of S_i over [0, t]: samples streamed by t (0 for t <= 0)."""
        p = self._profile(device)
        return p.cumulative(t) if t > 0 else 0.0

    def due_time(self, device: int, k: float) -> float:
        """The smallest t >= 0 with C_i(t) >= k: when sample k is due (0 for k <= 0)."""
        p = self._profile(device)
        return p.due_time(k) if k > 0 else 0.0

    def due_times(self, device: int, ks: Sequence[float] | np.ndarray) -> np.ndarray:
        """`due_time` over an array of sample counts, vectorised."""
        ks = np.asarray(ks, dtype=float)
        out = self._profile(device).due_times(np.maximum(ks, 0.0))
        return np.where(ks > 0, out, 0.0)

    def describe(self) -> dict[str, Any]:
        """A printable summary: the specs, per-device base rates and their mean, std, min and max."""
        b = self._base
        return {
            "rates": self.spec, "distribution": self.resolved, "variation": self.variation,
            "min_rate": self.min_rate,
            "num_devices": self.num_devices, "base_rates": [round(float(x), 3) for x in b],
            "mean": float(b.mean()), "std": float(b.std()), "min": float(b.min()), "max": float(b.max()),
        }

    def __repr__(self) -> str:
        d = self.describe()
        return (f"RateModel({d['num_devices']} devices, rates={d['rates']}, variation={d['variation']}, "
                f"mean={d['mean']:.1f}, std={d['std']:.1f})")


# ---------------------------------------------------------------- building


def resolve_rates_spec(rates: Mapping[str, Any], min_rate: float) -> dict[str, Any]:
    """Validate a rates dict and return it as a distribution spec (presets expanded)."""
    if not isinstance(rates, Mapping):
        raise ValueError(f"rates: must be a mapping, got {type(rates).__name__}")
    rates = {k: v for k, v in rates.items() if k != "min_rate"}
    if ("preset" in rates) == ("distribution" in rates):
        raise ValueError("rates: give exactly one of 'preset' or 'distribution'")
    if "preset" in rates:
        check_keys("rates", rates, ("preset", "min_rate"), "a preset")
        return preset(rates["preset"]).spec(min_rate)
    dist = choice("rates", "distribution", rates["distribution"], DISTRIBUTION_FIELDS)
    allowed = ("distribution", *DISTRIBUTION_FIELDS[dist], "min_rate")
    check_keys("rates", rates, allowed, f"distribution {dist!r}")
    return dict(rates)


def draw_base_rate(spec: Mapping[str, Any], seed: int, device: int, min_rate: float) -> float:
    """base_i for one device from a validated distribution spec, with the RNG of (seed, device)."""
    dist = spec["distribution"]
    rng = _rng(seed, device, _TAG_BASE)
    if dist == "constant":
        return number("rates", spec, "rate", gt=0)
    if dist == "uniform":
        low, high = number("rates", spec, "low", ge=0), number("rates", spec, "high", gt=0)
        if not low < high:
            raise ValueError(f"rates.low: {low} is not allowed; must be < high ({high})")
        if not high > min_rate:
            raise ValueError(f"rates.high: {high} is not allowed; must be > min_rate ({min_rate})")
        return float(rng.uniform(max(low, min_rate), high))
    if dist == "normal":
        mean, std = number("rates", spec, "mean", gt=0), number("rates", spec, "std", ge=0)
        sampler, args = rng.normal, (mean, std)
    elif dist == "lognormal":
        mean, sigma = number("rates", spec, "mean", gt=0), number("rates", spec, "sigma", ge=0)
        mu = math.log(mean) - sigma**2 / 2.0
        sampler, args = rng.lognormal, (mu, sigma)
    elif dist == "exponential":
        mean = number("rates", spec, "mean", gt=0)
        sampler, args = rng.exponential, (mean,)
    else:
        raise ValueError(f"rates.distribution: {dist!r} has no per-device draw")
    for _ in range(_MAX_REDRAWS):
        x = float(sampler(*args))
        if x >= min_rate:
            return x
    return float(min_rate)


def resolve_variation_spec(variation: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate a variation dict; return it with defaults filled in."""
    if variation is None:
        return {"kind": "none"}
    if not isinstance(variation, Mapping):
        raise ValueError(f"variation: must be a mapping, got {type(variation).__name__}")
    kind = choice("variation", "kind", variation.get("kind", "none"), VARIATION_DEFAULTS)
    defaults = VARIATION_DEFAULTS[kind]
    check_keys("variation", variation, ("kind", *defaults), f"kind {kind!r}")
    out: dict[str, Any] = {"kind": kind}
    if kind == "sinusoid":
        out["period_s"] = number("variation", variation, "period_s", defaults["period_s"], gt=0)
        out["amplitude"] = number("variation", variation, "amplitude", defaults["amplitude"], ge=0, lt=1)
    elif kind == "random_walk":
        out["sigma"] = number("variation", variation, "sigma", defaults["sigma"], ge=0)
        out["step_s"] = number("variation", variation, "step_s", defaults["step_s"], gt=0)
    elif kind == "bursts":
        out["every_s"] = number("variation", variation, "every_s", defaults["every_s"], gt=0)
        out["duration_s"] = number("variation", variation, "duration_s", defaults["duration_s"], gt=0,
                                   lt=out["every_s"])
        out["factor"] = number("variation", variation, "factor", defaults["factor"], gt=0)
    return out


def _profile(base: float, var: Mapping[str, Any], seed: int, device: int, min_rate: float) -> Profile:
    kind = var["kind"]
    if kind == "none":
        return ConstantProfile(base)
    rng = _rng(seed, device, _TAG_VARIATION)
    if kind == "sinusoid":
        amplitude = min(var["amplitude"], max(0.0, 1.0 - min_rate / base))
        return SinusoidProfile(base, amplitude, var["period_s"], float(rng.uniform(0.0, 2.0 * math.pi)))
    if kind == "random_walk":
        return RandomWalkProfile(base, var["sigma"], var["step_s"], min_rate, seed % 2**64, device)
    low, high = max(min_rate, base), max(min_rate, base * var["factor"])
    if low == high:
        return ConstantProfile(low)
    return BurstProfile(low, high, var["every_s"], var["duration_s"], float(rng.uniform(0.0, var["every_s"])))


def build_rate_model(rates: Mapping[str, Any], variation: Mapping[str, Any] | None, num_devices: int,
                     seed: int, min_rate: float = 1.0, *, base_dir: str | Path | None = None) -> RateModel:
    """The RateModel of a config's devices.rates / devices.variation (see the module docstring).

    `base_dir` resolves a relative trace path (e.g. the config file's folder); default: the cwd.
    """
    if isinstance(rates, Mapping) and rates.get("min_rate") is not None:
        min_rate = rates["min_rate"]
    min_rate = number("rates", {"min_rate": min_rate}, "min_rate", gt=0)
    num_devices = number("devices", {"count": num_devices}, "count", ge=1, integer=True)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed: {seed!r} is not allowed; must be an integer")
    spec = resolve_rates_spec(rates, min_rate)
    var = resolve_variation_spec(variation)
    seed = int(seed)
    if spec["distribution"] == "trace":
        if var["kind"] != "none":
            raise ValueError(f"variation.kind: {var['kind']!r} is not allowed with a rate trace (the trace "
                             "already gives the rate over time); must be none")
        path = Path(spec["path"])
        if base_dir is not None and not path.is_absolute():
            path = Path(base_dir) / path
        profiles = trace_profiles(path, num_devices, min_rate)
        base = [p.rate(0.0) for p in profiles]
        return RateModel(profiles, base, rates=rates, variation=var, min_rate=min_rate, resolved=spec)
    if spec["distribution"] == "constant" and spec.get("rate") is not None and spec["rate"] < min_rate:
        raise ValueError(f"rates.rate: {spec['rate']} is not allowed; must be >= min_rate ({min_rate})")
    base = [draw_base_rate(spec, seed, d, min_rate) for d in range(num_devices)]
    profiles = [_profile(b, var, seed, d, min_rate) for d, b in enumerate(base)]
    return RateModel(profiles, base, rates=rates, variation=var, min_rate=min_rate, resolved=spec)
