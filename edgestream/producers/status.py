"""The producer's running account, for a run that must never report `producer: null`.

`edgestream produce --status-file PATH` rewrites PATH (atomically) with its counts when it begins
streaming and at every report: produced, delivered (acknowledged by the broker), failed, unacknowledged,
queued (in librdkafka's local queue), waiting_s (the current wait for Kafka, or null) and t (seconds since
it began streaming). The orchestrator passes a file in the run directory; `account` reads the producer's
summary (the JSON line it prints at exit) or, when it had to be killed before printing one, these counts,
marked as such.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

#: the producer's numbers in summary.json (as the producer's summary names them)
FIELDS = ("produced", "delivered", "failed", "unacknowledged", "duration_s")


def write_status(path: str | Path, report: dict) -> None:
    """Replace `path` with the counts of `report` (StreamProducer's report dict); a failed write is ignored
    (the status is a fallback, the producer streams on)."""
    path = Path(path)
    doc = {k: report.get(k) for k in ("t", "produced", "delivered", "failed", "unacknowledged", "queued",
                                      "waiting_s")}
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(OSError):
        tmp.write_text(json.dumps(doc) + "\n")
        os.replace(tmp, path)


def read_status(path: str | Path) -> dict | None:
    """The counts last written to `path`, or None (no file, or not readable as them)."""
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads(Path(path).read_text())
        if isinstance(doc, dict) and isinstance(doc.get("produced"), int):
            return doc
    return None


def printed_summary(out_path: str | Path, start: int = 0, max_bytes: int = 256 * 1024) -> dict | None:
    """The last JSON object line the producer printed into `out_path` after byte `start` (where this
    session's producer began writing: a resumed run's file holds the earlier sessions' too)."""
    try:
        with open(out_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(int(start), f.tell() - max_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict):
                    return doc
    return None


def account(summary: dict | None, status_path: str | Path | None, *, started: bool) -> dict:
    """summary.json's `producer`: the producer's own summary when it printed one; else what is known,
    with `source` saying where it comes from (never None)."""
    if summary is not None:
        return {k: summary.get(k) for k in FIELDS} | {
            k: summary[k] for k in ("kafka_waits", "kafka_wait_s", "error") if summary.get(k)}
    if not started:
        return {"produced": 0, "delivered": 0, "failed": 0, "unacknowledged": 0, "duration_s": 0.0,
                "source": "not started: the run stopped before every trainer was ready"}
    status = read_status(status_path) if status_path is not None else None
    if status is None:
        return {"produced": 0, "delivered": 0, "failed": 0, "unacknowledged": 0, "duration_s": 0.0,
                "source": "no summary: the producer was stopped before it began streaming"}
    return {"produced": status["produced"], "delivered": status.get("delivered"), "failed": status.get("failed"),
            "unacknowledged": status.get("unacknowledged"), "duration_s": status.get("t"),
            "queued": status.get("queued"),
            "source": f"its last progress report ({status.get('t')} s after it began streaming): the producer was "
                      "killed before it printed its summary; samples sent after that report are not counted"}
