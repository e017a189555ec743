"""Topic administration: create a run's topics idempotently, list and delete them, check reachability."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from edgestream.kafka.broker import MAX_MESSAGE_BYTES
from edgestream.kafka.clients import admin_client, admin_config  # admin_client: also handed on from here
from edgestream.kafka.security import RefusalWatch
from edgestream.kafka.topic_check import TopicMismatch, mismatches, unprovisioned

if TYPE_CHECKING:
    from edgestream.kafka.topic_settings import TopicSettings


class KafkaUnavailable(RuntimeError):
    """The broker at a bootstrap address did not answer after retries."""


class WaitInterrupted(RuntimeError):
    """`should_stop()` turned true while waiting for a broker (e.g. Ctrl-C); the message names the address."""


def _sleep_until(deadline: float, should_stop: Callable[[], bool], bootstrap: str, slice_s: float = 0.1) -> None:
    while True:
        if should_stop():
            raise WaitInterrupted(f"interrupted while waiting for a Kafka broker at {bootstrap}")
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(slice_s, left))


def wait_for_broker(bootstrap: str, security: Mapping[str, str] | None = None, *, attempts: int = 5,
                    first_backoff_s: float = 0.5, should_stop: Callable[[], bool] | None = None,
                    poll_s: float = 0.5) -> None:
    """Retry cluster metadata with exponential backoff; KafkaUnavailable names the address otherwise.

    Attempt i waits up to max(2 s, backoff_i) for an answer, then sleeps backoff_i (0.5, 1, 2, 4 s):
    about 26 s in all with the defaults. Every wait is cut into slices of at most `poll_s` seconds
    and `should_stop()` is checked between them, so a Ctrl-C handler that sets a flag ends the wait
    promptly (WaitInterrupted) instead of after the whole backoff schedule. A broker that answers but refuses
    the client (authentication failed, its certificate not trusted) raises KafkaRefused (one line) at once.
    """
    stop = should_stop or (lambda: False)
    refused = RefusalWatch(bootstrap)
    admin = AdminClient(admin_config(bootstrap, security, log_level=0, error_cb=refused))
    backoff, last = first_backoff_s, None
    for attempt in range(attempts):
        deadline = time.monotonic() + max(2.0, backoff)
        while True:
            _sleep_until(0.0, stop, bootstrap)  # only the stop check
            started = time.monotonic()
            try:
                if admin.list_topics(timeout=max(0.05, min(poll_s, deadline - started))).brokers:
                    return
            except KafkaException as exc:
                last = exc
            admin.poll(0)  # serves error_cb
            refused.check()
            if time.monotonic() >= deadline:
                break
            # a refused connection fails at once: do not spin, wait out the rest of this slice
            _sleep_until(min(deadline, started + poll_s), stop, bootstrap)
        if attempt < attempts - 1:
            _sleep_until(time.monotonic() + backoff, stop, bootstrap)
            backoff *= 2
    raise KafkaUnavailable(f"no Kafka broker answered at {bootstrap} after {attempts} attempts"
                           + (f" ({last})" if last else "") + "; check the address, or leave bootstrap unset "
                           "to use the managed local broker")


def create_topics(bootstrap: str, topics: Mapping[str, int] | Iterable[str], *,
                  max_message_bytes: int = MAX_MESSAGE_BYTES, security: Mapping[str, str] | None = None,
                  config: Mapping[str, str] | None = None, timeout: float = 30.0,
                  settings: TopicSettings | None = None) -> list[str]:
    """Create topics (name -> partitions, or names with 1 partition) unless they exist; return those created.

    Topic-level `max.message.bytes` is set explicitly; auto-creation is never relied on. `settings` (the run's
    resolved kafka.topics, edgestream.kafka.topic_settings): the replication factor and topic configs
    (min.insync.replicas, retention, unclean.leader.election.enable=false) of every topic created, and an
    existing topic with another partition count or other such settings is refused (TopicMismatch, one line
    per topic); with `settings.create` false nothing is created and each topic must exist with its
    partition count (TopicMismatch otherwise). Without `settings`: replication factor 1, existing topics
    reused as they are (tests, benchmarks).
    """
    wanted = dict(topics) if isinstance(topics, Mapping) else {t: 1 for t in topics}
    if not wanted:
        return []
    admin = admin_client(bootstrap, security)
    md = admin.list_topics(timeout=timeout)
    if settings is not None and not settings.create:
        problems = unprovisioned(md, wanted)
        if problems:
            raise TopicMismatch(problems)
        _wait_visible(admin, list(wanted), timeout)
        return []
    existing = set(md.topics)
    todo = [t for t in wanted if t not in existing]
    rf = 1 if settings is None else settings.replication_factor
    wanted_config = dict(settings.topic_config() if settings is not None else {}) | dict(config or {})
    if settings is not None and len(todo) < len(wanted):
        problems = mismatches(admin, md, {t: wanted[t] for t in wanted if t in existing}, rf, wanted_config,
                              timeout)
        if problems:
            raise TopicMismatch(problems)
    topic_config = {"max.message.bytes": str(max_message_bytes)} | wanted_config
    created: list[str] = []
    for batch in _create_batches(todo, wanted, len(topic_config)):
        futures = admin.create_topics([NewTopic(t, num_partitions=wanted[t], replication_factor=rf,
                                                config=topic_config) for t in batch], operation_timeout=timeout)
        for name, fut in futures.items():
            try:
                fut.result()
                created.append(name)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    _wait_visible(admin, list(wanted), timeout, sum(wanted[t] for t in created) * rf)
    return created


#: metadata records one CreateTopics request may make: a KRaft controller refuses a request of more than 10,000
#: ("Unable to perform excessively large batch operation": a per-device run of 1,000 devices, 2,001 topics)
MAX_CREATE_RECORDS = 5000


def _create_batches(todo: list[str], partitions: Mapping[str, int], configs: int) -> list[list[str]]:
    """`todo` cut into CreateTopics requests of at most MAX_CREATE_RECORDS records each (a topic makes one
    record, one per partition and one per config)."""
    batches: list[list[str]] = []
    size = MAX_CREATE_RECORDS
    for t in todo:
        records = 1 + partitions[t] + configs
        if size + records > MAX_CREATE_RECORDS:
            batches.append([])
            size = 0
        batches[-1].append(t)
        size += records
    return batches


#: how long a cluster may take per partition replica to make a topic ready, on top of a call's timeout: a
#: per-device run of 1,000 devices (2,001 topics) took 50 s on one loaded broker, of 5,000 devices 146 s
READY_S_PER_REPLICA = 0.05


def _wait_visible(admin: AdminClient, names: list[str], timeout: float, replicas: int = 0) -> None:
    """Wait until every topic of `names` is listed with a leader for each partition: `timeout`, plus
    READY_S_PER_REPLICA per partition replica created (`replicas`), since a controller makes them one by one."""
    budget = timeout + READY_S_PER_REPLICA * replicas
    deadline = time.monotonic() + budget
    while True:
        md = admin.list_topics(timeout=timeout)
        missing = [n for n in names if n not in md.topics or md.topics[n].error is not None
                   or any(p.leader < 0 for p in md.topics[n].partitions.values())]
        if not missing:
            return
        if time.monotonic() > deadline:
            many = " (a run of this many device streams is faster with kafka.topics.layout: partitioned)" \
                if len(names) > 500 else ""
            raise KafkaUnavailable(f"{len(missing)} of {len(names)} topics not ready after {budget:.0f} s: "
                                   f"{', '.join(missing[:5])}{many}")
        time.sleep(0.1 if len(names) < 100 else 1.0)


def list_topics(bootstrap: str, prefix: str = "", security: Mapping[str, str] | None = None) -> list[str]:
    md = admin_client(bootstrap, security).list_topics(timeout=30)
    return sorted(t for t in md.topics if t.startswith(prefix) and not t.startswith("__"))


def delete_topics(bootstrap: str, names: Iterable[str], security: Mapping[str, str] | None = None,
                  timeout: float = 30.0) -> list[str]:
    names = list(names)
    if not names:
        return []
    admin = admin_client(bootstrap, security)
    deleted = []
    for name, fut in admin.delete_topics(names, operation_timeout=timeout).items():
        try:
            fut.result()
            deleted.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
    return deleted


def delete_run_topics(bootstrap: str, run: str, security: Mapping[str, str] | None = None) -> list[str]:
    """Delete every topic of a run (`<run>.dev.*`, `.inj.*`, `.dlq`, `.ps.*`)."""
    return delete_topics(bootstrap, list_topics(bootstrap, f"{run}.", security), security)
