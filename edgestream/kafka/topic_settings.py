"""The settings of every topic a run creates (`kafka.topics`), resolved against the cluster.

    replication_factor   null: min(3, the number of brokers the cluster's metadata lists)
    min_insync_replicas  null: min(2, the replication factor)
    retention_ms/_bytes  null: the broker's default (log.retention.ms / log.retention.bytes); -1: no limit
    unclean.leader.election.enable: always false (a replica that missed writes never becomes leader)

Every topic a real run creates gets them: `<run>.dev.<i>`, `<run>.inj.<i>`, `<run>.dlq`, `<run>.meta`,
`<run>.ps.*` (edgestream.kafka.admin.create_topics(settings=...)). The orchestrator resolves them once,
records them in the run directory (topics.json) and hands them to its children in the environment
(TOPIC_SETTINGS_ENV, JSON: nothing secret), so a producer or parameter server started while a broker is down
does not resolve a smaller replication factor than the run's topics have; a resumed run takes them from
topics.json (the settings its topics were created with).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from edgestream import settings
from edgestream.kafka.clients import admin_client

#: the environment variable the orchestrator hands the run's resolved settings to its children in (JSON)
TOPIC_SETTINGS_ENV = settings.TOPIC_SETTINGS.name
#: the defaults' caps: Kafka's norm for data that must not be lost (RF 3, min.insync.replicas 2)
DEFAULT_REPLICATION = 3
DEFAULT_MIN_INSYNC = 2


class TopicSettingsError(ValueError):
    """kafka.topics cannot be met on this cluster (one-line message naming the field)."""


def broker_count(bootstrap: str, security: Mapping[str, str] | None = None, timeout: float = 30.0) -> int:
    """The number of brokers the cluster's metadata lists (those that answer)."""
    return len(admin_client(bootstrap, security).list_topics(timeout=timeout).brokers)


@dataclass(frozen=True)
class TopicSettings:
    """What every topic of a run is created with; `brokers`: the broker count it was resolved against."""

    replication_factor: int
    min_insync_replicas: int
    retention_ms: int | None = None
    retention_bytes: int | None = None
    create: bool = True
    brokers: int | None = None

    @classmethod
    def from_config(cls, topics_cfg: Any, brokers: int) -> TopicSettings:
        """`kafka.topics` (a TopicsConfig) on a cluster of `brokers` brokers; TopicSettingsError when it
        asks for more replicas than there are brokers (only where topics are created: with create: false
        the administrator's topics are used as they are)."""
        brokers = max(1, int(brokers))
        rf, isr = topics_cfg.replication_factor, topics_cfg.min_insync_replicas
        create = bool(topics_cfg.create)
        if rf is None:
            rf, rf_why = min(DEFAULT_REPLICATION, brokers), f"null: min({DEFAULT_REPLICATION}, {brokers} broker(s))"
        else:
            rf_why = str(rf)
            if create and rf > brokers:
                raise TopicSettingsError(
                    f"kafka.topics.replication_factor: {rf} is not allowed on this cluster: it has {brokers} "
                    f"broker(s); use at most {brokers}, or null (min({DEFAULT_REPLICATION}, the broker count))")
        if isr is None:
            isr = min(DEFAULT_MIN_INSYNC, rf)
        elif create and isr > rf:
            raise TopicSettingsError(
                f"kafka.topics.min_insync_replicas: {isr} is not allowed: it is more than the replication factor "
                f"{rf} (kafka.topics.replication_factor {rf_why}), so no write could be acknowledged")
        return cls(int(rf), int(isr), topics_cfg.retention_ms, topics_cfg.retention_bytes, create, brokers)

    @classmethod
    def resolve(cls, topics_cfg: Any, bootstrap: str, security: Mapping[str, str] | None = None,
                timeout: float = 30.0) -> TopicSettings:
        """`from_config` against the cluster at `bootstrap` (its broker count from the cluster's metadata)."""
        return cls.from_config(topics_cfg, broker_count(bootstrap, security, timeout))

    @classmethod
    def for_process(cls, topics_cfg: Any, bootstrap: str, security: Mapping[str, str] | None = None,
                    environ: Mapping[str, str] | None = None) -> TopicSettings:
        """The run's settings in a process of the run: those its orchestrator handed over
        (TOPIC_SETTINGS_ENV), else resolved here (a producer, trainer or PS started by hand)."""
        raw = settings.topic_settings(environ)
        if raw:
            return cls.from_json(raw, where=TOPIC_SETTINGS_ENV)
        return cls.resolve(topics_cfg, bootstrap, security)

    # ------------------------------------------------------------------ what topics get
    def topic_config(self) -> dict[str, str]:
        """The topic-level configs every topic of the run is created with (and compared on when it exists)."""
        out = {"min.insync.replicas": str(self.min_insync_replicas), "unclean.leader.election.enable": "false"}
        if self.retention_ms is not None:
            out["retention.ms"] = str(self.retention_ms)
        if self.retention_bytes is not None:
            out["retention.bytes"] = str(self.retention_bytes)
        return out

    def warning(self) -> str | None:
        """A warning line when the run's topics are unreplicated on a cluster of more than one broker."""
        if self.replication_factor > 1 or (self.brokers or 1) <= 1:
            return None
        return (f"warning: the run's topics have replication factor 1 on a cluster of {self.brokers} brokers: losing "
                "the broker that leads a topic loses its samples; set kafka.topics.replication_factor (null: "
                f"min({DEFAULT_REPLICATION}, the broker count))")

    # ------------------------------------------------------------------ record and handover
    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"unclean_leader_election": False}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], where: str = "topic settings") -> TopicSettings:
        try:
            return cls(int(doc["replication_factor"]), int(doc["min_insync_replicas"]),
                       None if doc.get("retention_ms") is None else int(doc["retention_ms"]),
                       None if doc.get("retention_bytes") is None else int(doc["retention_bytes"]),
                       bool(doc.get("create", True)),
                       None if doc.get("brokers") is None else int(doc["brokers"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise TopicSettingsError(f"{where}: not the run's topic settings ({exc!r})") from None

    @classmethod
    def from_json(cls, raw: str, where: str = "topic settings") -> TopicSettings:
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise TopicSettingsError(f"{where}: not a JSON object of the run's topic settings")
        return cls.from_dict(doc, where)


def config_rules(topics_cfg: Any) -> list[str]:
    """How `kafka.topics` resolves on a cluster, as comment lines for `config show` (it contacts no broker)."""
    rf, isr = topics_cfg.replication_factor, topics_cfg.min_insync_replicas
    if not topics_cfg.create:
        return ["# kafka.topics.create: false -- no topic is created; the run checks that each topic it needs",
                "#   exists with its partition count, and uses the administrator's replication and retention"]
    lines = ["# kafka.topics as a run resolves them against the cluster (every topic it creates):",
             "#   replication_factor: " + (str(rf) if rf is not None
                                          else f"null -> min({DEFAULT_REPLICATION}, the cluster's broker count)"),
             "#   min_insync_replicas: " + (str(isr) if isr is not None else
                                           f"null -> min({DEFAULT_MIN_INSYNC}, the replication factor)")]
    for field, key in (("retention_ms", "log.retention.ms"), ("retention_bytes", "log.retention.bytes")):
        value = getattr(topics_cfg, field)
        lines.append(f"#   {field}: " + (f"null -> the broker's default ({key})" if value is None
                                         else f"{value}" + (" (no limit)" if value == -1 else "")))
    lines.append("#   unclean.leader.election.enable: false (always)")
    lines.append("# the values a run chose are in its run directory's topics.json")
    return lines
