"""What a local run shows and says about a Kafka outage (runtime.kafka_outage_s).

* While any trainer waits for Kafka (its "wait" records in ranks/<rank>.jsonl, edgestream.trainer.outage),
  the live view and the progress line show `KafkaWaits.text()`: "waiting for
  Kafka at HOST:PORT since HH:MM:SS (N s of the B s runtime.kafka_outage_s budget; device 0)".
* A child that ended because Kafka did not answer within the budget ("error: ... no answer from Kafka at
  ..." as its last line) is the one the run's error line names (`kafka_failure`), followed by how to go on
  (`resume_hint`): `--resume RUN_DIR` when every rank has a checkpoint, else why the run cannot be resumed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from edgestream.kafka.outage import BUDGET_FIELD
from edgestream.launch.procs import tail_lines

#: the words of every give-up line (edgestream.kafka.outage.Outage.error, trainer.outage.give_up_line)
SILENT = "no answer from Kafka at"
#: the record kinds of a wait (edgestream.trainer.outage)
KINDS = ("wait",)


class KafkaWaits:
    """Which devices wait for Kafka now, from their "wait" records (`add`)."""

    def __init__(self) -> None:
        self.waiting: dict[int, dict] = {}   # device -> its "start" record

    def add(self, device: int, rec: dict) -> None:
        if rec.get("kind") != "wait" or rec.get("wait_for") != "kafka":
            return
        if rec.get("state") == "start":
            self.waiting[device] = rec
        else:  # "end", "gave_up"
            self.waiting.pop(device, None)

    def text(self, now: float | None = None) -> str | None:
        """The status line's words while a device waits (the longest wait), else None."""
        if not self.waiting:
            return None
        rec = min(self.waiting.values(), key=lambda r: float(r.get("since") or 0.0))
        since = float(rec.get("since") or 0.0)
        waited = max(0.0, (time.time() if now is None else now) - since)
        devices = sorted(self.waiting)
        who = f"device {devices[0]}" if len(devices) == 1 else f"devices {', '.join(map(str, devices))}"
        return (f"waiting for Kafka at {rec.get('bootstrap')} since {time.strftime('%H:%M:%S', time.localtime(since))} "
                f"({waited:.0f} s of the {float(rec.get('budget_s') or 0):g} s {BUDGET_FIELD} budget; {who})")


def kafka_line(out_path: Path) -> str | None:
    """The error line (without "error: ") a child ended with when Kafka did not answer within its budget."""
    for line in reversed(tail_lines(out_path, 20)):
        if line.startswith("error: ") and SILENT in line:
            return line[len("error: "):]
    return None


def kafka_failure(children: Iterable[Any]) -> tuple[Any, str] | None:
    """(child, its line): the first of `children` (None and running ones skipped) that ended because Kafka
    did not answer within its budget; None when none did."""
    seen = set()
    for child in children:
        if child is None or id(child) in seen or child.poll() in (None, 0):
            continue
        seen.add(id(child))
        line = kafka_line(child.out_path)
        if line is not None:
            return child, line
    return None


def resume_hint(run_dir: Path, world: int, every_steps: int | None, every_s: float | None = None) -> str:
    """How to go on after the run stopped for an outage: resume from the checkpoints, or why it cannot."""
    if every_steps is None and every_s is None:
        return ("; the run cannot be resumed: checkpoint.every_steps is null, so it saved no checkpoint (set it to "
                "make a run resumable)")
    missing = [r for r in range(world) if not (run_dir / "checkpoints" / f"rank{r}.pt").is_file()]
    if missing:
        schedule = " and ".join(([f"checkpoint.every_steps {every_steps}"] if every_steps is not None else [])
                                + ([f"checkpoint.every_s {every_s:g}"] if every_s is not None else []))
        return f"; the run cannot be resumed: it stopped before its first checkpoint ({schedule})"
    return f"; continue with --resume {run_dir} once Kafka answers"
