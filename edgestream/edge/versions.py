"""A run's model versions where they are kept (docs/model-format.md): its run directory (`models/v<N>/`) or its
models topic, read whole and checked -- what `edgestream models list|show|pull` shows and fetches. No torch."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path

from edgestream.edge.model_format import META_FILE, FormatError, ModelVersion, read_all


def from_dir(run_dir: Path) -> tuple[dict[int, ModelVersion], list[str]]:
    """The whole versions under `run_dir/models` (each file checked against meta.json's SHA-256), and one line per
    version directory refused."""
    out, refused = {}, []
    models = Path(run_dir) / "models"
    for d in sorted(models.glob("v*")) if models.is_dir() else []:
        if not d.is_dir() or not d.name[1:].isdigit():
            continue
        try:
            meta = json.loads((d / META_FILE).read_text())
            files = {}
            for f in meta["files"]:
                data = (d / f["name"]).read_bytes()
                if hashlib.sha256(data).hexdigest() != f["sha256"]:
                    raise FormatError(f"file {f['name']}: sha256 mismatch")
                files[f["name"]] = data
        except (OSError, ValueError, KeyError, TypeError) as exc:
            refused.append(f"{d}: {' '.join(str(exc).split())[:200]}")
            continue
        out[int(d.name[1:])] = ModelVersion(int(d.name[1:]), meta, files)
    return out, refused


def from_topic(bootstrap: str, topic: str, run: str, security: Mapping[str, str] | None = None,
               timeout_s: float = 30.0) -> tuple[dict[int, ModelVersion], list[str]]:
    """Every complete, checked version on `topic` now (read from its beginning to its end), and the refusals.
    KafkaException / TimeoutError (one line) when the topic cannot be read."""
    from confluent_kafka import KafkaException

    from edgestream.kafka.admin import admin_client
    from edgestream.kafka.topic_reader import Receiver

    md = admin_client(bootstrap, security).list_topics(topic, timeout=timeout_s)
    if topic not in md.topics or md.topics[topic].error is not None or not md.topics[topic].partitions:
        raise KafkaException(f"no topic {topic} on {bootstrap} (the run has published no version)")
    rx = Receiver(bootstrap, topic, f"{run}.models.cli", "beginning", security)
    try:
        end, values = rx.end(), []
        deadline = time.monotonic() + timeout_s
        while (rx.position < 0 or rx.position < end) and end > 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: read {len(values)} of its messages within {timeout_s:g} s")
            values += [raw.value for raw in rx.poll(0.5, 1000)]
    finally:
        rx.close()
    return read_all(iter(values), run)
