"""A device topic's messages, hand-made and read back: what the consumer, hostile-message, layout and lag tests
write with a plain producer and check in the topics and the DLQ.

* `_digit(label, device, seq, shape, dtype)`: a valid wire message of a digits-like sample (all values 7);
  `_with_header(value, **fields)`: the message with header fields replaced (wire.HEADER's names);
* `_read_all(bootstrap, topic, want, group, limit_s)`: `want` messages of partition 0, more when it holds more;
* `drain(ds, size, limit_s, count)`: every batch a dataset hands out until its stream has no more (or `count`
  batches), each acknowledged;
* `dlq_reasons(bootstrap, run, want)`: the DLQ's messages counted by reason.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest
from confluent_kafka import Consumer, TopicPartition

from edgestream.data import encode_sample
from edgestream.data.wire import HEADER
from edgestream.kafka import consumer_config, dlq_topic


def _read_all(bootstrap: str, topic: str, want: int, group: str, limit_s: float = 30.0) -> list:
    """At least `want` messages of partition 0 when it has them, and every one it holds (its end offset, read once
    `want` are in: a partition holding more than `want` hands them all over)."""
    c = Consumer(consumer_config(bootstrap, group))
    tp = TopicPartition(topic, 0, 0)
    c.assign([tp])
    msgs, deadline = [], time.monotonic() + limit_s
    end = want
    while time.monotonic() < deadline:
        while len(msgs) < end and time.monotonic() < deadline:
            msgs += [m for m in c.consume(500, timeout=0.3) if m.error() is None]
        end = max(end, c.get_watermark_offsets(tp, timeout=10)[1])
        if len(msgs) >= end:
            break
    c.close()
    return msgs


def _digit(label: int = 3, device: int = 0, seq: int = 0, shape=(1, 8, 8), dtype=np.uint8) -> bytes:
    return encode_sample(np.full(shape, 7, dtype), label, device, seq, time.time())


def _with_header(value: bytes, **fields) -> bytes:
    """`value` with header fields replaced (names of wire.HEADER's fields)."""
    names = ("magic", "version", "dtype", "ndim", "target", "d0", "d1", "d2", "d3", "label", "device", "seq", "t")
    parts = dict(zip(names, HEADER.unpack_from(value, 0), strict=True))
    parts.update(fields)
    return HEADER.pack(*(parts[n] for n in names)) + value[HEADER.size:]


def drain(ds, size: int | None = None, limit_s: float = 120.0, count: int | None = None) -> list:
    """Every batch until the stream holds no more for a batch (next_batch times out); with `count`, that many
    batches and no wait for the end (a test that wrote the stream checks where the last batch ends instead)."""
    batches, deadline = [], time.monotonic() + limit_s
    while time.monotonic() < deadline and (count is None or len(batches) < count):
        b = ds.next_batch(size=size)
        if b is None:
            return batches
        batches.append(b)
        ds.ack(b)
    if count is not None and len(batches) == count:
        return batches
    pytest.fail("the stream did not end")


def dlq_reasons(bootstrap: str, run: str, want: int) -> Counter:
    msgs = _read_all(bootstrap, dlq_topic(run), want, f"{run}.dlqcheck")
    return Counter(dict(m.headers())["reason"].decode() for m in msgs)
