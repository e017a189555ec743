"""Put a compute profile in place of a config's step-time model: `edgestream compare --profile` and
`edgestream reproduce --profile` (e.g. `--profile h100`, the measured H100 curves).

With a profile the devices' step time is the profile's curve (edgestream.profiles) instead of the config's
`base_s + per_sample_s * b`; the per-device `static` and `dynamic` factors stay as they were. The entry
is `profile_model` when given, else the one named like the run's model, else the profile's only one.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from edgestream.profiles import ProfileError, load_profile, names


def profile_overrides(spec: str, entry: str | None = None) -> list[str]:
    """The `--set` items that make a run use compute profile `spec` (NAME|FILE) and entry `entry`."""
    return [f"devices.compute.profile={json.dumps(spec)}", "devices.compute.base_s=null",
            "devices.compute.per_sample_s=null",
            f"devices.compute.profile_model={json.dumps(entry) if entry else 'null'}"]


def with_profile(cfg: dict, spec: str, entry: str | None = None) -> dict:
    """A copy of raw config `cfg` whose devices take their step times from profile `spec` (module doc)."""
    out = copy.deepcopy(cfg)
    compute = out.setdefault("devices", {}).setdefault("compute", {})
    for key in ("base_s", "per_sample_s", "profile_model"):
        compute.pop(key, None)
    compute["profile"] = spec
    if entry:
        compute["profile_model"] = entry
    return out


def resolve(spec: str) -> tuple[str, Any]:
    """(what a config should name, the loaded profile): a shipped NAME stays a name, a FILE becomes an
    absolute path (a run folder may be elsewhere). ProfileError (one line) when it does not load."""
    prof = load_profile(spec)
    if spec in names() and "/" not in spec and not spec.endswith((".yaml", ".yml")):
        return spec, prof
    return str(Path(prof.path).resolve()), prof


def entry_for(prof: Any, entry: str | None, model: str | None) -> str | None:
    """The entry of `prof` a run of `model` uses (module doc); ProfileError (one line) when there is none."""
    if entry is not None:
        prof.curve(entry)
        return entry
    if model in prof.models:
        return model
    if len(prof.models) == 1:
        return next(iter(prof.models))
    raise ProfileError(f"profile {prof.name} has no entry for the model {model!r} (it has "
                       f"{', '.join(sorted(prof.models))}); pick one with --profile-model")


def cli_overrides(profile: str | None, entry: str | None, sets: list[str] | None) -> list[str]:
    """A command's `--set` items with `--profile` / `--profile-model` put first (a later --set wins)."""
    return [*(profile_overrides(profile, entry) if profile else []), *(sets or [])]


def profile_help() -> str:
    """The --profile option's help, listing the shipped profiles."""
    return ("compute profile NAME|FILE for the devices' step times, in place of the config's base_s / "
            f"per_sample_s (static factors kept); shipped: {', '.join(names())}")


ENTRY_HELP = "the profile's entry (default: the one named like the run's model, else its only one)"
