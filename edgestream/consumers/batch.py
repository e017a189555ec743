"""`StreamBatch`: one batch of a device's Kafka stream, typed (what `KafkaStreamDataset` hands out)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch
from confluent_kafka import Message

from edgestream.streams.source import BatchFacts


@dataclass(slots=True)
class StreamBatch:
    """A batch: the model's inputs and labels, each row's origin, and what the stream did to get it.

    Rows are the device's own samples first (stream order), then the samples peers injected. `ack`
    and `inject` of the dataset read `next_offset`, `inj_next_offset` and `messages`.
    """

    x: torch.Tensor                 # float32 inputs (normalised), (n, *shape), on the dataset's torch_device
    labels: torch.Tensor            # the targets: int64 class indices (n,), or float32 (n,) / (n, K) (regression)
    devices: np.ndarray             # int64: the device each row was produced by (own rows: this device)
    seqs: np.ndarray                # int64: each row's sequence number in its device's stream
    produce_times: np.ndarray       # float64: unix seconds each row was produced at
    device: int                     # the stream's device
    step: int                       # this dataset's batch counter (0 for the first batch)
    target: int                     # b_i the batch policy asked for (or the explicit size)
    wait_s: float                   # time spent waiting for samples
    rate: float                     # measured arrival rate the batch policy used (samples/s; 0: not measured)
    dropped: int                    # own samples truncation skipped before this batch
    injected: int                   # rows injected by peers (the last `injected` rows)
    dlq: int                        # messages of this batch rejected to the DLQ
    buffer_samples: int             # own samples left buffered after taking (consumer lag)
    buffer_bytes: int
    next_offset: int                # commit this on the device topic to acknowledge the batch
    inj_next_offset: int | None     # ... and this on the injection topic (None: no injection channel)
    messages: list[Message] = field(default_factory=list, repr=False)  # the rows' Kafka messages, row order
    lag_s: float | None = 0.0       # seconds of data behind: age of the oldest unread own sample (None: unknown)
    lag_warning: str | None = None  # the warning line when the lag has kept growing (runtime.lag_warning_s)

    @property
    def n(self) -> int:
        """Rows in the batch (own + injected)."""
        return self.labels.shape[0]  # (not len(): torch's Tensor.__len__ is a Python call, per batch)

    def __len__(self) -> int:
        return self.labels.shape[0]

    @property
    def own(self) -> int:
        """Rows from the device's own stream (the first `own` rows)."""
        return self.n - self.injected

    @property
    def offsets(self) -> dict[str, int | None]:
        """{"dev": next_offset, "inj": inj_next_offset}: what acknowledging this batch commits (the form a
        checkpoint stores)."""
        return {"dev": self.next_offset, "inj": self.inj_next_offset}

    @property
    def facts(self) -> BatchFacts:
        """What the stream did to get this batch, as the trainer's step line reports it (the driver notes
        them: `StepMeter.note_batch`): rate and lag rounded to 3 decimals, the own rows' sequence numbers
        and labels (the first `own` rows: a peer may inject this device's own samples back)."""
        own = self.own
        return BatchFacts(self.injected, dropped=self.dropped, dlq=self.dlq, buffer_samples=self.buffer_samples,
                          buffer_bytes=self.buffer_bytes, rate=round(float(self.rate), 3),
                          lag_s=None if self.lag_s is None else round(self.lag_s, 3), lag_warning=self.lag_warning,
                          seqs=self.seqs[:own], labels=self.labels[:own])

    def pin_memory(self) -> StreamBatch:
        """This batch with `x` and `labels` in pinned memory (DataLoader(pin_memory=True) calls it); an
        `x` already on a GPU stays there."""
        return replace(self, x=self.x.pin_memory() if self.x.device.type == "cpu" else self.x,
                       labels=self.labels.pin_memory())
