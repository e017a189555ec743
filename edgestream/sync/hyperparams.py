"""Declarative checks of an algorithm's `params` (the config's ``algorithm.params``).

Each algorithm declares `Param`s; `check_params` returns one line per problem, naming the field in
the config's style: ``algorithm.params.tau: 0 is not allowed; must be >= 1``. Other kinds with params read
the same schema under their own prefix (the drift detectors: ``drift.params.delta: 2 is not allowed; must be
< 1``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PREFIX = "algorithm.params"


@dataclass(frozen=True)
class Param:
    """One parameter: name, default, kind ("int" | "float" | "choice": one of `choices`, a string),
    bounds, and whether None is allowed."""

    name: str
    default: Any
    kind: str = "int"
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    optional: bool = False
    doc: str = ""
    choices: tuple[str, ...] = ()


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def check_value(p: Param, value: Any, prefix: str = PREFIX) -> str | None:
    """The problem with `value` for parameter `p` (named `<prefix>.<name>`), or None when it is fine."""
    where = f"{prefix}.{p.name}"
    if p.kind == "choice":
        if value is None and p.optional:
            return None
        if not isinstance(value, str) or value not in p.choices:
            return f"{where}: {value!r} is not allowed; must be one of {', '.join(repr(c) for c in p.choices)}"
        return None
    if value is None:
        return None if p.optional else f"{where}: null is not allowed; must be a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{where}: {value!r} is not allowed; must be a number"
    if p.kind == "int" and not (isinstance(value, int) or float(value).is_integer()):
        return f"{where}: {value!r} is not allowed; must be a whole number"
    if math.isnan(value) or math.isinf(value):
        return f"{where}: {value} is not allowed; must be finite"
    if p.ge is not None and not value >= p.ge:
        return f"{where}: {value} is not allowed; must be >= {_fmt(p.ge)}"
    if p.gt is not None and not value > p.gt:
        return f"{where}: {value} is not allowed; must be > {_fmt(p.gt)}"
    if p.le is not None and not value <= p.le:
        return f"{where}: {value} is not allowed; must be <= {_fmt(p.le)}"
    if p.lt is not None and not value < p.lt:
        return f"{where}: {value} is not allowed; must be < {_fmt(p.lt)}"
    return None


def check_params(schema: Sequence[Param], params: Mapping[str, Any] | None, prefix: str = PREFIX) -> list[str]:
    """Problems of `params` against `schema`: unknown fields and bad values, one line each, named under
    `prefix` (``algorithm.params`` unless told)."""
    if params is None:
        return []
    if not isinstance(params, Mapping):
        return [f"{prefix}: must be a mapping, got {type(params).__name__}"]
    known = {p.name: p for p in schema}
    problems = []
    for key, value in params.items():
        if key not in known:
            allowed = ", ".join(known) or "(none)"
            problems.append(f"{prefix}.{key}: unknown field; allowed fields: {allowed}")
            continue
        problem = check_value(known[key], value, prefix)
        if problem:
            problems.append(problem)
    return problems


def defaults(schema: Sequence[Param]) -> dict[str, Any]:
    """{name: default} of a schema."""
    return {p.name: p.default for p in schema}


def coerce(schema: Sequence[Param], params: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults merged with `params`, ints as int and floats as float (call after `check_params`)."""
    out = defaults(schema)
    out.update(params)
    for p in schema:
        v = out[p.name]
        if v is not None and p.kind != "choice":
            out[p.name] = int(v) if p.kind == "int" else float(v)
    return out
