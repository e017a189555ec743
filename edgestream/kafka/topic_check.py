"""Existing topics against what a run wants: read back (admin API), compare, and name each difference.

A run never silently reuses a topic with other settings: `mismatches` gives one line per topic naming the
settings that differ, what the topic has and what the run wants (partition count, replication factor,
min.insync.replicas, retention, unclean leader election). With `kafka.topics.create: false` nothing is
created and `unprovisioned` names each topic the run needs that is missing or has another partition count.
`read_back` is what the run directory's topics.json records.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

#: a setting of a topic -> the config field that decides it (named in the lines)
FIELDS = {"min.insync.replicas": "kafka.topics.min_insync_replicas",
          "retention.ms": "kafka.topics.retention_ms", "retention.bytes": "kafka.topics.retention_bytes",
          "unclean.leader.election.enable": "always false for a run's topics",
          "cleanup.policy": "the run's meta topic is compacted"}
#: topic-level configs topics.json records
RECORDED = ("min.insync.replicas", "unclean.leader.election.enable", "retention.ms", "retention.bytes",
            "max.message.bytes", "cleanup.policy")
#: at most this many lines are named; the rest are counted
MAX_LINES = 20
#: answers of a broker that has not yet learnt of a topic just created (a cluster's brokers learn of it one
#: after the other): asked again until the call's timeout
NOT_YET = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._UNKNOWN_TOPIC,
           KafkaError._UNKNOWN_PARTITION, KafkaError._NOENT)


class TopicMismatch(ValueError):
    """Topics that exist with other settings, or (create: false) are missing: `lines`, one per topic."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = capped(lines)
        super().__init__("\n".join(self.lines))


def capped(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_LINES:
        return list(lines)
    return lines[:MAX_LINES] + [f"... and {len(lines) - MAX_LINES} more topic(s) like these"]


def partition_counts(md: Any, names: Iterable[str]) -> dict[str, int]:
    """Topic -> partition count, for the `names` the cluster metadata `md` (list_topics) has (a topic whose
    partitions are listed exists, even while one has no leader: a broker of a cluster lost)."""
    return {n: len(md.topics[n].partitions) for n in names if n in md.topics and md.topics[n].partitions}


def replication(md: Any, name: str) -> int:
    """The replication factor of topic `name` in metadata `md` (its smallest partition's replica count)."""
    parts = md.topics[name].partitions.values()
    return min((len(p.replicas) for p in parts), default=0)


def topic_configs(admin: AdminClient, names: Iterable[str], timeout: float = 30.0,
                  keys: Iterable[str] = RECORDED) -> dict[str, dict[str, str]]:
    """Topic -> {config: value} of `keys` (the effective values: topic overrides or the broker's defaults)."""
    todo, keys = list(names), tuple(keys)
    deadline = time.monotonic() + timeout
    out: dict[str, dict[str, str]] = {}
    while todo:
        futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in todo],
                                         request_timeout=timeout)
        todo = []
        for res, fut in futures.items():
            try:
                entries = fut.result()
            except KafkaException as exc:
                if exc.args[0].code() not in NOT_YET or time.monotonic() > deadline:
                    raise
                todo.append(res.name)
                continue
            out[res.name] = {k: entries[k].value for k in keys if k in entries and entries[k].value is not None}
        if todo:
            time.sleep(0.1)
    return out


def mismatches(admin: AdminClient, md: Any, wanted: Mapping[str, int], replication_factor: int,
               config: Mapping[str, str], timeout: float = 30.0) -> list[str]:
    """One line per existing topic of `wanted` (name -> partitions) whose partition count, replication factor
    or one of `config`'s settings differs from what the run wants."""
    counts = partition_counts(md, wanted)
    configs = topic_configs(admin, counts, timeout, keys=config)
    lines = []
    for name, has in counts.items():
        diffs = []
        if has != wanted[name]:
            diffs.append(f"{has} partition(s), this run wants {wanted[name]}")
        rf = replication(md, name)
        if rf != replication_factor:
            diffs.append(f"replication factor {rf}, this run wants {replication_factor} "
                         "(kafka.topics.replication_factor)")
        for key, want in config.items():
            got = configs.get(name, {}).get(key)
            if got is not None and got != want:
                diffs.append(f"{key}={got}, this run wants {want} ({FIELDS.get(key, 'the run')})")
        if diffs:
            lines.append(f"topic {name} exists with " + "; ".join(diffs) + ": a run does not reuse a topic with "
                         "other settings (delete it, use another run id, or set kafka.topics to match it)")
    return lines


def unprovisioned(md: Any, wanted: Mapping[str, int]) -> list[str]:
    """`kafka.topics.create: false`: one line per topic of `wanted` that is missing or mis-partitioned."""
    counts = partition_counts(md, wanted)
    lines = []
    for name, n in wanted.items():
        if name not in counts:
            lines.append(f"topic {name} does not exist: kafka.topics.create is false, so an administrator must "
                         f"create it ({n} partition(s))")
        elif counts[name] != n:
            lines.append(f"topic {name} has {counts[name]} partition(s); the run needs {n} (kafka.topics.create is "
                         "false: an administrator must create it with that many)")
    return lines


def read_back(admin: AdminClient, names: Iterable[str], timeout: float = 30.0) -> dict[str, dict[str, Any]]:
    """Topic -> its partition count, replication factor and RECORDED configs, as the cluster reports them
    (configs left out where describing them is not allowed)."""
    names = sorted(names)
    deadline = time.monotonic() + timeout
    while True:  # a topic just created may not be known yet to the broker that answers
        md = admin.list_topics(timeout=timeout)
        counts = partition_counts(md, names)
        if len(counts) == len(names) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    try:
        configs = topic_configs(admin, counts, timeout)
    except KafkaException:  # no DescribeConfigs right (an ACL-restricted client): partitions and replicas only
        configs = {}
    return {n: {"partitions": c, "replication_factor": replication(md, n), **configs.get(n, {})}
            for n, c in counts.items()}
