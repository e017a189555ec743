"""A partition whose leader went away, as one client sees it (a replicated topic on a multi-broker cluster).

When the broker that leads a partition dies, the cluster elects a new leader among the partition's in-sync
replicas once the controller notices (KRaft: the broker's session expires, `broker.session.timeout.ms`, 9 s by
default); librdkafka then moves the client's fetches and produce requests to it by itself. Meanwhile the
partition gives nothing: a reader gets no messages and a sender's messages wait in its queue, although the
other brokers answer. A `LeaderWatch` makes that wait visible and bounded:

* `on_error(err)` (a client's `error_cb`): librdkafka says a broker does not answer (`_TRANSPORT`:
  "HOST:PORT/ID: Connect to ... failed", "Disconnected").
* `check(topic)` (the client's loop, at most every CHECK_S seconds once a broker failed): metadata says which
  broker leads `topic`'s partition; when it is the one that failed (or none does), the wait for a new
  leader starts: a warning line naming the topic, the broker and the in-sync replicas, and a wait of the
  process's `Outage` ("waiting for a new leader of TOPIC": announced, recorded and bounded by
  runtime.kafka_outage_s like any outage: KafkaUnavailable past the budget). Another broker leading it ends
  the wait with a line naming it and how long it took; so does `answered()` (a message came, a send was
  acknowledged: the line names the new leader when metadata says who it is, else "it answers again").

An unreplicated topic (replication factor 1) has no replica to elect: the wait lasts until the broker
comes back, or the budget ends it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from edgestream.kafka.admin import admin_client
from edgestream.kafka.outage import BUDGET_FIELD, Outage
from edgestream.kafka.outage_calls import answers

log = logging.getLogger("edgestream.kafka.leader")
log.addHandler(logging.NullHandler())

#: seconds between two metadata requests while a broker failure is pending or a leader is awaited
CHECK_S = 1.0
#: how long one such request may take
METADATA_TIMEOUT_S = 1.0


class LeaderWatch:
    """`metadata(topic, timeout)`: the client's metadata request for `topic` (ClusterMetadata; raises
    KafkaException when no broker answers); `security`: the client settings, to ask the leader itself
    whether it answers before a wait starts (a failure seen just before a whole-cluster outage ended is
    no lost leader). See the module doc."""

    def __init__(self, outage: Outage, metadata: Callable[[str, float], Any], partition: int = 0,
                 security: Mapping[str, str] | None = None) -> None:
        self.outage, self.metadata, self.partition, self.security = outage, metadata, partition, security
        self._lock = threading.Lock()
        self._failed: list[tuple[float, str]] = []   # (monotonic, librdkafka's text) since the last check
        self._next = 0.0
        self.lost: dict | None = None                # the wait for a new leader: topic, node, address, since
        self.changes = 0                             # leader changes waited out

    def on_error(self, err: KafkaError) -> None:
        """A client's error callback: remember a broker that does not answer (never raises)."""
        if err.code() == KafkaError._TRANSPORT:
            with self._lock:
                self._failed = [*self._failed[-19:], (time.monotonic(), err.str())]

    def answered(self) -> None:
        """The partition answered (a message came, a send was acknowledged): a wait for its leader is over. The
        new leader is named when metadata says who it is (one request, at the end of a wait only): messages
        can come from it before the next `check` would have seen it."""
        lost = self.lost
        if lost is None:
            return
        found = self._lookup(lost["topic"])
        leader = found[0].leader if found is not None else -1
        new = leader >= 0 and leader != lost["node"]
        self._end(leader if new else None, found[1] if new else "")

    def _lookup(self, topic: str) -> tuple[Any, str] | None:
        """(`topic`'s partition by metadata, the HOST:PORT of its leader or ""); None when no broker answers."""
        try:
            md = self.metadata(topic, METADATA_TIMEOUT_S)
            part = md.topics[topic].partitions[self.partition]
        except (KafkaException, KeyError, AttributeError):
            return None
        broker = md.brokers.get(part.leader) if part.leader >= 0 else None
        return part, (f"{broker.host}:{broker.port}" if broker is not None else "")

    def check(self, topic: str) -> None:
        """While a broker failure is pending or a leader awaited: ask who leads `topic` (module doc);
        KafkaUnavailable once the wait has lasted the outage's budget."""
        if self.lost is None and not self._failed:
            return
        now = time.monotonic()
        if now < self._next:
            if self.lost is not None:
                self.outage.down(self._what(), since=self.lost["since"])  # only the budget's check
            return
        self._next = now + CHECK_S
        with self._lock:
            failed, self._failed = self._failed, []
        found = self._lookup(topic)
        if found is None:  # no answer at all: the outage's own checks say so
            if self.lost is not None:
                self.outage.down(self._what(), since=self.lost["since"])
            return
        part, address = found
        leader = part.leader
        hit = [(t, text) for t, text in failed if address and address in text]
        if self.lost is None:
            if len(getattr(part, "replicas", None) or []) <= 1:
                return  # an unreplicated partition has no other replica to elect: an outage, the outage's to say
            if leader >= 0 and (not hit or self._answers(address)):
                return  # the broker that failed does not lead this partition, or answers again
            since, text = hit[0] if hit else (failed[0] if failed else (now, ""))
            self.lost = {"topic": topic, "node": leader, "address": address, "since": since,
                         "wall": time.time() - (now - since)}
            who = f"Kafka broker {leader} at {address}" if leader >= 0 else "no broker"
            isr = ", ".join(map(str, sorted(getattr(part, "isrs", []) or []))) or "none"
            log.warning("%s: its leader, %s, does not answer (%s); waiting for the cluster to elect a new leader "
                        "among the in-sync replicas (%s), giving up after %g s (%s)", topic, who,
                        text or "no leader", isr, self.outage.budget_s, BUDGET_FIELD)
        elif leader >= 0 and leader != self.lost["node"]:
            self._end(leader, address)
            return
        self.outage.down(self._what(), since=self.lost["since"])

    def _answers(self, address: str) -> bool:
        """Whether the broker at `address` answers a metadata request of a client of its own."""
        return answers(lambda t: admin_client(address, self.security).list_topics(timeout=t))

    def _what(self) -> str:
        return f"waiting for a new leader of {self.lost['topic']}" if self.lost else ""

    def _end(self, leader: int | None, address: str) -> None:
        lost, self.lost = self.lost, None
        if lost is None:
            return
        self.changes += 1
        took = time.monotonic() - lost["since"]
        now_leads = f"Kafka broker {leader} at {address} leads it now" if leader is not None else "it answers again"
        log.warning("%s: %s (waited %.1f s for a new leader since broker %s stopped answering here); continuing",
                    lost["topic"], now_leads, took, lost["node"] if lost["node"] >= 0 else "(none)")
        self.outage.up()
