"""Topic names of a run (DESIGN.md "Kafka conventions"): `<name>-<run id>.dev.<i>` and friends."""

from __future__ import annotations

import re
import secrets
import time

_RUN_ID = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


def new_run_id() -> str:
    """A short sortable run id: UTC time plus 4 random hex digits, e.g. 20261122-211530-3fa2."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def run_name(name: str, run_id: str) -> str:
    """The run's topic prefix `<name>-<run id>`."""
    if not _RUN_ID.match(run_id):
        raise ValueError(f"run id {run_id!r} is not allowed; use 1-64 letters, digits, '-' or '_'")
    return f"{name}-{run_id}"


def device_topic(run: str, device: int) -> str:
    return f"{run}.dev.{device}"


def injection_topic(run: str, device: int) -> str:
    return f"{run}.inj.{device}"


def dlq_topic(run: str) -> str:
    return f"{run}.dlq"


def ps_topic(run: str, kind: str) -> str:
    return f"{run}.ps.{kind}"


def run_topic_prefix(run: str) -> str:
    return f"{run}."
