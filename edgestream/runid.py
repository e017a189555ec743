"""Run ids and run names, shared by both engines: a run is `<name>-<algorithm>-<run id>`, its directory
`<out>/<name>-<algorithm>-<run id>/` and its Kafka topics `<name>-<algorithm>-<run id>.*`."""

from __future__ import annotations

import re
import secrets
import time

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
#: the longest algorithm part of a run name (a run name stays far below Kafka's 249 characters per topic:
#: name <= 100, run id <= 64)
ALGORITHM_PART_MAX = 40


def new_run_id() -> str:
    """A short sortable run id: UTC time plus 4 random hex digits, e.g. 20261122-211530-3fa2."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    """Return run_id, or raise ValueError naming it and what is allowed."""
    if not RUN_ID_PATTERN.match(run_id):
        raise ValueError(f"run id {run_id!r} is not allowed; use 1-64 letters, digits, '-' or '_'")
    return run_id


def algorithm_part(algorithm: str) -> str:
    """The algorithm as a run name shows it: a registered name as it is (`ddl`, `abs-sgd`); an import path
    `package.module:attribute` by its attribute; any character outside [A-Za-z0-9_-] becomes '-' (run names
    are folder names and Kafka topic prefixes), at most ALGORITHM_PART_MAX characters."""
    tail = str(algorithm).rpartition(":")[2]
    part = re.sub(r"[^A-Za-z0-9_\-]+", "-", tail).strip("-")[:ALGORITHM_PART_MAX].strip("-")
    return part or "algorithm"


def run_prefix(name: str, algorithm: str) -> str:
    """`<name>-<algorithm>-`: what every run name of this config and algorithm starts with."""
    return f"{name}-{algorithm_part(algorithm)}-"


def run_name(name: str, algorithm: str, run_id: str) -> str:
    """The run's name `<name>-<algorithm>-<run id>`: its directory under runtime.out and its Kafka topic prefix.
    Sorted by name, one config's runs group by algorithm, then by time (the default run id starts with it)."""
    return run_prefix(name, algorithm) + check_run_id(run_id)
