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

`StreamLayout` is the one object the producer, the readers, the restart logic, status and topic creation ask.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgestream.config_kafka import DEFAULT_MAX_PARTITIONS
from edgestream.kafka.topics import device_topic, injection_topic

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
    """A sample's message key: its device id in decimal (both layouts)."""
    return str(int(device)).encode()


@dataclass(frozen=True)
class StreamLayout:
    """The topic, partition and key of each device's stream and injection topic for run `run` of `devices`
    devices; `partitions` None is the per-device layout."""

    run: str
    devices: int
    partitions: int | None = None

    def __post_init__(self) -> None:
        if self.partitions is not None and self.partitions < 1:
            raise ValueError(f"kafka.topics.partitions: {self.partitions} is not allowed; must be >= 1")

    @classmethod
    def of(cls, run: str, devices: int, topics: Any = None) -> StreamLayout:
        """From `cfg.kafka.topics` (a TopicsConfig, or None: per-device)."""
        if topics is None or getattr(topics, "layout", "per-device") != "partitioned":
            return cls(run, int(devices))
        p = topics.partitions
        return cls(run, int(devices), int(p) if p is not None else default_partitions(devices))

    @property
    def partitioned(self) -> bool:
        return self.partitions is not None

    @property
    def name(self) -> str:
        return "partitioned" if self.partitioned else "per-device"

    def partition(self, device: int) -> int:
        """The partition of device `device` in its stream (and injection) topic."""
        return int(device) % self.partitions if self.partitioned else 0

    def stream(self, device: int) -> tuple[str, int]:
        """(topic, partition) of device `device`'s samples."""
        if self.partitioned:
            return streams_topic(self.run), self.partition(device)
        return device_topic(self.run, device), 0

    def injection(self, device: int) -> tuple[str, int]:
        """(topic, partition) of the samples injected into device `device`."""
        if self.partitioned:
            return shared_injection_topic(self.run), self.partition(device)
        return injection_topic(self.run, device), 0

    def key(self, device: int) -> bytes:
        return device_key(device)

    def injection_key(self, sender: int, target: int) -> bytes:
        """Per-device: the sender (the topic names the target); partitioned: the target (its reader's filter)."""
        return device_key(target if self.partitioned else sender)

    def sharing(self, device: int) -> list[int]:
        """The devices whose samples share device `device`'s partition (itself included), in order."""
        if not self.partitioned:
            return [int(device)]
        p = self.partition(device)
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
        """Stream and injection topics of the run -> partition count (the DLQ and meta topics are not here)."""
        if self.partitioned:
            return {streams_topic(self.run): self.partitions, shared_injection_topic(self.run): self.partitions}
        out: dict[str, int] = {}
        for d in range(self.devices):
            out[device_topic(self.run, d)] = 1
            out[injection_topic(self.run, d)] = 1
        return out

    def identity(self) -> dict[str, Any]:
        """What a producer restarted under this run must share (empty for per-device: fingerprints stay)."""
        return {"layout": "partitioned", "partitions": self.partitions} if self.partitioned else {}
