"""The `devices:` section: how many devices, their stream rates S_i (a preset or a distribution) and how those
vary over time, their compute (step times) and their network."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from edgestream.config.base import MAX_RATE, Float, Int, _Model

RATE_PRESETS = ("S1", "S2", "S1'", "S2'")
PRESET_ALIASES = {"S1p": "S1'", "S2p": "S2'", "S1prime": "S1'", "S2prime": "S2'"}
DISTRIBUTIONS = ("constant", "uniform", "normal", "lognormal", "exponential", "trace")
VARIATIONS = ("none", "sinusoid", "random_walk", "bursts")


class RatesConfig(_Model):
    """Per-device stream rates S_i: a preset of paper 004 Table I, or a distribution."""

    preset: str | None = None
    distribution: Literal["constant", "uniform", "normal", "lognormal", "exponential", "trace"] | None = None
    rate: Float | None = Field(None, gt=0)
    low: Float | None = Field(None, ge=0)
    high: Float | None = Field(None, gt=0)
    mean: Float | None = Field(None, gt=0)
    std: Float | None = Field(None, ge=0)
    sigma: Float | None = Field(None, ge=0)
    path: str | None = None
    min_rate: Float = Field(1.0, gt=0)

    _required = {
        "constant": ("rate",), "uniform": ("low", "high"), "normal": ("mean", "std"),
        "lognormal": ("mean", "sigma"), "exponential": ("mean",), "trace": ("path",),
    }

    @field_validator("rate", "low", "high", "mean", "std", "min_rate")
    @classmethod
    def _at_most_max_rate(cls, v: float | None) -> float | None:
        if v is not None and v > MAX_RATE:
            raise ValueError(f"must be <= {MAX_RATE:.0f} (samples/s per device)")
        return v

    @field_validator("preset")
    @classmethod
    def _preset(cls, v: str | None) -> str | None:
        if v is None:
            return v
        v = PRESET_ALIASES.get(v, v)
        if v not in RATE_PRESETS:
            raise ValueError(f"must be one of {', '.join(RATE_PRESETS)}")
        return v

    @model_validator(mode="after")
    def _combination(self) -> RatesConfig:
        if (self.preset is None) == (self.distribution is None):
            raise ValueError("give exactly one of 'preset' or 'distribution'")
        given = {k for k in ("rate", "low", "high", "mean", "std", "sigma", "path") if getattr(self, k) is not None}
        if self.preset is not None:
            if given:
                raise ValueError(f"preset {self.preset!r} takes no other fields (got {', '.join(sorted(given))})")
            return self
        need = self._required[self.distribution]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"distribution {self.distribution!r} needs {', '.join(need)}; "
                             f"missing {', '.join(missing)}")
        extra = given - set(need)
        if extra:
            raise ValueError(f"distribution {self.distribution!r} takes only {', '.join(need)}; "
                             f"remove {', '.join(sorted(extra))}")
        if self.distribution == "uniform" and self.low >= self.high:
            raise ValueError(f"uniform needs low < high (got low={self.low}, high={self.high})")
        return self

    def spec(self) -> dict[str, Any]:
        """The plain dict streams.build_rate_model takes (without min_rate)."""
        return self.model_dump(exclude_none=True, exclude={"min_rate"})


class VariationConfig(_Model):
    """Intra-device rate variation over time."""

    kind: Literal["none", "sinusoid", "random_walk", "bursts"] = "none"
    period_s: Float | None = Field(None, gt=0)
    amplitude: Float | None = Field(None, ge=0, lt=1)
    sigma: Float | None = Field(None, ge=0)
    step_s: Float | None = Field(None, gt=0)
    every_s: Float | None = Field(None, gt=0)
    duration_s: Float | None = Field(None, gt=0)
    factor: Float | None = Field(None, gt=0)

    _allowed = {
        "none": (), "sinusoid": ("period_s", "amplitude"), "random_walk": ("sigma", "step_s"),
        "bursts": ("every_s", "duration_s", "factor"),
    }

    @model_validator(mode="after")
    def _fields(self) -> VariationConfig:
        allowed = self._allowed[self.kind]
        given = {k for k in ("period_s", "amplitude", "sigma", "step_s", "every_s", "duration_s", "factor")
                 if getattr(self, k) is not None}
        extra = given - set(allowed)
        if extra:
            raise ValueError(f"variation {self.kind!r} takes only {', '.join(allowed) or 'no fields'}; "
                             f"remove {', '.join(sorted(extra))}")
        return self

    def spec(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class ComputeConfig(_Model):
    """Step time t_i(b) = t(b) * static_i * (1 + U(0, dynamic)), t(b) = base_s + per_sample_s * b, or the
    measured curve of a compute profile (`profile`: a shipped NAME or a FILE, edgestream.profiles;
    `profile_model`: its entry, default the one named like model.name, else the profile's only one); neither:
    timed on this machine."""

    static: list[Float] = Field(default_factory=lambda: [1.0], min_length=1)
    dynamic: Float = Field(0.0, ge=0)
    base_s: Float | None = Field(None, ge=0)
    per_sample_s: Float | None = Field(None, ge=0)
    profile: str | None = Field(None, min_length=1)
    profile_model: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one_step_model(self) -> ComputeConfig:
        if self.profile is not None and (self.base_s is not None or self.per_sample_s is not None):
            raise ValueError("profile: give either a compute profile or base_s / per_sample_s, not both")
        if self.profile_model is not None and self.profile is None:
            raise ValueError("profile_model: names an entry of a compute profile; set profile too")
        return self

    @field_validator("static")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if any(s <= 0 for s in v):
            raise ValueError("every static factor must be > 0")
        return v


class NetworkConfig(_Model):
    latency_ms: Float = Field(5.0, ge=0)
    bandwidth_mbps: Float = Field(1000.0, gt=0)


DRIFT_KINDS = ("label_swap", "input_shift", "class_prior")
#: the params each drift kind takes (docs/stream-learning.md, "Drift scenarios")
DRIFT_PARAMS: dict[str, tuple[str, ...]] = {
    "label_swap": ("permutation", "swap", "target"),
    "input_shift": ("scale", "offset", "noise", "transform"),
    "class_prior": ("weights",),
}


class DriftScenarioConfig(_Model):
    """One entry of devices.drift: when (exactly one of at_s, at_sample, at_step), on which devices, what
    changes (kind and its params) and whether gradually (over_s). Checked in DevicesConfig (which knows the
    entry's index and devices.count) and, against the data and the batch policy, in the run plan."""

    at_s: Float | None = Field(None, ge=0)
    at_sample: Int | None = Field(None, ge=0)
    at_step: Int | None = Field(None, ge=0)
    devices: list[Int] | Literal["all"] = "all"
    kind: Literal["label_swap", "input_shift", "class_prior"]
    over_s: Float | None = Field(None, gt=0)
    permutation: list[Int] | None = None
    swap: list[list[Int]] | None = None
    target: str | None = Field(None, min_length=1)
    scale: Float | None = None
    offset: Float | None = None
    noise: Float | None = Field(None, ge=0)
    transform: str | None = Field(None, min_length=1)
    weights: list[Float] | None = None

    def problem(self, count: int) -> str | None:
        """The first problem of this entry as "field: what is allowed" (None: fine), devices.count given."""
        when = [k for k in ("at_s", "at_sample", "at_step") if getattr(self, k) is not None]
        if len(when) != 1:
            return (f"at_s: give exactly one of at_s, at_sample, at_step (got "
                    f"{', '.join(when) if when else 'none'})")
        if self.devices != "all":
            if not self.devices:
                return "devices: an empty list; give device numbers or \"all\""
            bad = next((d for d in self.devices if not 0 <= d < count), None)
            if bad is not None:
                return f"devices: device {bad} does not exist (devices.count is {count})"
        given = [k for k in ("permutation", "swap", "target", "scale", "offset", "noise", "transform", "weights")
                 if getattr(self, k) is not None]
        other = [k for k in given if k not in DRIFT_PARAMS[self.kind]]
        if other:
            return (f"{other[0]}: not a param of kind {self.kind!r} (it takes "
                    f"{', '.join(DRIFT_PARAMS[self.kind])})")
        if self.kind == "label_swap" and sum(k in given for k in ("permutation", "swap", "target")) > 1:
            return "permutation: give one of permutation, swap (classification) or target (regression)"
        if self.kind == "label_swap" and self.swap is not None:
            if not self.swap or any(len(pair) != 2 or pair[0] == pair[1] for pair in self.swap):
                return f"swap: {self.swap} is not allowed; give pairs of two different classes, e.g. [[0, 1]]"
        if self.kind == "input_shift":
            if not given:
                return "scale: input_shift needs scale, offset, noise or transform"
            if self.transform is not None and len(given) > 1:
                return "transform: give a transform alone (not with scale, offset or noise)"
        if self.kind == "class_prior":
            if self.weights is None:
                return "weights: class_prior needs weights, one per class"
            if any(w < 0 for w in self.weights) or not any(w > 0 for w in self.weights):
                return f"weights: {self.weights} is not allowed; must be >= 0 with at least one > 0"
        return None


class DevicesConfig(_Model):
    count: Int = Field(16, ge=1, le=100_000)
    rates: RatesConfig = Field(default_factory=lambda: RatesConfig(preset="S1"))
    variation: VariationConfig = Field(default_factory=VariationConfig)
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    #: drift scenarios of the run's own streams (edgestream.streams.drift; docs/stream-learning.md)
    drift: list[DriftScenarioConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _drift_entries(self) -> DevicesConfig:
        for i, entry in enumerate(self.drift):
            problem = entry.problem(self.count)
            if problem is not None:
                raise ValueError(f"drift[{i}].{problem}")
        return self


def uniform_bounds(mean: float, std: float) -> tuple[float, float]:
    """Bounds of the uniform distribution with this mean and std: mean -/+ sqrt(3) std."""
    half = math.sqrt(3.0) * std
    return mean - half, mean + half
