"""Create the topics of a run: device streams, injection topics and the DLQ."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from edgestream.kafka.admin import create_topics
from edgestream.kafka.topics import device_topic, dlq_topic, injection_topic


def ensure_run_topics(bootstrap: str, run: str, devices: Iterable[int],
                      security: Mapping[str, str] | None = None) -> list[str]:
    """Create `<run>.dev.<i>`, `<run>.inj.<i>` (one partition each, ordered per device) and `<run>.dlq`."""
    names = {}
    for d in devices:
        names[device_topic(run, d)] = 1
        names[injection_topic(run, d)] = 1
    names[dlq_topic(run)] = 1
    create_topics(bootstrap, names, security=security)
    return list(names)
