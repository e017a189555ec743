"""Checks for the plain spec dicts the streams builders take (the config sections, as dicts).

Every problem raises ValueError with one line naming the field path, the bad value and what is
allowed, in the style of edgestream.config, e.g. ``batch.min: 0 is not allowed; must be >= 1``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any


def check_keys(section: str, spec: Mapping[str, Any], allowed: Iterable[str], what: str = "") -> None:
    """Raise ValueError for the first key of `spec` not in `allowed`, naming it and the allowed keys."""
    allowed = list(allowed)
    for key in spec:
        if key not in allowed:
            scope = f" for {what}" if what else ""
            raise ValueError(f"{section}.{key}: unknown field; allowed fields{scope}: {', '.join(allowed)}")


def number(section: str, spec: Mapping[str, Any], key: str, default: float | None = None, *,
           gt: float | None = None, ge: float | None = None, lt: float | None = None,
           integer: bool = False) -> float:
    """`spec[key]` (or `default` when absent/None) as a float or int, checked against the bounds."""
    value = spec.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"{section}.{key}: required field is missing")
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{section}.{key}: {value!r} is not allowed; must be a number")
    if integer:
        if not float(value).is_integer():
            raise ValueError(f"{section}.{key}: {value!r} is not allowed; must be a whole number")
        value = int(value)
    if gt is not None and not value > gt:
        raise ValueError(f"{section}.{key}: {value} is not allowed; must be > {_fmt(gt)}")
    if ge is not None and not value >= ge:
        raise ValueError(f"{section}.{key}: {value} is not allowed; must be >= {_fmt(ge)}")
    if lt is not None and not value < lt:
        raise ValueError(f"{section}.{key}: {value} is not allowed; must be < {_fmt(lt)}")
    if not integer and math.isinf(value):
        raise ValueError(f"{section}.{key}: {value} is not allowed; must be finite")
    return value


def choice(section: str, key: str, value: Any, allowed: Iterable[str]) -> str:
    """`value` if it is one of `allowed`, else ValueError listing them."""
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"{section}.{key}: {value!r} is not allowed; must be one of {', '.join(allowed)}")
    return value


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
