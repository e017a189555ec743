"""Kafka clients through an outage (edgestream.kafka.outage): the parameter server's, its workers' and
the producer's ways of telling their `Outage` what they see, and of saying it.

* `Probe`: while a wait runs, ask Kafka every PROBE_S seconds whether it answers again (a metadata
  request of at most PROBE_TIMEOUT_S): an answer ends the wait, none continues it (KafkaUnavailable once
  it has lasted the budget). A client that is only waiting for messages sees no other sign of the end.
* `call_through(outage, fn, what)`: a call retried through an outage.
* `wait_until_answers`: a process (re)started while Kafka is away waits for it within the budget.
* `Wedge`: whether a client that gets no answer is wedged while Kafka answers others (reopen or replace it).
* `WaitLines`: an `Outage` listener that says each wait on a line (stderr: the child's .out file) and
  writes it to the process's event file, in the shape the trainers use (edgestream.trainer.outage):
  {"kind": "wait", "wait_for": "kafka", "state": "start" | "end" | "gave_up", "time", "who", "bootstrap",
  "what", "since" (wall clock, s), "budget_s", "outage_s" (end, gave_up)}; it counts the waits.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from edgestream.kafka.admin import KafkaUnavailable, WaitInterrupted, admin_client
from edgestream.kafka.outage import BUDGET_FIELD, Outage, OutageInfo

#: seconds between two "does Kafka answer again?" questions while a process waits
PROBE_S = 2.0
#: how long one such question may take
PROBE_TIMEOUT_S = 1.0
#: an outage this long before a client without answers is checked for being wedged (`Wedge`); also the least
#: time between two such checks
REOPEN_AFTER_S = 10.0
#: errors no wait cures (wrong credentials, no permission, a bad setting): raised at once
NOT_RETRIABLE = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.TOPIC_AUTHORIZATION_FAILED,
                           KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED,
                           KafkaError._INVALID_ARG, KafkaError.CLUSTER_AUTHORIZATION_FAILED})


def retriable(err: KafkaError) -> bool:
    """Whether waiting can cure `err` (a broker down, a leader moving), as opposed to a wrong setting."""
    return not (err.fatal() or err.code() in NOT_RETRIABLE)


def all_brokers_down(err: KafkaError) -> bool:
    """Whether a client's error callback says every broker is down (the start of an outage)."""
    return err.code() == KafkaError._ALL_BROKERS_DOWN


def on_client_error(outage: Outage, err: KafkaError, what: str) -> None:
    """A client's `error_cb`: "all brokers down" starts a wait. Never raises (an exception in a callback
    would come out of whatever poll, flush or close served it): the client's next check does."""
    if all_brokers_down(err) and not outage.waiting:
        try:
            outage.down(what, error=err.str())
        except KafkaUnavailable:
            pass


def answers(probe: Callable[[float], Any]) -> bool:
    """Whether `probe(PROBE_TIMEOUT_S)` (a metadata request) got an answer naming a broker."""
    try:
        md = probe(PROBE_TIMEOUT_S)
    except KafkaException:
        return False
    brokers = getattr(md, "brokers", None)
    return brokers is None or bool(brokers)


def fresh_answers(bootstrap: str, security: Mapping[str, str] | None = None) -> bool:
    """Whether Kafka answers a new client's metadata request (a long-lived client's own may be wedged)."""
    return answers(lambda t: admin_client(bootstrap, security).list_topics(timeout=t))


class Wedge:
    """After a broker restart, librdkafka 2.16's clients sometimes never reconnect (no error, no answer,
    while a new client gets one at once: edgestream.kafka.replaceable_producer). `wedged(outage, own)`:
    whether a client counts as wedged -- the outage has lasted REOPEN_AFTER_S (or `after_s`), its own metadata request
    (`own(timeout)`; None: it has just got none) gets no answer, and a new client's does. Asked at most
    every REOPEN_AFTER_S."""

    def __init__(self, bootstrap: str, security: Mapping[str, str] | None = None) -> None:
        self.bootstrap, self.security = bootstrap, security
        self._asked = -float("inf")

    def wedged(self, outage: Outage, own: Callable[[float], Any] | None = None, *,
               after_s: float | None = None) -> bool:
        """`after_s`: the outage it takes (default REOPEN_AFTER_S)."""
        now = time.monotonic()
        if (outage.length_s() < (REOPEN_AFTER_S if after_s is None else after_s)
                or now - self._asked < REOPEN_AFTER_S):
            return False
        self._asked = now
        if own is not None and answers(own):
            return False
        return fresh_answers(self.bootstrap, self.security)


class Probe:
    """`probe(timeout)`: a client's metadata request (raises KafkaException when Kafka does not answer)."""

    def __init__(self, probe: Callable[[float], Any]) -> None:
        self.probe = probe
        self._next = 0.0

    def tick(self, outage: Outage, what: str) -> None:
        """While `outage` waits: every PROBE_S seconds ask; an answer ends the wait, else `down` (which
        raises KafkaUnavailable once the wait has lasted the budget)."""
        if not outage.waiting:
            return
        now = time.monotonic()
        if now < self._next:
            outage.down(what)  # only the budget's check
            return
        self._next = now + PROBE_S
        if answers(self.probe):
            outage.up()
        else:
            outage.down(what)


def call_through(outage: Outage, fn: Callable[[], Any], what: str, *,
                 should_stop: Callable[[], bool] | None = None) -> Any:
    """`fn()`, retried through an outage: a retriable KafkaException (or a KafkaUnavailable of a call with
    its own deadline) starts or continues a wait; KafkaUnavailable once it has lasted the budget. Errors
    no wait cures raise at once; `should_stop()` true ends the retries with the last error."""
    backoff = 0.2
    while True:
        try:
            result = fn()
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if (err is not None and not retriable(err)) or (should_stop is not None and should_stop()):
                raise
            outage.down(what, error=err.str() if err is not None else str(exc))
        except KafkaUnavailable as exc:
            if should_stop is not None and should_stop():
                raise
            outage.down(what, error=str(exc))
        else:
            outage.up()
            return result
        time.sleep(min(backoff, max(0.05, outage.left())))
        backoff = min(2 * backoff, PROBE_S)


def wait_until_answers(bootstrap: str, outage: Outage, security: Mapping[str, str] | None = None, *,
                       should_stop: Callable[[], bool] | None = None) -> None:
    """Return once Kafka at `bootstrap` answers a metadata request, waiting through an outage within its
    budget (KafkaUnavailable past it); WaitInterrupted when `should_stop()` turns true."""
    admin = admin_client(bootstrap, security)
    started = time.monotonic()
    while True:
        if should_stop is not None and should_stop():
            raise WaitInterrupted(f"interrupted while waiting for a Kafka broker at {bootstrap}")
        if answers(lambda t: admin.list_topics(timeout=max(t, 2.0))):
            outage.up()
            return
        outage.down("connecting", since=started)
        time.sleep(min(PROBE_TIMEOUT_S, max(0.05, outage.left())))


class WaitLines:
    """An `Outage` listener (module doc): `who` names the process on its lines; `record(kind, **fields)`
    (an EventLog's, set once the file is open) and `now()` (the time field) write the records; `echo`
    says the lines (default: stderr)."""

    def __init__(self, who: str, *, echo: Callable[[str], Any] | None = None) -> None:
        self.who = who
        self.echo = echo if echo is not None else (lambda m: print(m, file=sys.stderr, flush=True))
        self.record: Callable[..., Any] | None = None
        self.now: Callable[[], float] = lambda: 0.0
        self.waits = 0              # waits started
        self.waited_s = 0.0         # seconds of the waits that ended (or gave up)
        self.current: OutageInfo | None = None

    def __call__(self, state: str, info: OutageInfo) -> None:
        if state == "start":
            self.waits += 1
            self.current = info
            self.echo(f"{self.who}: waiting for Kafka at {info.bootstrap} (no answer since "
                      f"{time.strftime('%H:%M:%S', time.localtime(info.since))}); giving up after "
                      f"{info.budget_s:g} s ({BUDGET_FIELD})")
        else:
            self.waited_s += info.length_s
            self.current = None
            if state == "end":
                self.echo(f"{self.who}: Kafka at {info.bootstrap} answers again after {info.length_s:.0f} s; "
                          "continuing")
        if self.record is not None:
            rec = {"wait_for": "kafka", "state": state, "time": self.now(), "who": self.who,
                   "bootstrap": info.bootstrap, "what": info.what, "since": info.since, "budget_s": info.budget_s}
            if state != "start":
                rec["outage_s"] = info.length_s
            self.record("wait", **rec)

    def total_s(self, outage: Outage) -> float:
        """Seconds waited in all, the current wait included."""
        return self.waited_s + outage.length_s()
