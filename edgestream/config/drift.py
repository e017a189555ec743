"""Stream learning's settings: `eval.prequential` (test-then-train evaluation) and the top-level `drift:`
section (drift detectors over the prequential errors and the responses to a detection); docs/stream-learning.md.

The detector's name and params are checked against the detectors registry (edgestream.plugins.DETECTORS: a
built-in, an import path or an entry point) when the plan is resolved, where the task is known."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from edgestream.config.base import Float, Int, _Model

#: the responses `drift.on_detect` accepts; lr_boost and reweight take {factor, steps}
RESPONSES = ("warn", "checkpoint", "reset_optimizer", "lr_boost", "reweight")
#: a response's params and their defaults
RESPONSE_DEFAULTS: dict[str, dict[str, float]] = {"lr_boost": {"factor": 2.0, "steps": 100},
                                                   "reweight": {"factor": 2.0, "steps": 100}}


class PrequentialConfig(_Model):
    """Prequential evaluation: every training batch scored before the step that trains on it, kept cumulative,
    over each device's last `window` samples, and with a fading factor `fading` in (0, 1) when given."""

    window: Int = Field(1000, ge=1)
    fading: Float | None = Field(None, gt=0, lt=1)


class DriftConfig(_Model):
    """Drift detection on every device's prequential errors (and on all devices' per-step errors): `detector` a
    built-in (adwin, page_hinkley, ddm) or "pkg.mod:factory" called with `params`; `on_detect` the responses."""

    detector: str = "adwin"
    params: dict[str, Any] = Field(default_factory=dict)
    on_detect: list[Any] = Field(default_factory=lambda: ["warn"])

    @field_validator("on_detect")
    @classmethod
    def _responses(cls, v: list[Any]) -> list[Any]:
        out: list[Any] = []
        for item in v:
            if isinstance(item, str):
                name, params = item, {}
            elif isinstance(item, dict) and len(item) == 1:
                name, params = next(iter(item.items()))
                params = dict(params or {})
            else:
                raise ValueError(f"{item!r}: a response is a name ({', '.join(RESPONSES)}) or "
                                 "{lr_boost: {factor, steps}} / {reweight: {factor, steps}}")
            if name not in RESPONSES:
                raise ValueError(f"unknown response {name!r}: allowed {', '.join(RESPONSES)}")
            allowed = RESPONSE_DEFAULTS.get(name, {})
            extra = set(params) - set(allowed)
            if extra:
                raise ValueError(f"{name}: unknown {', '.join(sorted(extra))} (allowed: "
                                 f"{', '.join(allowed) or 'no params'})")
            merged = {**allowed, **params}
            if "factor" in merged and not (isinstance(merged["factor"], int | float) and merged["factor"] > 0):
                raise ValueError(f"{name}.factor: must be a number > 0, got {merged['factor']!r}")
            if "steps" in merged and not (isinstance(merged["steps"], int) and merged["steps"] >= 1):
                raise ValueError(f"{name}.steps: must be an integer >= 1, got {merged['steps']!r}")
            out.append(name if not merged else {name: merged})
        return out

    def responses(self) -> dict[str, dict[str, Any]]:
        """{name: params} of on_detect."""
        out: dict[str, dict[str, Any]] = {}
        for item in self.on_detect:
            if isinstance(item, str):
                out[item] = {}
            else:
                out.update(item)
        return out
