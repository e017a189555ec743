"""Where a run's device streams stand, read from Kafka: the producer config the run was started with (pinned in
the compacted topic `<run>.meta`) and each device stream's end (its next sequence number).

A producer restarted under an existing run id continues each device's stream right after its last sample
(edgestream.producers.restart pins the config and checks it); `edgestream status` reads the same two things of
a partitioned run (status_shared.py). Read-only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from edgestream.data.serde import SampleSerde, WireError
from edgestream.kafka.admin import admin_client
from edgestream.kafka.clients import consumer_config
from edgestream.kafka.layout import StreamLayout
from edgestream.kafka.topic_names import meta_topic

#: keys of producer-config records in `<run>.meta`: this prefix + the config's fingerprint, so that
#: compaction keeps one record per distinct config (and never removes the first one)
PRODUCER_KEY = b"producer-config:"
#: the format version of the producer-config records (producers/restart.py writes them)
META_VERSION = 1


class ResumeError(RuntimeError):
    """A device topic whose end cannot be read as a sample of this run (one-line message)."""


def _consumer(bootstrap: str, run: str, security: Mapping[str, str] | None) -> Consumer:
    # assign() only, never subscribe or commit: the group id is required by the client, never joined
    return Consumer(consumer_config(bootstrap, f"{run}.producer-restart", security,
                                    **{"enable.partition.eof": False}))


def meta_records(bootstrap: str, run: str, security: Mapping[str, str] | None, timeout: float) -> list[dict]:
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
    records = meta_records(bootstrap, run, security, timeout)
    return records[0]["config"] if records else None


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
