"""Restarting a producer under an existing run id: pin the run's producer config (`claim_run`).

A run's device streams are a pure function of the producer-relevant config (name, seed, data,
devices.count, rates, variation): sample k of device i is always the same sample, due at the same
point of S_i's schedule. So a producer restarted after a crash continues each device's stream right
after the last sequence number in its topic (`stream_ends`, edgestream.kafka.stream_ends), and a different
config under an existing run id is refused (`claim_run`): the first producer of a run writes its producer
config to the compacted topic `<run>.meta`; every later one compares its own with the first record there.
Processes that split the devices (`--devices`) of one run share the config, so they pass the check.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from edgestream.kafka.admin import create_topics
from edgestream.kafka.clients import producer_config
from edgestream.kafka.stream_ends import META_VERSION, PRODUCER_KEY, meta_records
from edgestream.kafka.topic_names import meta_topic
from edgestream.kafka.topic_settings import TopicSettings


class RunConfigConflict(ValueError):
    """A producer config that differs from the one the run was started with (one-line message)."""


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
    records = meta_records(bootstrap, run, security, timeout)
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
        records, pinned = meta_records(bootstrap, run, security, timeout), True
    first = records[0]
    if fingerprint(first["config"]) != fp:
        raise RunConfigConflict(
            f"run {run} was started with a different producer config ({first_difference(doc, first['config'])}); "
            f"use a new --run-id, or the config the run was started with (stored in topic {meta_topic(run)})")
    return pinned

