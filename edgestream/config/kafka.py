"""The `kafka:` section of an experiment config: how a real run's topics are laid out and provisioned.

    kafka:
      topics:
        create: true                 # false: run on topics an administrator provisioned (none is created)
        replication_factor: null     # null: the smaller of 3 and the cluster's broker count
        min_insync_replicas: null    # null: the smaller of 2 and the replication factor
        retention_ms: null           # null: the broker's default; -1: keep forever
        retention_bytes: null        # null: the broker's default; -1: no size limit
        layout: per-device           # per-device: <run>.dev.<i> per device; partitioned: one stream
        partitions: null             #   topic, the device as key (default: one partition per device, <= 64)

The simulator ignores it. Resolved against the cluster by edgestream.kafka (the chosen values are shown by
`config show` as null = "the cluster decides", and written to the run directory as resolved).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from edgestream.config.base import Bool, Int, _Model

LAYOUTS = ("per-device", "partitioned")


class TopicsConfig(_Model):
    create: Bool = True
    replication_factor: Int | None = Field(None, ge=1)
    min_insync_replicas: Int | None = Field(None, ge=1)
    retention_ms: Int | None = Field(None, ge=-1)
    retention_bytes: Int | None = Field(None, ge=-1)
    layout: Literal["per-device", "partitioned"] = "per-device"
    partitions: Int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> TopicsConfig:
        rf, isr = self.replication_factor, self.min_insync_replicas
        if rf is not None and isr is not None and isr > rf:
            raise ValueError(f"min_insync_replicas: {isr} is not allowed; must be <= replication_factor ({rf}), "
                             "or no write could ever be acknowledged")
        if self.partitions is not None and self.layout != "partitioned":
            raise ValueError("partitions: applies to layout: partitioned only (per-device has one partition "
                             "per device topic)")
        return self


class KafkaConfig(_Model):
    topics: TopicsConfig = Field(default_factory=TopicsConfig)
