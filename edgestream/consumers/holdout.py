"""What a run is evaluated on: `EvalData.get()` -> (x, y) tensors, or None while there is nothing to score.

- `FixedEvalSet`: a dataset's test split (internal streams) or an `eval.path` file (external streams),
  normalised as the dataset says, on the evaluator's device.
- `HoldoutSet` (`eval.holdout: f`, external streams): the held-out records of every device's stream
  (edgestream.data.holdout: the same (device, offset) pairs the trainers skip). It reads every stream of the
  run with its own assigned consumer (no group offsets: it never commits), from where the run's `start` says
  (earliest: each stream's first record; latest: its end when the evaluator starts; a time), decodes the
  held-out records with the run's record decoder and keeps the newest `max_samples`. Each `get()` first takes
  what arrived since the last one (up to each partition's end then; at most `refresh_s` of reading), so the
  set grows with the streams. Malformed held-out records are counted (`rejected`) and left out; the trainers
  never see them, so they do not reach the DLQ. The extra reader costs one more read of every stream (the
  hold-out cannot be found otherwise).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


class FixedEvalSet:
    """A fixed evaluation split (x already normalised), moved to `device` once."""

    def __init__(self, x: Any, y: Any, device: Any = None) -> None:
        self.x, self.y = (x, y) if device is None else (x.to(device), y.to(device))

    def get(self) -> tuple[Any, Any] | None:
        return (self.x, self.y) if len(self.y) else None

    def close(self) -> None:
        pass


class HoldoutSet:
    """The held-out records of run `run`'s external streams (module doc)."""

    def __init__(self, bootstrap: str, run: str, layout: Any, decoder: Any, devices: int, fraction: float,
                 max_samples: int, *, start: str | int = "earliest", security: dict | None = None,
                 task_labels: bool = True, device: Any = None, refresh_s: float = 5.0) -> None:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

        from edgestream.kafka.clients import consumer_config

        self.layout, self.decoder, self.devices = layout, decoder, int(devices)
        self.fraction, self.max_samples, self.refresh_s = float(fraction), int(max_samples), float(refresh_s)
        self.labels, self.device = task_labels, device
        self.rejected = 0
        self._x: deque[np.ndarray] = deque()
        self._y: deque[np.ndarray] = deque()
        self._kept = 0
        self._cached: tuple[Any, Any] | None = None
        # which (topic, partition) holds which devices; a topic per device names its device
        self._topic_device: dict[str, int] = {}
        where: set[tuple[str, int]] = set()
        for d in range(self.devices):
            topic, partition = layout.stream(d)
            where.add((topic, partition))
            if not layout.partitioned:
                self._topic_device[topic] = d
        self.consumer = Consumer(consumer_config(bootstrap, f"{run}.holdout", security,
                                                 **{"queued.max.messages.kbytes": 16384}))
        tps = []
        for topic, partition in sorted(where):
            if start == "earliest":
                tps.append(TopicPartition(topic, partition, OFFSET_BEGINNING))
            elif start == "latest":
                tps.append(TopicPartition(topic, partition, OFFSET_END))
            else:
                tps.append(TopicPartition(topic, partition, int(start)))
        if not isinstance(start, str):  # a time: the first offset at or after it
            tps = [tp if tp.offset >= 0 else TopicPartition(tp.topic, tp.partition, OFFSET_END)
                   for tp in self.consumer.offsets_for_times(tps, timeout=10.0)]
        self.consumer.assign(tps)
        self._parts = [(tp.topic, tp.partition) for tp in tps]
        # the next offset to read per partition (a time's resolved offset; earliest: the low end, latest: the end)
        self._next: dict[tuple[str, int], int] = {(tp.topic, tp.partition): tp.offset for tp in tps if tp.offset >= 0}
        self._start = start

    def _device_of(self, m: Any) -> int | None:
        d = self._topic_device.get(m.topic())
        if d is not None:
            return d
        try:
            d = int(m.key())
        except (TypeError, ValueError):
            return None
        return d if 0 <= d < self.devices else None

    def refresh(self) -> int:
        """Take what arrived, up to each partition's end as of now (at most `refresh_s` of reading); return
        how many held-out records were added."""
        from confluent_kafka import TopicPartition

        from edgestream.data.holdout import held_out
        from edgestream.data.validate import DeviceRule

        deadline = time.monotonic() + self.refresh_s
        # read up to each partition's end as of now (a fresh assignment's first fetch takes a moment)
        ends = {}
        for part in self._parts:
            low, high = self.consumer.get_watermark_offsets(TopicPartition(*part), timeout=self.refresh_s)
            ends[part] = (low, high)
        added = 0
        while time.monotonic() < deadline:
            behind = any(self._next.get(p, hi if self._start == "latest" else lo) < hi
                         for p, (lo, hi) in ends.items())
            msgs = self.consumer.consume(5000, timeout=0.05 if not behind else 0.2)
            msgs = [m for m in msgs if m.error() is None]
            for m in msgs:
                self._next[(m.topic(), m.partition())] = m.offset() + 1
            if not msgs:
                if behind:
                    continue
                break
            by_device: dict[int, list] = {}
            for m in msgs:
                d = self._device_of(m)
                if d is not None:
                    by_device.setdefault(d, []).append(m)
            for d, group in by_device.items():
                offsets = np.fromiter((m.offset() for m in group), np.int64, len(group))
                mask = held_out(d, offsets, self.fraction)
                if not mask.any():
                    continue
                chosen = [m for m, h in zip(group, mask.tolist(), strict=True) if h]
                out, bad = self.decoder.decode(chosen, DeviceRule(d, self.devices))
                self.rejected += len(bad)
                if out is not None and len(out):
                    self._add(np.asarray(out.x, dtype=np.float32), np.asarray(out.labels))
                    added += len(out)
        if added:
            self._cached = None
        return added

    def _add(self, x: np.ndarray, y: np.ndarray) -> None:
        self._x.append(x)
        self._y.append(y)
        self._kept += len(y)
        while self._kept - len(self._y[0]) >= self.max_samples:  # the newest max_samples stay
            self._kept -= len(self._y.popleft())
            self._x.popleft()

    def __len__(self) -> int:
        return min(self._kept, self.max_samples)

    def get(self) -> tuple[Any, Any] | None:
        """(x, y) tensors of the held-out records so far (the newest max_samples), None while there are none."""
        import torch

        self.refresh()
        if not self._kept:
            return None
        if self._cached is None:
            x = np.concatenate(list(self._x))[-self.max_samples:]
            y = np.concatenate(list(self._y))[-self.max_samples:]
            yt = torch.from_numpy(np.ascontiguousarray(y))
            yt = yt.long() if self.labels else yt.float()
            xt = torch.from_numpy(np.ascontiguousarray(x))
            if self.device is not None:
                xt, yt = xt.to(self.device), yt.to(self.device)
            self._cached = (xt, yt)
        return self._cached

    def close(self) -> None:
        self.consumer.close()
