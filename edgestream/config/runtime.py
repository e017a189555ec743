"""The `runtime:` section: where a run runs (engine, Kafka bootstrap, output folder), its Kafka client settings,
and the real runs' collectives, outage wait, lag warning, clean-up and GPUs."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator

from edgestream.config.base import SECRET_MASK, Bool, Float, Int, _Model, is_secret_key
from edgestream.engine_names import ENGINES

#: Client settings a user may pass through to librdkafka (brokers on a WAN need them).
CLIENT_KEY_PREFIXES = ("security.protocol", "sasl.", "ssl.", "client.id", "socket.", "request.timeout.ms")
#: topic settings users try to pass as client settings -> the kafka.topics field that sets them
TOPIC_KEYS = {"replication.factor": "replication_factor", "default.replication.factor": "replication_factor",
              "min.insync.replicas": "min_insync_replicas", "retention.ms": "retention_ms",
              "retention.bytes": "retention_bytes", "num.partitions": "partitions (layout: partitioned)"}
#: security.protocol values librdkafka accepts (case-insensitive).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def bootstrap_ok(value: str) -> bool:
    """Whether `value` reads as Kafka bootstrap servers HOST:PORT[,HOST:PORT...] (port 1..65535)."""
    for part in value.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            return False
    return True


class RuntimeConfig(_Model):
    engine: Literal[ENGINES] = "sim"  # edgestream.engine_names
    bootstrap: str | None = None
    out: str = "runs/"
    kafka_client: dict[str, str] = Field(default_factory=dict)
    #: the real trainers' AllReduce (edgestream.trainer.collectives): "allreduce" = torch.distributed.all_reduce
    #: in buckets (ring/tree by the backend); "exact" = all-gather + rank-order sum, bitwise the simulator's
    reduction: Literal["allreduce", "exact"] = "allreduce"
    #: the all-reduce bucket size in MiB (DDP's bucket_cap_mb); "allreduce" only
    bucket_mb: Float = Field(25.0, gt=0)
    #: "allreduce" on gloo: ranks that share a host meet in shared memory instead of loopback TCP when every
    #: rank can (edgestream.trainer.shm_reduce); false: always the backend
    shared_memory: Bool = True
    #: real runs: how long trainers, the producer and the parameter server wait for an unreachable Kafka
    #: (a broker restart, a rolling upgrade, a network blip) before the run stops, resumable
    kafka_outage_s: Float = Field(300.0, gt=0)
    #: real runs: a warning line when a device's backlog (consumer lag) has kept growing for this long
    lag_warning_s: Float = Field(60.0, gt=0)
    #: real runs: what happens to the run's topics and consumer groups when it ends; "delete-on-success"
    #: removes them after a finished run (a failed or stopped run keeps them for --resume)
    cleanup: Literal["keep", "delete-on-success"] = "keep"
    #: real runs: the GPUs (torch indices among those CUDA_VISIBLE_DEVICES shows) the trainer ranks of a
    #: host take, local rank r -> gpus[r % len]; null = all, r % device_count (edgestream.trainer.gpus)
    gpus: list[Int] | None = None

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or any(i < 0 for i in v)):
            raise ValueError("must list GPU indices >= 0 (e.g. [0, 1]), or be null for all "
                             "(EDGESTREAM_DEVICE=cpu for the CPU)")
        return v

    @field_validator("kafka_client", mode="before")
    @classmethod
    def _client_values(cls, v: Any) -> Any:
        """Scalar values become the strings librdkafka takes (true/false lowercase); a secret's value
        never appears in an error message."""
        if not isinstance(v, dict):
            return v
        out = {}
        for key, val in v.items():
            if isinstance(val, bool):
                val = "true" if val else "false"
            elif isinstance(val, (int, float)) and not isinstance(val, bool):
                if isinstance(val, float) and not math.isfinite(val):
                    raise ValueError(f"{key}: {val} is not allowed; must be finite")
                val = str(val)
            elif not isinstance(val, str):
                shown = SECRET_MASK if is_secret_key(str(key)) else repr(val)
                raise ValueError(f"{key}: {shown} is not allowed; must be a string or a number")
            out[key] = val
        return out

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, v: str | None) -> str | None:
        if v is not None and not bootstrap_ok(v):
            raise ValueError("must be HOST:PORT[,HOST:PORT...]")
        return v

    @field_validator("kafka_client")
    @classmethod
    def _client_keys(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if key in TOPIC_KEYS:
                raise ValueError(f"key {key!r} is a setting of the run's topics, not of a client; use "
                                 f"kafka.topics.{TOPIC_KEYS[key]}")
            if not key.startswith(CLIENT_KEY_PREFIXES):
                raise ValueError(f"key {key!r} is not a pass-through client setting; allowed: "
                                 + ", ".join(p + ("*" if p.endswith(".") else "") for p in CLIENT_KEY_PREFIXES))
        proto = v.get("security.protocol")
        if proto is not None and proto.upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"security.protocol: {proto!r} is not allowed; must be one of "
                             f"{', '.join(SECURITY_PROTOCOLS)} (any case)")
        return {k: str(val) for k, val in v.items()}
