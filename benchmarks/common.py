"""Shared benchmark helpers: a broker for the run, result recording."""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

OUT = Path(os.environ.get("EDGESTREAM_BENCH_OUT", "bench-out"))


@contextmanager
def bench_broker():
    """EDGESTREAM_BOOTSTRAP if set, else a managed local broker for this benchmark."""
    if os.environ.get("EDGESTREAM_BOOTSTRAP"):
        yield os.environ["EDGESTREAM_BOOTSTRAP"], None
        return
    from edgestream.kafka import LocalBroker

    with LocalBroker() as broker:
        yield broker.bootstrap, broker


def record(name: str, result: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    result = {"benchmark": name, "when": time.strftime("%Y-%m-%d %H:%M:%S"), **result}
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
