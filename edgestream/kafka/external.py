"""External streams (`streams.source: external`): the topics a run reads and did not create.

`external_partitions(bootstrap, streams, devices)` checks them on the cluster before anything starts: a topic
per device must exist with ONE partition (a device's records in order; several partitions would interleave
them), one keyed topic must exist (any partition count: the `partitioner` maps device d's key to its
partition). Every problem is one line naming the topic and what to do (`ExternalTopicError`). The run never
writes to, creates or deletes these topics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgestream.kafka.admin import admin_client


class ExternalTopicError(ValueError):
    """An external topic that is missing or laid out so the run cannot read it; `lines`: one per problem."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def external_partitions(bootstrap: str, streams: Any, devices: int, security: Mapping[str, str] | None = None,
                        timeout: float = 10.0) -> int | None:
    """Check the external topics of `streams` (a StreamsConfig) for `devices` devices; return the keyed topic's
    partition count (None for a topic per device). ExternalTopicError lists what is wrong."""
    md = admin_client(bootstrap, security).list_topics(timeout=timeout)
    if streams.per_device:
        names = [streams.topic.replace("{device}", str(d)) for d in range(devices)]
        missing = [t for t in names if t not in md.topics]
        wide = [(t, len(md.topics[t].partitions)) for t in names
                if t in md.topics and len(md.topics[t].partitions) != 1]
        lines = []
        if missing:
            shown = ", ".join(missing[:5]) + (f", ... ({len(missing)} in all)" if len(missing) > 5 else "")
            lines.append(f"streams.topic: {shown} not on the cluster at {bootstrap}: an external stream must exist "
                         f"before the run (devices.count {devices} names devices 0..{devices - 1})")
        for topic, n in wide[:5]:
            lines.append(f"streams.topic: {topic} has {n} partitions; a topic per device must have 1 (a device's "
                         "records in order); use one keyed topic (streams.topic without {device}) for several")
        if lines:
            raise ExternalTopicError(lines)
        return None
    meta = md.topics.get(streams.topic)
    if meta is None or meta.error is not None:
        raise ExternalTopicError([f"streams.topic: {streams.topic} not on the cluster at {bootstrap}: an external "
                                  "stream must exist before the run"])
    return len(meta.partitions)
