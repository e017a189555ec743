"""What a running (or finished) run looks like from the broker (`edgestream status RUN --bootstrap ...`).

Only Kafka is asked, so it works from any host that reaches the broker (a testbed's laptop, a
Jetson), while the run goes on: per device, the stream's end offset (samples produced so far), the
producer's rate (end offsets read twice, `interval_s` apart), the trainer group's committed offset
(samples acknowledged) and the consumer lag (produced - acknowledged: the device's backlog as the
broker sees it), in samples and in seconds of data (`lag_s`: now minus the timestamp of the oldest
unacknowledged message, its produce time; 0 without a backlog); plus the DLQ's count and, for
parameter-server runs, the push topic's messages and rate. Read-only: no group is joined, nothing is
committed. (A trainer acknowledges now and then -- with each checkpoint, or at most once a second --
so the lag here includes what it has read but not yet acknowledged.)
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from edgestream.kafka.admin import admin_client
from edgestream.kafka.clients import consumer_config
from edgestream.kafka.layout import StreamLayout, streams_topic
from edgestream.kafka.status_external import external_runs, external_status
from edgestream.kafka.status_shared import oldest_ages, shared_layout, shared_rows
from edgestream.kafka.topic_names import dlq_topic, ps_topic, trainer_group

DEVICE = re.compile(r"^(?P<run>.+)\.dev\.(?P<device>\d+)$")
#: a run's stream topic in the partitioned layout (kafka/layout.py): its devices share its partitions
SHARED = re.compile(r"^(?P<run>.+)\.streams$")


class StatusError(ValueError):
    """The run cannot be found on the broker (one line naming what was looked for)."""


def find_run(topics: list[str], run: str) -> str:
    """The run name (`<name>-<algorithm>-<run id>`) that `run` means: itself, or the one run whose id it is."""
    runs = sorted({m.group("run") for t in topics if (m := DEVICE.match(t) or SHARED.match(t))}
                  | set(external_runs(topics)))
    if run in runs:
        return run
    matches = [r for r in runs if r.endswith(f"-{run}")]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise StatusError(f"run id {run!r} matches several runs on the broker: {', '.join(matches)}; give the full "
                          "run name (<name>-<algorithm>-<run id>)")
    shown = ", ".join(runs[:8]) + (", ..." if len(runs) > 8 else "") if runs else "none"
    raise StatusError(f"no run {run!r} on the broker (no topic {run}.dev.<i> or <name>-{run}.dev.<i>); runs there: "
                      f"{shown}")


def run_status(bootstrap: str, run: str, *, interval_s: float = 2.0,
               security: Mapping[str, str] | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
    """The figures of the module doc for `run` (a run name or a run id); StatusError when it is not there."""
    metadata = admin_client(bootstrap, security).list_topics(timeout=timeout_s)
    topics = sorted(metadata.topics)
    run = find_run(topics, run)

    external = external_runs(topics)
    if run in external:  # external streams: each device's topic from what its trainer group committed
        return _with_dlq(bootstrap, run, topics, external_status(bootstrap, run, external[run], interval_s=interval_s,
                                                                 security=security, timeout_s=timeout_s),
                         security, timeout_s)
    if streams_topic(run) in topics:  # the partitioned layout: per-device figures from the shared partitions
        partitions = len(metadata.topics[streams_topic(run)].partitions)
        try:
            layout = shared_layout(bootstrap, run, partitions, security, timeout_s)
        except ValueError as exc:
            raise StatusError(str(exc)) from None
        rows, dt = shared_rows(bootstrap, layout, interval_s, security, timeout_s)
        return _with_dlq(bootstrap, run, topics, {"run": run, "interval_s": round(dt, 3), "devices": rows,
                                                  "layout": f"partitioned ({partitions} partitions)"},
                         security, timeout_s)
    devices = sorted(int(m.group("device")) for t in topics if (m := DEVICE.match(t)) and m.group("run") == run)
    push = ps_topic(run, "push")
    layout = StreamLayout(run, len(devices))  # per-device: device d's stream is its own topic
    stream = {d: layout.stream(d)[0] for d in devices}
    watched = [stream[d] for d in devices] + ([push] if push in topics else [])
    reader = Consumer(consumer_config(bootstrap, f"{run}.status", security))
    try:
        def ends() -> dict[str, int]:
            return {t: reader.get_watermark_offsets(TopicPartition(t, 0), timeout=timeout_s)[1] for t in watched}

        t0, first = time.monotonic(), ends()
        if interval_s > 0:
            time.sleep(interval_s)
        second, dt = ends(), time.monotonic() - t0
        rows = []
        for d in devices:
            topic = stream[d]
            group = Consumer(consumer_config(bootstrap, trainer_group(run, d), security))
            try:
                (tp,) = group.committed([TopicPartition(topic, 0)], timeout=timeout_s)
            finally:
                group.close()
            committed = tp.offset if tp.offset >= 0 else None
            end = second[topic]
            rows.append({"device": d, "produced": end, "rate": (end - first[topic]) / dt if interval_s > 0 else None,
                         "acknowledged": committed, "lag": end - (committed or 0)})
        ages = oldest_ages(reader, {r["device"]: TopicPartition(stream[r["device"]], 0, r["acknowledged"] or 0)
                                     for r in rows if r["lag"] > 0}, timeout_s)
        for r in rows:
            r["lag_s"] = ages.get(r["device"]) if r["lag"] > 0 else 0.0
        dlq = dlq_topic(run)
        out: dict[str, Any] = {"run": run, "interval_s": round(dt, 3), "devices": rows,
                               "dlq": (reader.get_watermark_offsets(TopicPartition(dlq, 0), timeout=timeout_s)[1]
                                       if dlq in topics else None)}
        if push in topics:
            out["ps_push"] = {"messages": second[push],
                              "rate": (second[push] - first[push]) / dt if interval_s > 0 else None}
        return out
    finally:
        reader.close()


def _with_dlq(bootstrap: str, run: str, topics: list[str], out: dict[str, Any],
              security: Mapping[str, str] | None, timeout_s: float) -> dict[str, Any]:
    """`out` with the DLQ's message count (None without a DLQ topic)."""
    dlq = dlq_topic(run)
    reader = Consumer(consumer_config(bootstrap, f"{run}.status", security))
    try:
        out["dlq"] = (reader.get_watermark_offsets(TopicPartition(dlq, 0), timeout=timeout_s)[1]
                      if dlq in topics else None)
    finally:
        reader.close()
    return out


def format_status(st: dict[str, Any]) -> str:
    """The table `edgestream status` prints."""
    layout = f", layout {st['layout']}" if st.get("layout") else ""
    lines = [f"run {st['run']} (rates over {st['interval_s']:g} s{layout})",
             f"{'device':>6} {'produced':>10} {'rate/s':>9} {'acknowledged':>13} {'lag':>9} {'lag s':>8}"]
    for r in st["devices"]:
        rate = "-" if r["rate"] is None else f"{r['rate']:.1f}"
        acked = "none" if r["acknowledged"] is None else f"{r['acknowledged']:,}"
        lag_s = "-" if r.get("lag_s") is None else f"{r['lag_s']:.1f}"
        lines.append(f"{r['device']:>6} {r['produced']:>10,} {rate:>9} {acked:>13} {r['lag']:>9,} {lag_s:>8}")
    total = sum(r["lag"] for r in st["devices"])
    oldest = max((r["lag_s"] for r in st["devices"] if r.get("lag_s") is not None), default=None)
    behind = f" (at most {oldest:.1f} s of data behind)" if oldest else ""
    lines.append(f"total lag {total:,} samples{behind}; DLQ "
                 f"{('no topic' if st['dlq'] is None else format(st['dlq'], ','))}")
    if "ps_push" in st:
        p = st["ps_push"]
        rate = "-" if p["rate"] is None else f"{p['rate']:.1f}/s"
        lines.append(f"parameter server: {p['messages']:,} push-topic messages ({rate})")
    return "\n".join(lines)
