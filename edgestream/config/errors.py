"""`ConfigError` and how pydantic's validation errors become its one-line problems, each naming the field path,
the bad value and what is allowed (``devices.count: -3 is not allowed; must be >= 1``)."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel


class ConfigError(ValueError):
    """An invalid experiment config; `problems` holds one human-readable line per problem."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: {len(problems)} problem(s)\n" + "\n".join(problems))


def _allowed_fields(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names allowed at the parent of `loc` (for unknown-field messages)."""
    cur: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(cur, type) and issubclass(cur, BaseModel)):
            return []
        field = cur.model_fields.get(part)
        if field is None:
            return []
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        cur = next((a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if isinstance(cur, type) and issubclass(cur, BaseModel):
        return list(cur.model_fields)
    return []


def describe_error(err: dict, model: type[BaseModel]) -> str:
    """One pydantic error (of validating `model`) as one problem line: the field path, the bad value and what is
    allowed."""
    loc = tuple(p for p in err["loc"] if p not in ("function-after",) and not str(p).startswith("function"))
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "(top level)"
    typ, ctx, value = err["type"], err.get("ctx", {}), err.get("input")
    shown = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip() \
        if isinstance(value, (int, float, str, bool, list)) or value is None else repr(value)
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if typ in bounds:
        limit = next(iter(ctx.values()))
        limit = int(limit) if isinstance(limit, float) and limit.is_integer() else limit
        return f"{path}: {shown} is not allowed; must be {bounds[typ]} {limit}"
    if typ == "extra_forbidden":
        allowed = _allowed_fields(model, loc)
        hint = f"; allowed fields: {', '.join(allowed)}" if allowed else ""
        return f"{path}: unknown field{hint}"
    if typ == "literal_error":
        return f"{path}: {shown} is not allowed; must be one of {ctx.get('expected', '')}"
    if typ == "missing":
        return f"{path}: required field is missing"
    if typ == "int_type" and isinstance(value, bool):
        return f"{path}: {shown} is not allowed; must be an integer, not true/false"
    if typ in ("too_short", "too_long"):
        return f"{path}: {shown} is not allowed; {err['msg'].lower()}"
    if typ == "string_pattern_mismatch":
        return f"{path}: {shown} is not allowed; use letters, digits, '-' and '_' (starting with a letter or digit)"
    msg = err["msg"].removeprefix("Value error, ")
    from edgestream.plugins import PluginError

    if typ == "value_error" and isinstance(ctx.get("error"), PluginError):  # names the value itself
        return f"{path}: {msg}"
    head, colon, rest = msg.partition(": ")
    if typ == "value_error" and colon and " " not in head:  # "field: message" from a model validator
        return f"{head}: {rest}" if not loc else f"{path}.{head}: {rest}"
    if typ == "value_error":
        if value is None or isinstance(value, dict):
            return f"{path}: {msg}"
        return f"{path}: {shown} is not allowed; {msg}"
    return f"{path}: {shown} is not allowed; {msg[0].lower() + msg[1:]}"
