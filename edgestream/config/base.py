"""Field types, bounds, secret keys and the base model every config section shares, and how a section checks a
name of a plugin registry (pydantic only: no torch; a registry is imported only to check a name it does not
know as a built-in); edgestream.config re-exports them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict


def _no_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("must be a number, not true/false")
    return v


#: a float field: finite (the models set allow_inf_nan=False) and never true/false.
Float = Annotated[float, BeforeValidator(_no_bool)]
#: an int field: strict, so true/false (which pydantic would coerce to 1/0) and 4.0 do not pass.
Int = Annotated[int, Strict()]
#: a yes/no field: true or false only (not 1, "yes" or "on").
Bool = Annotated[bool, Strict()]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


#: runtime.kafka_client keys whose values are secrets (masked as "***" by to_yaml): a key containing one
#: of these words, except file paths (*.location), plus sasl.oauthbearer.config (it may hold credentials).
SECRET_WORDS = ("password", "secret", "key")
#: what a secret value shows as in shown and written configs
SECRET_MASK = "***"
#: the highest per-device stream rate a config may ask for, in samples/s.
MAX_RATE = 1e6


def is_secret_key(key: str) -> bool:
    """Whether a runtime.kafka_client key holds a secret (its value is masked in shown/written configs)."""
    k = key.lower()
    if k == "sasl.oauthbearer.config":
        return True
    return any(w in k for w in SECRET_WORDS) and not k.endswith(".location")


def plugin_name(registry: Any, name: str) -> str:
    """A name `registry` (edgestream.plugins) resolves: a built-in, an entry point or an import path
    (imported now, so `config validate` refuses what `run` would). ValueError: one line."""
    from edgestream.plugins import PluginError

    if name in registry.builtins:
        return name
    try:
        registry.load(name)
    except PluginError as exc:
        raise PluginError(str(exc)) from None
    return name
