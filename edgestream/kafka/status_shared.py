"""`edgestream status` of a run with the partitioned layout (kafka/layout.py): its devices share the partitions
of `<run>.streams`, so a device's figures are not a partition's offsets but its own samples'.

Per device: produced = its stream's next sequence number (its last sample in its partition + 1: the producer's
`stream_ends`), the rate = produced read twice `interval_s` apart, acknowledged = the sequence number of its
first sample at or after its group's committed partition offset (every sample before it was acknowledged; all
of them when there is none), lag = produced - acknowledged, lag_s = the age of that first unacknowledged sample.
The device count and partition count come from the producer config pinned in `<run>.meta` and the topic.
Read-only, like status.py.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, TopicPartition

from edgestream.data.serde import SampleSerde, WireError
from edgestream.kafka.clients import consumer_config
from edgestream.kafka.layout import StreamLayout, streams_topic
from edgestream.kafka.stream_ends import pinned_config, stream_ends
from edgestream.kafka.topic_names import trainer_group


def shared_layout(bootstrap: str, run: str, partitions: int, security: Mapping[str, str] | None,
                  timeout_s: float) -> StreamLayout:
    """The run's layout: its device count from `<run>.meta` (ValueError naming the topic when it has none)."""
    config = pinned_config(bootstrap, run, security, timeout_s)
    try:
        devices = int(config["devices"]["count"])
    except (TypeError, KeyError, ValueError):
        raise ValueError(f"run {run} has {streams_topic(run)} but no producer config in {run}.meta to say how "
                         "many devices share it") from None
    return StreamLayout(run, devices, partitions)


def shared_rows(bootstrap: str, layout: StreamLayout, interval_s: float, security: Mapping[str, str] | None,
                timeout_s: float) -> tuple[list[dict[str, Any]], float]:
    """status.py's rows (device, produced, rate, acknowledged, lag, lag_s) of a partitioned run, and the
    seconds between the two reads of the stream ends."""
    devices = range(layout.devices)
    t0 = time.monotonic()
    first = stream_ends(bootstrap, layout.run, devices, security, timeout_s, layout=layout)
    if interval_s > 0:
        time.sleep(interval_s)
    second = stream_ends(bootstrap, layout.run, devices, security, timeout_s, layout=layout)
    dt = time.monotonic() - t0
    topic = streams_topic(layout.run)
    committed: dict[int, int | None] = {}
    for d in devices:
        group = Consumer(consumer_config(bootstrap, trainer_group(layout.run, d), security))
        try:
            (tp,) = group.committed([TopicPartition(topic, layout.partition(d))], timeout=timeout_s)
        finally:
            group.close()
        committed[d] = tp.offset if tp.offset >= 0 else None
    unacked = _first_unacknowledged(bootstrap, layout, committed, security, timeout_s)
    now, rows = time.time(), []
    for d in devices:
        produced = second[d]
        found = unacked.get(d)
        if committed[d] is None:
            acked = None
        else:
            acked = found[0] if found is not None else produced
        lag = produced - (acked or 0)
        lag_s = round(max(0.0, now - found[1]), 3) if found is not None and found[1] is not None and lag > 0 \
            else (0.0 if lag <= 0 else None)
        rows.append({"device": d, "produced": produced, "rate": (produced - first[d]) / dt if interval_s > 0 else None,
                     "acknowledged": acked, "lag": lag, "lag_s": lag_s})
    return rows, dt


def _first_unacknowledged(bootstrap: str, layout: StreamLayout, committed: dict[int, int | None],
                          security: Mapping[str, str] | None, timeout_s: float) -> dict[int, tuple[int, float | None]]:
    """Device -> (seq, produce time in unix s) of its first sample at or after its committed offset (or its
    partition's first offset when it has none), read forward with one assignment, for at most `timeout_s`."""
    topic = streams_topic(layout.run)
    starts: dict[int, dict[int, int]] = {}  # partition -> device -> offset to look from
    for d, off in committed.items():
        starts.setdefault(layout.partition(d), {})[d] = off if off is not None else 0
    reader = Consumer(consumer_config(bootstrap, f"{layout.run}.status", security))
    out: dict[int, tuple[int, float | None]] = {}
    try:
        ends = {p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1] for p in starts}
        todo = {p: dict(ds) for p, ds in starts.items() if ends[p] > min(ds.values())}
        if not todo:
            return out
        reader.assign([TopicPartition(topic, p, min(ds.values())) for p, ds in todo.items()])
        keys = {layout.key(d): d for d in committed}
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            for m in reader.consume(5000, timeout=0.2):
                p = m.partition()
                if m.error() is not None or p not in todo:
                    continue
                d = keys.get(m.key())
                if d in todo[p] and m.offset() >= todo[p][d]:
                    try:
                        seq = SampleSerde.header(m.value()).seq
                    except WireError:
                        continue
                    kind, ts = m.timestamp()
                    out[d] = (seq, ts / 1000.0 if kind != TIMESTAMP_NOT_AVAILABLE and ts >= 0 else None)
                    del todo[p][d]
                if not todo[p] or m.offset() >= ends[p] - 1:
                    del todo[p]
    finally:
        reader.close()
    return out


def oldest_ages(reader: Consumer, at: Mapping[Any, TopicPartition], timeout_s: float) -> dict[Any, float]:
    """Seconds since the message at each key's (topic, partition, offset) was produced (its timestamp), read with
    one assignment (keys sharing a partition: its first position's); a partition whose message does not come
    within `timeout_s` is left out."""
    if not at:
        return {}
    parts = {}
    for tp in at.values():
        parts.setdefault((tp.topic, tp.partition), tp)
    reader.assign(list(parts.values()))
    stamps: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + timeout_s
    while len(stamps) < len(parts) and time.monotonic() < deadline:
        for m in reader.consume(len(parts), timeout=0.2):
            kind, ts = m.timestamp() if m.error() is None else (TIMESTAMP_NOT_AVAILABLE, -1)
            if kind != TIMESTAMP_NOT_AVAILABLE and ts >= 0:
                stamps.setdefault((m.topic(), m.partition()), ts)
    reader.unassign()
    now = time.time()
    return {k: round(max(0.0, now - stamps[(tp.topic, tp.partition)] / 1000.0), 3)
            for k, tp in at.items() if (tp.topic, tp.partition) in stamps}
