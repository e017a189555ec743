"""Run ids, shared by both engines: run dirs are `<out>/<name>-<run id>/`, Kafka topics `<name>-<run id>.*`."""

from __future__ import annotations

import re
import secrets
import time

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


def new_run_id() -> str:
    """A short sortable run id: UTC time plus 4 random hex digits, e.g. 20261122-211530-3fa2."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    """Return run_id, or raise ValueError naming it and what is allowed."""
    if not RUN_ID_PATTERN.match(run_id):
        raise ValueError(f"run id {run_id!r} is not allowed; use 1-64 letters, digits, '-' or '_'")
    return run_id
