"""Restarting a producer under an existing run id: pin the run's producer config, find each stream's end.

A run's device streams are a pure function of the producer-relevant config (name, seed, data,
devices.count, rates, variation): sample k of device i is always the same sample, due at the same
point of S_i's schedule. So a producer restarted after a crash continues each device's stream right
after the last sequence number in its topic (`stream_ends`), and a different config under an existing
run id is refused (`claim_run`): the first producer of a run writes its producer config to the
compacted topic `<run>.meta`; every later one compares its own with the first record there. Processes
that split the devices (`--devices`) of one run share the config, so they pass the check.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from edgestream.data.serde import SampleSerde, WireError
from edgestream.kafka.admin import admin_client, create_topics
from edgestream.kafka.clients import consumer_config, producer_config
from edgestream.kafka.layout import StreamLayout
from edgestream.kafka.topic_names import meta_topic
from edgestream.kafka.topic_settings import TopicSettings

#: keys of producer-config records in `<run>.meta`: this prefix + the config's fingerprint, so that
#: compaction keeps one record per distinct config (and never removes the first one)
PRODUCER_KEY = b"producer-config:"
META_VERSION = 1


class RunConfigConflict(ValueError):
    """A producer config that differs from the one the run was started with (one-line message)."""


class ResumeError(RuntimeError):
    """A device topic whose end cannot be read as a sample of this run (one-line message)."""


def fingerprint(doc: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a producer run config."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _flat(doc: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(doc, Mapping):
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: doc}


def first_difference(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    """'devices.rates.rate: 100 here, 200 in the run' for the first field (sorted) that differs."""
    a, b = _flat(ours), _flat(theirs)
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            return f"{key}: {a.get(key, '<unset>')} here, {b.get(key, '<unset>')} in the run"
    return "(no field differs; fingerprints differ)"


def _consumer(bootstrap: str, run: str, security: Mapping[str, str] | None) -> Consumer:
    # assign() only, never subscribe or commit: the group id is required by the client, never joined
    return Consumer(consumer_config(bootstrap, f"{run}.producer-restart", security,
                                    **{"enable.partition.eof": False}))


def _read_meta(bootstrap: str, run: str, security: Mapping[str, str] | None, timeout: float) -> list[dict]:
    """Every producer-config record in `<run>.meta`, oldest first."""
    topic = meta_topic(run)
    c = _consumer(bootstrap, run, security)
    try:
        lo, hi = _watermarks(c, TopicPartition(topic, 0), time.monotonic() + timeout)
        if hi <= lo:
            return []
        c.assign([TopicPartition(topic, 0, lo)])
        records, deadline, last = [], time.monotonic() + timeout, lo - 1
        while last < hi - 1:
            if time.monotonic() > deadline:
                raise ResumeError(f"could not read {topic} (offsets {lo}-{hi - 1}) within {timeout:.0f} s")
            for m in c.consume(100, timeout=0.05):
                if m.error() is not None:
                    continue
                last = max(last, m.offset())
                if (m.key() or b"").startswith(PRODUCER_KEY) and m.value():
                    try:
                        records.append(json.loads(m.value()))
                    except ValueError:
                        pass  # not ours: ignore
        return [r for r in records if isinstance(r, dict) and isinstance(r.get("config"), dict)]
    finally:
        c.close()


def pinned_config(bootstrap: str, run: str, security: Mapping[str, str] | None = None,
                  timeout: float = 30.0) -> dict | None:
    """The producer config run `run` was started with (the first record of `<run>.meta`), None when none."""
    records = _read_meta(bootstrap, run, security, timeout)
    return records[0]["config"] if records else None


def claim_run(bootstrap: str, run: str, doc: Mapping[str, Any], security: Mapping[str, str] | None = None,
              timeout: float = 30.0, *, settings: TopicSettings | None = None) -> bool:
    """Pin `doc` (RunPlan.stream_identity) as the run's producer config, or check it against the pinned one.

    Returns True when this call pinned it (a new run), False when it matched. Raises RunConfigConflict
    naming the first field that differs. Two producers starting a new run at the same moment may both
    write: the first record in the topic wins, and the other one is refused. `settings`: the run's topic
    settings (kafka.topics) the meta topic is created with, or checked against.
    """
    create_topics(bootstrap, {meta_topic(run): 1}, security=security, config={"cleanup.policy": "compact"},
                  timeout=timeout, settings=settings)
    fp = fingerprint(doc)
    records = _read_meta(bootstrap, run, security, timeout)
    pinned = False
    if not records:
        value = json.dumps({"version": META_VERSION, "fingerprint": fp, "config": doc,
                            "created": time.time()}).encode()
        # not idempotent: an idempotent producer's first record waits ~0.5 s for its producer id, on every
        # run's start-up path; a retried duplicate of this one record is harmless (the first record wins)
        p = Producer(producer_config(bootstrap, security, **{"enable.idempotence": False, "linger.ms": 0}))
        errors: list = []
        p.produce(meta_topic(run), key=PRODUCER_KEY + fp.encode(), value=value,
                  on_delivery=lambda err, msg: errors.append(err) if err is not None else None)
        if p.flush(timeout) or errors:
            raise KafkaException(errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT))
        records, pinned = _read_meta(bootstrap, run, security, timeout), True
    first = records[0]
    if fingerprint(first["config"]) != fp:
        raise RunConfigConflict(
            f"run {run} was started with a different producer config ({first_difference(doc, first['config'])}); "
            f"use a new --run-id, or the config the run was started with (stored in topic {meta_topic(run)})")
    return pinned


def stream_ends(bootstrap: str, run: str, devices: Iterable[int], security: Mapping[str, str] | None = None,
                timeout: float = 30.0, layout: StreamLayout | None = None) -> dict[int, int]:
    """The next sequence number of each device's stream: the last message's `seq` + 1 (0 when empty).

    Reads only the last message of each non-empty `<run>.dev.<i>` (its wire header carries the
    per-device sequence number). A topic whose messages were all removed by retention continues at
    its end offset (offsets and sequence numbers coincide in a stream written by producers).
    A partitioned `layout` reads its shared partitions from their ends back (`shared_stream_ends`).
    """
    devices = list(devices)
    if layout is not None and layout.partitioned:
        return shared_stream_ends(bootstrap, layout, devices, security, timeout)
    topics = {StreamLayout(run, len(devices)).stream(d)[0]: d for d in devices}  # per-device: one topic each
    admin = admin_client(bootstrap, security)
    deadline = time.monotonic() + timeout
    lo = _list_offsets(admin, topics, OffsetSpec.earliest(), deadline)
    hi = _list_offsets(admin, topics, OffsetSpec.latest(), deadline)
    ends: dict[int, int] = {}
    todo = {}
    for t, d in topics.items():
        if hi[t] > lo[t]:
            todo[t] = hi[t] - 1
        else:
            ends[d] = hi[t]
    if not todo:
        return ends
    c = _consumer(bootstrap, run, security)
    try:
        c.assign([TopicPartition(t, 0, off) for t, off in todo.items()])
        while todo:
            if time.monotonic() > deadline:
                raise ResumeError(f"could not read the last message of {', '.join(sorted(todo)[:3])} "
                                  f"within {timeout:.0f} s")
            for m in c.consume(len(todo), timeout=0.05):
                if m.error() is not None or todo.get(m.topic()) != m.offset():
                    continue
                d = topics[m.topic()]
                try:
                    sample = SampleSerde.header(m.value())
                except WireError as exc:
                    raise ResumeError(f"cannot continue {m.topic()}: its last message (offset {m.offset()}) is "
                                      f"not a sample ({exc}); use a new --run-id") from None
                if sample.device != d:
                    raise ResumeError(f"cannot continue {m.topic()}: its last message (offset {m.offset()}) is "
                                      f"from device {sample.device}; use a new --run-id")
                ends[d] = sample.seq + 1
                del todo[m.topic()]
    finally:
        c.close()
    return ends


#: errors of a topic that was just created and whose leader is not known everywhere yet (a new
#: partition's leader epoch can reach the client before the broker has it: UNKNOWN_LEADER_EPOCH)
_NOT_READY = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
              KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH,
              KafkaError._UNKNOWN_PARTITION,
              KafkaError._NOENT)  # the admin client's "Failed to query partition leaders: No leaders found" (a cluster
                                  # whose broker answering this client has not yet learnt the new topic's leader)


def _watermarks(c: Consumer, tp: TopicPartition, deadline: float) -> tuple[int, int]:
    """(low, high) of `tp`, retrying while a just-created topic's leader is not ready (_NOT_READY)."""
    while True:
        try:
            return c.get_watermark_offsets(tp, timeout=max(0.5, deadline - time.monotonic()))
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_READY or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _list_offsets(admin, topics: Iterable, spec, deadline: float) -> dict:
    """One offset (earliest or latest) per single-partition topic (a name), or per (topic, partition) pair,
    keyed as given, in one request per try."""
    todo, out = list(topics), {}
    while todo:
        keys = {(k if isinstance(k, tuple) else (k, 0)): k for k in todo}
        futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in keys},
                                     request_timeout=max(1.0, deadline - time.monotonic()))
        retry = []
        for tp, fut in futures.items():
            key = keys[(tp.topic, tp.partition)]
            try:
                out[key] = fut.result().offset
            except KafkaException as exc:
                if exc.args[0].code() not in _NOT_READY or time.monotonic() > deadline:
                    raise
                retry.append(key)
        todo = retry
        if todo:
            time.sleep(0.05)
    return out


#: how many messages of a shared partition `shared_stream_ends` reads per step back from its end
TAIL_STEP = 2000


def shared_stream_ends(bootstrap: str, layout: StreamLayout, devices: Iterable[int],
                       security: Mapping[str, str] | None = None, timeout: float = 30.0) -> dict[int, int]:
    """`stream_ends` of a partitioned layout: each device's next sequence number, from its last message in its
    partition of `<run>.streams`, found by reading the partition back from its end TAIL_STEP messages at a
    time until every asked device of it was seen (0 when the partition holds none of its messages)."""
    topic = layout.stream(0)[0]
    wanted: dict[int, dict[bytes, int]] = {}
    for d in devices:
        wanted.setdefault(layout.partition(d), {})[layout.key(d)] = d
    admin = admin_client(bootstrap, security)
    deadline = time.monotonic() + timeout
    lo = _list_offsets(admin, [(topic, p) for p in wanted], OffsetSpec.earliest(), deadline)
    hi = _list_offsets(admin, [(topic, p) for p in wanted], OffsetSpec.latest(), deadline)
    ends: dict[int, int] = {}
    todo = {p: dict(keys) for p, keys in wanted.items()}       # partition -> key -> device, not found yet
    pos = {p: hi[(topic, p)] for p in wanted}                    # read back from here
    c = _consumer(bootstrap, layout.run, security)
    try:
        while any(todo[p] and pos[p] > lo[(topic, p)] for p in todo):
            ranges = {p: (max(lo[(topic, p)], pos[p] - TAIL_STEP), pos[p]) for p in todo
                      if todo[p] and pos[p] > lo[(topic, p)]}
            got = _read_ranges(c, topic, ranges, deadline)
            for p, messages in got.items():
                last: dict[int, bytes] = {}  # device -> value of its newest message in the range
                for m in messages:
                    d = todo[p].get(m.key())
                    if d is not None:
                        last[d] = m.value()
                for d, value in last.items():
                    ends[d] = _next_seq(value, d, f"{topic} partition {p}")
                    del todo[p][layout.key(d)]
                pos[p] = ranges[p][0]
    finally:
        c.close()
    for p, keys in todo.items():
        if keys and lo[(topic, p)] > 0:
            raise ResumeError(f"cannot continue devices {sorted(keys.values())[:5]} in {topic} partition {p}: "
                              "retention removed their messages; use a new --run-id")
        ends.update(dict.fromkeys(keys.values(), 0))
    return ends


def _next_seq(value: bytes, device: int, where: str) -> int:
    """The sequence number after device `device`'s last message `value` in `where`."""
    try:
        sample = SampleSerde.header(value)
    except WireError as exc:
        raise ResumeError(f"cannot continue device {device} in {where}: its last message is not a sample ({exc}); "
                          "use a new --run-id") from None
    if sample.device != device:
        raise ResumeError(f"cannot continue device {device} in {where}: its last message is from device "
                          f"{sample.device}; use a new --run-id")
    return sample.seq + 1


def _read_ranges(c: Consumer, topic: str, ranges: dict[int, tuple[int, int]], deadline: float) -> dict[int, list]:
    """The messages at offsets [start, end) of each partition of `ranges` (partition -> (start, end)), read
    with one assignment."""
    c.assign([TopicPartition(topic, p, start) for p, (start, _) in ranges.items()])
    out: dict[int, list] = {p: [] for p in ranges}
    left = set(ranges)
    while left:
        if time.monotonic() > deadline:
            p = min(left)
            raise ResumeError(f"could not read {topic} partition {p} (offsets {ranges[p][0]}-{ranges[p][1] - 1}) "
                              "in time")
        for m in c.consume(5000, timeout=0.05):
            p = m.partition()
            if m.error() is not None or p not in left or m.offset() < ranges[p][0]:
                continue
            if m.offset() < ranges[p][1]:
                out[p].append(m)
            if m.offset() >= ranges[p][1] - 1:
                left.discard(p)
    c.unassign()
    return out
