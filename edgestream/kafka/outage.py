"""Riding out a Kafka outage: how long a process has waited for an unreachable Kafka. One `Outage` per
process and bootstrap address, shared by all of its clients (a trainer's device stream, injection channel,
DLQ and commits, its PS client; the producer's; the parameter server's: edgestream.kafka.outage_calls).

Clients tell it what they see: Kafka does not answer (`down(what)`: librdkafka's "all brokers down", a
call that failed, a flush without progress), or answers (`up()`: a message, a delivery report, a metadata
reply). The first call without an answer starts an outage, any answer ends it. Every call measures against
the outage's start, not its own: a process waits `budget_s` (runtime.kafka_outage_s) in all, however many
calls it retries meanwhile; a call that still gets no answer then raises KafkaUnavailable with one line
(`message`) naming the address and the budget. `hurry()` (a process that is ending anyway): every later
call without an answer gives up at once.

An outage is announced once it has lasted ANNOUNCE_S (shorter blips, a coordinator loading or a leader
moving, are retried silently): a warning in the log (logger edgestream.kafka.outage) and
`listener("start", info)`; its end with its length (`listener("end", info)`); the budget running out with
`listener("gave_up", info)` (an error line in the log); that wait is then over (a later call that gets
no answer starts a new one, unless the process hurried). `OutageInfo` is what a listener gets; the trainer
writes it into its rank file (edgestream.trainer.outage), the PS and the producer into theirs
(edgestream.kafka.outage_calls.WaitLines).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from edgestream.kafka.admin import KafkaUnavailable

log = logging.getLogger("edgestream.kafka.outage")
log.addHandler(logging.NullHandler())  # a library's lines: shown where the application attaches a handler

#: the config field that sets the budget (named in every line about it)
BUDGET_FIELD = "runtime.kafka_outage_s"
#: an outage is announced once it has lasted this long (seconds)
ANNOUNCE_S = 2.0


@dataclass(frozen=True)
class OutageInfo:
    """One wait as a listener sees it: the address, what was being done when Kafka stopped answering,
    since when (wall clock, time.time()), the budget and how long it has lasted (s)."""

    bootstrap: str
    what: str
    since: float
    budget_s: float
    length_s: float

    @property
    def since_hms(self) -> str:
        return time.strftime("%H:%M:%S", time.localtime(self.since))


class Outage:
    """One process's wait for Kafka at `bootstrap` (module doc). Thread-safe: a timer thread's commit or
    a client's callback and the main thread report into the same outage. `field`: what sets the budget, as
    its lines name it (a run's config field; a DeviceProducer's argument)."""

    def __init__(self, bootstrap: str, budget_s: float, *,
                 listener: Callable[[str, OutageInfo], None] | None = None, field: str = BUDGET_FIELD) -> None:
        if not budget_s > 0:
            raise ValueError(f"{field}: {budget_s} is not allowed; must be > 0")
        self.bootstrap, self.budget_s, self.listener, self.field = bootstrap, float(budget_s), listener, field
        self._lock = threading.RLock()
        self.since: float | None = None     # monotonic start of the current outage
        self._wall = 0.0                    # the same moment on the wall clock
        self.what = ""                      # what the process was doing when Kafka stopped answering
        self._announced = False
        self._answered_at = -float("inf")   # monotonic time of the last answer
        self.hurried = False

    # ------------------------------------------------------------------ state
    @property
    def waiting(self) -> bool:
        return self.since is not None

    def length_s(self) -> float:
        """Seconds the current outage has lasted (0 when none)."""
        since = self.since
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    def left(self) -> float:
        """Seconds of the budget left (the whole budget while Kafka answers; 0 once hurried)."""
        return 0.0 if self.hurried else max(0.0, self.budget_s - self.length_s())

    def info(self) -> OutageInfo:
        return OutageInfo(self.bootstrap, self.what, round(self._wall if self.since is not None else time.time(), 3),
                          self.budget_s, round(self.length_s(), 3))

    def hurry(self) -> None:
        """The process is ending: every later call without an answer gives up at once."""
        self.hurried = True

    def message(self, what: str = "") -> str:
        """The one line of a give-up: the address, the budget and its field, what the process was doing."""
        what = what or self.what
        return (f"no answer from Kafka at {self.bootstrap} for {self.budget_s:g} s ({self.field})"
                + (f" while {what}" if what else ""))

    # ------------------------------------------------------------------ reports from the clients
    def down(self, what: str = "", *, since: float | None = None, error: str = "") -> None:
        """A call got no answer while `what` (e.g. "reading <topic>"; `since`: when the client noticed,
        monotonic, if earlier than now). KafkaUnavailable once the outage is as old as the budget (at once
        when hurried)."""
        events: list[str] = []
        with self._lock:
            now = time.monotonic()
            if self.since is None:
                start = now if since is None else min(now, max(since, self._answered_at))
                self.since, self._wall, self.what = start, time.time() - (now - start), what
            elapsed = now - self.since
            if not self._announced and elapsed >= ANNOUNCE_S and not self.hurried:
                self._announced = True
                events.append("start")
            over = self.hurried or elapsed >= self.budget_s
            if over and not self.hurried:
                events.append("gave_up")
            info, line = self.info(), self.message()
            if over:  # this wait is over: a later call starts a new one (a process that is ending: hurry())
                self.since, self._announced = None, False
        for state in events:
            if state == "start":
                log.warning("waiting for Kafka at %s since %s (%s; giving up after %g s, %s)%s", info.bootstrap,
                            info.since_hms, info.what or "a call", info.budget_s, self.field,
                            f": {error}" if error else "")
            else:
                log.error("%s (waited since %s)", line, info.since_hms)
            self._tell(state, info)
        if over:
            raise KafkaUnavailable(line)

    def up(self) -> None:
        """A call got an answer: the outage (if any) ends."""
        if self.since is None:  # the common case, without the lock
            self._answered_at = time.monotonic()
            return
        with self._lock:
            self._answered_at = time.monotonic()
            if self.since is None:
                return
            info, announced = self.info(), self._announced
            self.since, self._announced = None, False
        if announced:
            log.warning("Kafka at %s answers again after %.1f s (waited since %s while %s)", info.bootstrap,
                        info.length_s, info.since_hms, info.what or "a call")
            self._tell("end", info)

    def _tell(self, state: str, info: OutageInfo) -> None:
        if self.listener is None:
            return
        try:
            self.listener(state, info)
        except Exception:  # noqa: BLE001 - a listener's failure (a closed or full event file) must not hide the wait
            log.exception("could not record the outage (%s)", state)
