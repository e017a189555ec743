"""Create the topics of a run: device streams, injection topics and the DLQ; the run's topic record.

Every topic is created with the run's resolved `TopicSettings` (kafka.topics: replication, min.insync.replicas,
retention; edgestream.kafka.topic_settings) where the caller passes them; `run_topics` lists every topic a run
uses (what an administrator provisions for `kafka.topics.create: false`), and `record_run_topics` writes them
as the cluster reports them to the run directory's topics.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from edgestream.kafka.admin import admin_client, create_topics
from edgestream.kafka.layout import StreamLayout
from edgestream.kafka.topic_check import read_back
from edgestream.kafka.topic_names import (
    device_topic,
    dlq_topic,
    injection_topic,
    meta_topic,
    ps_topic,
    run_topic_prefix,
)
from edgestream.kafka.topic_settings import TopicSettings

#: the run directory's record of the run's topic settings and its topics as the cluster reports them
TOPICS_FILE = "topics.json"


def ensure_run_topics(bootstrap: str, run: str, devices: Iterable[int],
                      security: Mapping[str, str] | None = None, layout: StreamLayout | None = None, *,
                      settings: TopicSettings | None = None) -> list[str]:
    """Create `<run>.dev.<i>`, `<run>.inj.<i>` (one partition each, ordered per device) and `<run>.dlq`;
    with a partitioned `layout` (kafka/layout.py), its `<run>.streams` and `<run>.inj` instead of those; with
    external streams, only the injection topics (the streams are the user's: `check_external_topics`).
    `settings`: the run's resolved kafka.topics (create_topics: replication, configs, the existing-topic check,
    create: false); none: replication factor 1, existing topics reused (tests)."""
    names = {}
    if layout is not None and (layout.partitioned or layout.external is not None):
        names.update(layout.topics())
    else:
        for d in devices:
            names[device_topic(run, d)] = 1
            names[injection_topic(run, d)] = 1
    names[dlq_topic(run)] = 1
    create_topics(bootstrap, names, security=security, settings=settings)
    return list(names)


def run_topics(run: str, devices: int, layout: StreamLayout | None = None, *, ps: bool = False,
               models: str | None = None) -> dict[str, int]:
    """Every topic run `run` of `devices` devices uses -> its partition count: the streams and injection topics
    of its layout, `<run>.dlq`, `<run>.meta` (compacted), for a parameter-server run `<run>.ps.push` and
    `<run>.ps.pull.<i>` (edgestream.ps.transport's names), and `models`, the run's models topic when it publishes
    model versions (compacted; edgestream.publish)."""
    names = dict((layout or StreamLayout(run, devices)).topics())
    names[dlq_topic(run)] = 1
    names[meta_topic(run)] = 1
    if models:
        names[models] = 1
    if ps:
        names[ps_topic(run, "push")] = 1
        names.update({ps_topic(run, f"pull.{i}"): 1 for i in range(devices)})
    return names


def prepare_run_topics(bootstrap: str, run: str, devices: int, security: Mapping[str, str] | None = None, *,
                       settings: TopicSettings, layout: StreamLayout | None = None, ps: bool = False,
                       models: str | None = None) -> list[str]:
    """The orchestrator's step: create the run's stream, injection and DLQ topics with `settings` (the meta
    and PS topics are created by the producer and the PS, sized for the model; the models topic by its
    publisher); with `settings.create` false, check every topic the run needs (`run_topics`, `models` included)
    instead: TopicMismatch names each one missing or mis-partitioned."""
    if not settings.create:
        wanted = run_topics(run, devices, layout, ps=ps, models=models)
        create_topics(bootstrap, wanted, security=security, settings=settings)
        return list(wanted)
    return ensure_run_topics(bootstrap, run, range(devices), security, layout, settings=settings)


def record_run_topics(run_dir: str | Path, bootstrap: str, run: str, settings: TopicSettings,
                      security: Mapping[str, str] | None = None, timeout: float = 30.0) -> dict[str, Any]:
    """Write `<run_dir>/topics.json`: the run's resolved settings and each of its topics as the cluster
    reports them (partitions, replication factor, topic configs); returns what it wrote."""
    admin = admin_client(bootstrap, security)
    prefix = run_topic_prefix(run)
    names = [t for t in admin.list_topics(timeout=timeout).topics if t.startswith(prefix)]
    doc = {"bootstrap": bootstrap, "settings": settings.to_dict(), "topics": read_back(admin, names, timeout)}
    path = Path(run_dir) / TOPICS_FILE
    tmp = path.with_name(f".{TOPICS_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return doc


def run_settings(topics_cfg: Any, bootstrap: str, security: Mapping[str, str] | None = None, *,
                 resumed_dir: str | Path | None = None) -> TopicSettings:
    """A run's topic settings: a resumed run's as its topics.json recorded them (its topics were created with
    them; a cluster that since lost or gained a broker does not change them), else kafka.topics resolved
    against the cluster at `bootstrap`."""
    recorded = recorded_settings(resumed_dir) if resumed_dir is not None else None
    return recorded or TopicSettings.resolve(topics_cfg, bootstrap, security)


def recorded_settings(run_dir: str | Path) -> TopicSettings | None:
    """The settings a run's topics were created with (its topics.json), None when it has none; a resumed run
    keeps them (TopicSettingsError for a file that does not hold them)."""
    path = Path(run_dir) / TOPICS_FILE
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    settings = doc.get("settings") if isinstance(doc, dict) else None
    return TopicSettings.from_dict(settings if isinstance(settings, dict) else {}, str(path))
