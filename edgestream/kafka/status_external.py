"""`edgestream status` of a run on external streams (`streams.source: external`): its devices' records are in
topics the run did not create, so the run is found by its own injection topics (`<run>.inj.<d>`) and each
device's stream by what its trainer group committed (the topic and partition it reads). Per device: the end
offset of that partition ("produced": records there so far), the rate (end offsets read twice), the committed
offset, the lag (end - committed; on one keyed topic the partition's other devices' records count too) and
its age in seconds of data. A device whose trainer has acknowledged nothing yet shows "none" and no figures.
Read-only, like status.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

from edgestream.kafka.admin import admin_client
from edgestream.kafka.clients import consumer_config
from edgestream.kafka.status_shared import oldest_ages
from edgestream.kafka.topic_names import trainer_group

INJECTION = re.compile(r"^(?P<run>.+)\.inj\.(?P<device>\d+)$")


def external_runs(topics: list[str]) -> dict[str, list[int]]:
    """Runs that have injection topics but no stream topics of their own -> their devices."""
    own = {t.rsplit(".dev.", 1)[0] for t in topics if ".dev." in t} | {t[:-len(".streams")] for t in topics
                                                                        if t.endswith(".streams")}
    runs: dict[str, list[int]] = {}
    for t in topics:
        m = INJECTION.match(t)
        if m and m.group("run") not in own:
            runs.setdefault(m.group("run"), []).append(int(m.group("device")))
    return {r: sorted(d) for r, d in runs.items()}


def _committed(admin: Any, group: str, timeout_s: float) -> TopicPartition | None:
    """The (topic, partition, offset) a trainer group committed on its stream, None before its first ack."""
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s)
    got = next(iter(futures.values())).result()
    tps = [tp for tp in (got.topic_partitions or []) if tp.offset >= 0 and tp.error is None]
    return tps[0] if tps else None


def external_status(bootstrap: str, run: str, devices: list[int], *, interval_s: float,
                    security: Mapping[str, str] | None, timeout_s: float) -> dict[str, Any]:
    """status.py's figures for an external run (see the module doc)."""

    admin = admin_client(bootstrap, security)
    where = {d: _committed(admin, trainer_group(run, d), timeout_s) for d in devices}
    reader = Consumer(consumer_config(bootstrap, f"{run}.status", security))
    try:
        parts = {(tp.topic, tp.partition) for tp in where.values() if tp is not None}

        def ends() -> dict[tuple[str, int], int]:
            return {p: reader.get_watermark_offsets(TopicPartition(*p), timeout=timeout_s)[1] for p in parts}

        t0, first = time.monotonic(), ends()
        if interval_s > 0:
            time.sleep(interval_s)
        second, dt = ends(), time.monotonic() - t0
        rows, behind = [], {}
        for d in devices:
            tp = where[d]
            if tp is None:
                rows.append({"device": d, "produced": 0, "rate": None, "acknowledged": None, "lag": 0, "lag_s": None,
                             "topic": None})
                continue
            p = (tp.topic, tp.partition)
            lag = max(0, second[p] - tp.offset)
            rows.append({"device": d, "produced": second[p], "topic": f"{tp.topic}[{tp.partition}]",
                         "rate": (second[p] - first[p]) / dt if interval_s > 0 else None,
                         "acknowledged": tp.offset, "lag": lag})
            if lag:
                behind[d] = TopicPartition(tp.topic, tp.partition, tp.offset)
        ages = oldest_ages(reader, behind, timeout_s)
        for r in rows:
            if r["acknowledged"] is not None:
                r["lag_s"] = ages.get(r["device"]) if r["lag"] else 0.0
        return {"run": run, "interval_s": round(dt, 3), "devices": rows, "layout": "external"}
    finally:
        reader.close()
