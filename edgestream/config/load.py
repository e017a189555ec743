"""Reading a config: a file or a parsed document, `--set KEY.PATH=VALUE` overrides, relative paths made absolute,
validation (`validate_dict`: the schema, then the algorithm's own params) and, with `check`, what can be built
without a broker (edgestream.config.check)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from edgestream.config.check import check_buildable
from edgestream.config.errors import ConfigError, describe_error
from edgestream.config.experiment import ExperimentConfig

#: config fields that hold file-system paths (resolved against the config file's folder).
PATH_FIELDS = (("data", "root"), ("data", "path"), ("devices", "rates", "path"), ("devices", "compute", "profile"),
               ("eval", "path"), ("streams", "schema"))
#: path fields that may also hold a bare name (a shipped compute profile): resolved only when path-like
NAME_OR_PATH = {("devices", "compute", "profile")}
NAME_REQUIRED = "name: required (the run name; topics are <name>-<algorithm>-<run id>.dev.<i>)"


def validate_dict(raw: Any, source: str = "config") -> ExperimentConfig:
    """Validate a parsed YAML document; raise ConfigError listing every problem."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([f"(top level): must be a mapping of fields, got {type(raw).__name__}"], source)
    try:
        cfg = ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError([describe_error(e, ExperimentConfig) for e in exc.errors()], source) from None
    problems = algorithm_param_problems(cfg.algorithm.name, cfg.algorithm.params)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def algorithm_param_problems(name: str, params: dict) -> list[str]:
    """Problems with `algorithm.params` per the algorithm's own schema (edgestream.sync registry)."""
    from edgestream.sync.registry import get_algorithm

    try:
        spec = get_algorithm(name)
    except ValueError:
        return []  # the name's own problem is reported on algorithm.name
    return spec.validate(params)


def load_config(path: str | Path, overrides: list[str] | None = None, *, check: bool = True) -> ExperimentConfig:
    """Read, apply `key.path=value` overrides (values parsed as YAML), and validate a config file.

    The file must give `name`. Relative paths (PATH_FIELDS) resolve against the file's folder, or the
    current directory when an override set them, and are stored absolute. With `check` (the default)
    what can be built without a broker is built too (edgestream.config.check.check_buildable). Every
    problem, including an unreadable file, raises ConfigError with one line each.
    """
    p = Path(path)
    src = str(p)
    if not p.exists():
        raise ConfigError([f"{p}: no such file"], src)
    if p.is_dir():
        raise ConfigError([f"{p}: is a folder, not a config file"], src)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError([f"{p}: not a text (UTF-8) file"], src) from None
    except OSError as exc:
        raise ConfigError([f"{p}: cannot read: {exc.strerror or exc}"], src) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{p}: not valid YAML: " + " ".join(str(exc).split())], src) from None
    empty = raw is None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError([f"(top level): must be a mapping of fields, got {type(raw).__name__}"], src)
    return load_dict(raw, overrides, p.parent.absolute(), src, require_name=True, empty=empty, check=check)


def load_dict(raw: dict, overrides: list[str] | None = None, base: str | Path | None = None, source: str = "config",
              *, require_name: bool = False, empty: bool = False, check: bool = True) -> ExperimentConfig:
    """A parsed config (`raw`, modified in place) as `load_config` treats a file's: `key.path=value`
    overrides applied, `base` (the file's folder; None = the current directory) put on the import path (here
    and in child processes), relative paths resolved against it (against the current directory where an
    override set them), validated, and with `check` what can be built without a broker built too.
    ConfigError with one line per problem."""
    from_cli: set[tuple[str, ...]] = set()
    for item in overrides or []:
        key = apply_override(raw, item)
        from_cli |= {f for f in PATH_FIELDS if f[:len(key)] == key}
    folder = Path(base).absolute() if base is not None else Path.cwd()
    from edgestream.plugins import add_search_path

    add_search_path(folder)  # import paths resolve from the config's folder, here and in child processes
    for field in PATH_FIELDS:
        _resolve_path(raw, field, Path.cwd() if field in from_cli else folder)
    problems = []
    if require_name and "name" not in raw:
        problems.append(NAME_REQUIRED + ("; the file is empty" if empty and not overrides else ""))
    try:
        cfg = validate_dict(raw, source)
    except ConfigError as exc:
        raise ConfigError(problems + exc.problems, source) from None
    if check:
        problems += check_buildable(cfg)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def _resolve_path(raw: dict, field: tuple[str, ...], base: Path) -> None:
    """Make the path at `field` of a raw config absolute (relative to `base`, ~ expanded), if it is a
    relative path string; anything else is left for validation to judge."""
    cur: Any = raw
    for part in field[:-1]:
        cur = cur.get(part) if isinstance(cur, dict) else None
    if not isinstance(cur, dict):
        return
    value = cur.get(field[-1])
    if not isinstance(value, str) or not value.strip():
        return
    if field in NAME_OR_PATH and "/" not in value and not value.endswith((".yaml", ".yml")):
        return  # a name, not a path
    path = Path(value).expanduser()
    cur[field[-1]] = os.path.normpath(path if path.is_absolute() else base / path)


def apply_override(raw: dict, item: str) -> tuple[str, ...]:
    """Set `a.b.c=value` in a raw config dict (value parsed as YAML); returns the key path set.

    Below runtime.kafka_client the rest of the key is one client setting (its name holds dots):
    `runtime.kafka_client.security.protocol=SSL`.
    """
    key, sep, value = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not key.strip() or any(not part for part in parts):
        raise ConfigError([f"--set {item!r}: expected KEY.PATH=VALUE"])
    if parts[:2] == ["runtime", "kafka_client"] and len(parts) > 3:
        parts = [*parts[:2], ".".join(parts[2:])]
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        detail = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise ConfigError([f"--set {key.strip()}: value is not valid YAML ({detail})"]) from None
    cur = raw
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[part] = nxt
        cur = nxt
    cur[parts[-1]] = parsed
    return tuple(parts)
