"""A trainer's wait for an unreachable Kafka (runtime.kafka_outage_s, edgestream.kafka.outage).

Every Kafka client of the rank (its device stream, injection channel, DLQ, commits, its PS client) reports
into one `Outage`; `OutageRecords` is its listener: each announced wait becomes records in
ranks/<rank>.jsonl, which the orchestrator's live view reads ("waiting for Kafka at HOST:PORT since
HH:MM:SS ...", edgestream.launch.outage):

    {"kind": "wait", "wait_for": "kafka", "state": "start" | "end" | "gave_up", "time", "device", "at_step",
     "bootstrap", "what", "since" (wall clock, s), "budget_s", "outage_s" (end, gave_up)}

The outage's log lines ("waiting for Kafka at ...", "... answers again after N s") go to ranks/<rank>.log
with the rank's other lines; past the budget the rank ends with `give_up_line`.

`collective_timeout_s`: the process group's timeout. A rank that waits for Kafka keeps its peers waiting
in the step's collective, so the group's timeout outlasts the whole budget (the rendezvous keeps its own,
shorter one: the backend negotiation's wait for every rank, before `init_process_group`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edgestream.kafka.outage import BUDGET_FIELD, Outage, OutageInfo


def collective_timeout_s(kafka_outage_s: float, patience_s: float) -> float:
    """How long a collective waits for a peer: the peer's whole Kafka budget plus the usual patience."""
    return float(kafka_outage_s) + float(patience_s)


def give_up_line(rank: int, outage: Outage, step: int) -> str:
    """The rank's one line when Kafka did not answer within the budget: the address, the budget and its
    field, then the step and what the rank was doing."""
    what = f" while {outage.what}" if outage.what else ""
    return (f"device {rank}: no answer from Kafka at {outage.bootstrap} for {outage.budget_s:g} s ({BUDGET_FIELD}); "
            f"gave up at step {step}{what}")


class OutageRecords:
    """The rank's `Outage` listener (see the module doc); records are written once `attach` gave it the
    rank's EventLog (a wait before that, at start-up, is in the log only)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._events: Any = None
        self._now: Callable[[], float] = lambda: 0.0
        self._step: Callable[[], int] = lambda: 0

    def attach(self, events: Any, now: Callable[[], float], step: Callable[[], int]) -> None:
        self._events, self._now, self._step = events, now, step

    def __call__(self, state: str, info: OutageInfo) -> None:
        if self._events is None:
            return
        rec = {"wait_for": "kafka", "state": state, "time": self._now(), "device": self.rank, "at_step": self._step(),
               "bootstrap": info.bootstrap, "what": info.what, "since": info.since, "budget_s": info.budget_s}
        if state != "start":
            rec["outage_s"] = info.length_s
        self._events.record("wait", **rec)
