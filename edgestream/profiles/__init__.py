"""Compute profiles: a model's measured forward+backward time per batch size on a named device.

A profile is a YAML file:

    name: k80                         # what `devices.compute.profile: NAME` finds (file stem if absent)
    device: NVIDIA Tesla K80 ...      # what was measured on
    source: where the numbers come from (a published table, or `edgestream profile ...` and its date)
    models:
      resnet50-imagenet:              # an entry; `devices.compute.profile_model` picks one (default: the
                                      # entry named like the run's model.name, else the only one)
        shape: [3, 224, 224]          # optional: the input it was measured with
        seconds:                      # batch size -> seconds of one forward+backward step
          32: 0.6465                  # a comment per number saying where it comes from
          64: 1.2331

The step time of b samples is the piecewise-linear interpolation of `seconds` (extended beyond the
measured sizes along the nearest segment, never below 1% of the smallest measured time): GPUs' time
grows sublinearly with the batch until they are saturated, a straight `base_s + per_sample_s * b`
cannot show that. Named profiles ship in this folder (`NAMES`); `edgestream profile CONFIG` measures
one on the local device. A run uses one with `devices.compute.profile: NAME|FILE` (the simulator's
step times and the real trainers' slowdown emulation, times the per-device `static` factors as before).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent


class ProfileError(ValueError):
    """A profile that cannot be used; str() is one line naming the file (or name) and the problem."""


@dataclass(frozen=True)
class Curve:
    """One model's step time per batch size (module doc)."""

    batches: tuple[int, ...]
    seconds: tuple[float, ...]

    def __call__(self, b: float) -> float:
        xs, ys = self.batches, self.seconds
        if b <= xs[0] or len(xs) == 1:
            i = 0
        elif b >= xs[-1]:
            i = len(xs) - 2
        else:
            i = bisect.bisect_right(xs, b) - 1
        x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
        t = y0 + (y1 - y0) * (b - x0) / (x1 - x0)
        return max(t, 0.01 * min(ys))

    def per_sample(self) -> list[float]:
        """Seconds per sample at each measured batch size (falls as the batch grows on a GPU)."""
        return [s / b for b, s in zip(self.batches, self.seconds, strict=True)]


@dataclass(frozen=True)
class Profile:
    name: str
    device: str
    source: str
    models: dict[str, Curve]
    shapes: dict[str, list[int]]
    path: str

    def curve(self, model: str | None, run_model: str | None = None) -> Curve:
        """The curve of entry `model`; None: the entry named `run_model` (the run's model.name) if there is
        one, else the only entry. ProfileError naming the entries otherwise."""
        if model is None and run_model in self.models:
            return self.models[str(run_model)]
        if model is None and len(self.models) == 1:
            return next(iter(self.models.values()))
        if model not in self.models:
            what = "a model entry (devices.compute.profile_model)" if model is None else f"no entry {model!r}"
            if model is None and run_model is not None:
                what += f", none is named like the run's model {run_model!r}"
            raise ProfileError(f"profile {self.name}: {what}; it has {', '.join(sorted(self.models))}")
        return self.models[model]


def names() -> list[str]:
    """The profiles shipped with edgestream."""
    return sorted(p.stem for p in HERE.glob("*.yaml"))


def _where(spec: str) -> Path:
    path = Path(spec).expanduser()
    if path.suffix in (".yaml", ".yml") or path.exists() or "/" in spec:
        return path
    named = HERE / f"{spec}.yaml"
    if named.exists():
        return named
    raise ProfileError(f"{spec}: no such profile file, and not a named profile ({', '.join(names())})")


def load_profile(spec: str | Path, base_dir: str | Path | None = None) -> Profile:
    """A profile by NAME (shipped) or FILE (relative to `base_dir` when given); ProfileError (one line)."""
    spec = str(spec)
    path = _where(spec)
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = Path(base_dir) / path
    if not path.is_file():
        raise ProfileError(f"{spec}: no such profile file, and not a named profile ({', '.join(names())})")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ProfileError(f"{path}: not a readable YAML profile: {' '.join(str(exc).split())[:200]}") from None
    return parse_profile(raw, str(path), default_name=path.stem)


def parse_profile(raw: Any, where: str, default_name: str = "profile") -> Profile:
    """Check a parsed profile document (module doc); ProfileError naming `where` and the field."""
    def bad(field: str, why: str) -> ProfileError:
        return ProfileError(f"{where}: {field}: {why}")

    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: must be a mapping with name, device, source, models")
    unknown = sorted(set(raw) - {"name", "device", "source", "models", "measured"})
    if unknown:
        raise bad(unknown[0], "unknown field; allowed fields: name, device, source, measured, models")
    for key in ("device", "source"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise bad(key, "required: a non-empty text (what was measured / where the numbers come from)")
    models = raw.get("models")
    if not isinstance(models, Mapping) or not models:
        raise bad("models", "required: a mapping of model entries, each with `seconds: {batch: seconds}`")
    curves: dict[str, Curve] = {}
    shapes: dict[str, list[int]] = {}
    for model, entry in models.items():
        field = f"models.{model}"
        if not isinstance(entry, Mapping) or "seconds" not in entry:
            raise bad(field, "must be a mapping with `seconds: {batch size: seconds}` (and an optional shape)")
        extra = sorted(set(entry) - {"seconds", "shape"})
        if extra:
            raise bad(f"{field}.{extra[0]}", "unknown field; allowed fields: seconds, shape")
        shape = entry.get("shape")
        if shape is not None:
            if not isinstance(shape, list) or not all(isinstance(x, int) and x > 0 for x in shape):
                raise bad(f"{field}.shape", f"must be a list of positive ints, got {shape!r}")
            shapes[str(model)] = shape
        secs = entry["seconds"]
        if not isinstance(secs, Mapping) or len(secs) < 2:
            raise bad(f"{field}.seconds", "needs at least two batch sizes (batch size: seconds)")
        points = []
        for b, s in secs.items():
            if isinstance(b, bool) or not isinstance(b, int) or b < 1:
                raise bad(f"{field}.seconds", f"batch size {b!r} must be an int >= 1")
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
                raise bad(f"{field}.seconds.{b}", f"must be a positive number of seconds, got {s!r}")
            points.append((b, float(s)))
        points.sort()
        curves[str(model)] = Curve(tuple(p[0] for p in points), tuple(p[1] for p in points))
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise bad("name", f"must be a non-empty text, got {name!r}")
    return Profile(name, raw["device"].strip(), raw["source"].strip(), curves, shapes, where)


def dump_profile(profile: Mapping[str, Any]) -> str:
    """YAML text of a profile document (batch sizes in ascending order)."""
    return yaml.safe_dump(dict(profile), sort_keys=False, default_flow_style=False)
