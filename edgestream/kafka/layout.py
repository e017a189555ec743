"""Where a device's samples travel: the run's topic layout (`kafka.topics.layout`).

    per-device (default)  device d streams into `<run>.dev.<d>` and is injected into through `<run>.inj.<d>`
                          (one partition each): 2 topics per device.
    partitioned           every device streams into ONE topic `<run>.streams` of P partitions (and is injected
                          into through one `<run>.inj` of P partitions): device d's messages are keyed by d and
                          written to partition d % P. Each device's reader reads its partition and takes only
                          its own device's messages (the others' are skipped: never sent to the DLQ, never
                          counted); it commits the partition offset after what it took, in its own consumer
                          group, so order per device, no loss, no duplicate and resuming from checkpointed
                          offsets hold as in per-device. A message in the partition whose key is no device of
                          that partition (not written by edgestream) is taken by the partition's first device,
                          whose validation sends it to the DLQ, once.

    external              topics the run did not create (`streams.source: external`, config/streams.py): one
                          topic per device from a pattern (`plant.sensor-{device}`, one partition each), or ONE
                          keyed topic whose partition of device d is the `partitioner`'s for the key of d
                          (consistent: CRC-32 of the key, librdkafka's default; murmur2: the Java client's
                          default; modulo: d % P); its readers share partitions as in partitioned. Injection
                          goes through the run's own `<run>.inj.<d>` topics (keyed by the sender).

`StreamLayout` is the one object the producer, the readers, the restart logic, status and topic creation ask.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgestream.kafka.topic_names import device_topic, injection_topic

#: the partitioned layout's default partition count: one per device, at most this many
DEFAULT_MAX_PARTITIONS = 64

#: the partitioned layout's topics: `<run>.streams` (samples) and `<run>.inj` (injected samples)
STREAMS_SUFFIX = "streams"
INJECTION_SUFFIX = "inj"


def streams_topic(run: str) -> str:
    return f"{run}.{STREAMS_SUFFIX}"


def shared_injection_topic(run: str) -> str:
    return f"{run}.{INJECTION_SUFFIX}"


def default_partitions(devices: int) -> int:
    """The partitioned layout's partition count when `kafka.topics.partitions` is unset: one per device, at
    most DEFAULT_MAX_PARTITIONS."""
    return max(1, min(int(devices), DEFAULT_MAX_PARTITIONS))


def device_key(device: int) -> bytes:
    """A sample's message key: its device id in decimal (every layout)."""
    return str(int(device)).encode()


def murmur2(data: bytes) -> int:
    """Kafka's Java client's murmur2 hash of a key (org.apache.kafka.common.utils.Utils.murmur2), signed 32-bit."""
    m, r, length = 0x5BD1E995, 24, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def key_partition(key: bytes, partitions: int, partitioner: str) -> int:
    """The partition a producer with `partitioner` writes a message keyed `key` to, of `partitions`:
    consistent (librdkafka's and so confluent-kafka's default for keyed messages: CRC-32 of the key), murmur2
    (the Java client's default: the positive murmur2 hash) or modulo (the key's device id % partitions)."""
    if partitioner == "consistent":
        return zlib.crc32(key) % partitions
    if partitioner == "murmur2":
        return (murmur2(key) & 0x7FFFFFFF) % partitions
    if partitioner == "modulo":
        return int(key) % partitions
    raise ValueError(f"streams.partitioner: {partitioner!r} is not allowed; must be consistent, murmur2 or modulo")


@dataclass(frozen=True)
class StreamLayout:
    """The topic, partition and key of each device's stream and injection topic for run `run` of `devices`
    devices; `partitions` None is the per-device layout."""

    run: str
    devices: int
    partitions: int | None = None
    #: external streams: the topic pattern ({device}) or the one keyed topic (then `partitions` is its count)
    external: str | None = None
    partitioner: str = "modulo"

    def __post_init__(self) -> None:
        if self.partitions is not None and self.partitions < 1:
            raise ValueError(f"kafka.topics.partitions: {self.partitions} is not allowed; must be >= 1")
        if self.external is not None and "{device}" not in self.external and self.partitions is None:
            raise ValueError(f"streams.topic: {self.external!r} is one keyed topic; its partition count is needed")

    @classmethod
    def of(cls, run: str, devices: int, topics: Any = None, streams: Any = None,
           partitions: int | None = None) -> StreamLayout:
        """From `cfg.kafka.topics` (a TopicsConfig, or None: per-device) and `cfg.streams` (external streams:
        one keyed topic needs its `partitions`, as the cluster reports them)."""
        if streams is not None and streams.external:
            if streams.per_device:
                return cls(run, int(devices), external=streams.topic)
            return cls(run, int(devices), partitions, external=streams.topic,
                       partitioner=streams.partitioner or "consistent")
        if topics is None or getattr(topics, "layout", "per-device") != "partitioned":
            return cls(run, int(devices))
        p = topics.partitions
        return cls(run, int(devices), int(p) if p is not None else default_partitions(devices))

    @property
    def partitioned(self) -> bool:
        return self.partitions is not None

    @property
    def name(self) -> str:
        if self.external is not None:
            return f"external ({self.external}{'' if self.partitions is None else f', {self.partitions} partitions'})"
        return "partitioned" if self.partitioned else "per-device"

    def partition(self, device: int) -> int:
        """The partition of device `device` in its stream topic (and, partitioned, its injection topic)."""
        if not self.partitioned:
            return 0
        if self.external is not None:
            return key_partition(self.key(device), self.partitions, self.partitioner)
        return int(device) % self.partitions

    def stream(self, device: int) -> tuple[str, int]:
        """(topic, partition) of device `device`'s samples."""
        if self.external is not None:
            if self.partitioned:
                return self.external, self.partition(device)
            return self.external.replace("{device}", str(int(device))), 0
        if self.partitioned:
            return streams_topic(self.run), self.partition(device)
        return device_topic(self.run, device), 0

    def injection(self, device: int) -> tuple[str, int]:
        """(topic, partition) of the samples injected into device `device`."""
        if self.partitioned and self.external is None:
            return shared_injection_topic(self.run), self.partition(device)
        return injection_topic(self.run, device), 0

    def injection_keep(self, device: int) -> Callable[[bytes | None], bool] | None:
        """The filter of device `device`'s injection reader (None: its own topic, everything is its)."""
        return None if self.external is not None else self.keep(device)

    def key(self, device: int) -> bytes:
        return device_key(device)

    def injection_key(self, sender: int, target: int) -> bytes:
        """Per-device and external: the sender (the topic names the target); partitioned: the target (its
        reader's filter)."""
        return device_key(target if self.partitioned and self.external is None else sender)

    def sharing(self, device: int) -> list[int]:
        """The devices whose samples share device `device`'s partition (itself included), in order."""
        if not self.partitioned:
            return [int(device)]
        p = self.partition(device)
        if self.external is not None:
            return [d for d in range(self.devices) if self.partition(d) == p]
        return list(range(p, self.devices, self.partitions))

    def keep(self, device: int) -> Callable[[bytes | None], bool] | None:
        """The filter of device `device`'s reader on message keys (None: take everything, per-device): its own
        key; the partition's first device also takes keys of no device of the partition (to the DLQ)."""
        if not self.partitioned:
            return None
        own = self.key(device)
        sharing = self.sharing(device)
        if sharing[0] != int(device):
            return lambda k: k == own
        others = frozenset(self.key(d) for d in sharing if d != int(device))
        return lambda k: k not in others

    def share(self, device: int) -> float:
        """Device `device`'s expected fraction of its partition's messages (before any were read)."""
        return 1.0 / len(self.sharing(device))

    def topics(self) -> dict[str, int]:
        """The stream and injection topics the run creates -> partition count (the DLQ and meta topics are not
        here; external streams: only the injection topics, the stream topics are `external_topics`)."""
        if self.external is not None:
            return {injection_topic(self.run, d): 1 for d in range(self.devices)}
        if self.partitioned:
            return {streams_topic(self.run): self.partitions, shared_injection_topic(self.run): self.partitions}
        out: dict[str, int] = {}
        for d in range(self.devices):
            out[device_topic(self.run, d)] = 1
            out[injection_topic(self.run, d)] = 1
        return out

    def external_topics(self) -> dict[str, int | None]:
        """External streams: the topics the run reads and did not create -> the partition count they must have
        (1 for a topic per device; None: any, one keyed topic); {} otherwise."""
        if self.external is None:
            return {}
        if "{device}" in self.external:
            return {self.stream(d)[0]: 1 for d in range(self.devices)}
        return {self.external: None}

    def identity(self) -> dict[str, Any]:
        """What a producer restarted under this run must share (empty for per-device: fingerprints stay)."""
        if self.external is not None:
            return {"external": self.external, **({"partitioner": self.partitioner} if self.partitioned else {})}
        return {"layout": "partitioned", "partitions": self.partitions} if self.partitioned else {}
