"""A device topic's messages, hand-made and read back: what the consumer, hostile-message, layout and lag tests
write with a plain producer and check in the topics and the DLQ.

* `_digit(label, device, seq, shape, dtype)`: a valid wire message of a digits-like sample (all values 7);
  `_with_header(value, **fields)`: the message with header fields replaced (wire.HEADER's names);
* `_read_all(bootstrap, topic, want, group, limit_s)`: up to `want` messages of partition 0 (and a moment more);
* `drain(ds, size, limit_s)`: every batch a dataset hands out until its stream has no more, each acknowledged;
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
    c = Consumer(consumer_config(bootstrap, group))
    c.assign([TopicPartition(topic, 0, 0)])
    msgs, deadline = [], time.monotonic() + limit_s
    while len(msgs) < want and time.monotonic() < deadline:
        msgs += [m for m in c.consume(500, timeout=0.3) if m.error() is None]
    # and a moment more: nothing beyond `want` may be there
    msgs += [m for m in c.consume(500, timeout=0.5) if m.error() is None]
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


def drain(ds, size: int | None = None, limit_s: float = 120.0) -> list:
    """Every batch until the stream holds no more for a batch (next_batch times out)."""
    batches, deadline = [], time.monotonic() + limit_s
    while time.monotonic() < deadline:
        b = ds.next_batch(size=size)
        if b is None:
            return batches
        batches.append(b)
        ds.ack(b)
    pytest.fail("the stream did not end")


def dlq_reasons(bootstrap: str, run: str, want: int) -> Counter:
    msgs = _read_all(bootstrap, dlq_topic(run), want, f"{run}.dlqcheck")
    return Counter(dict(m.headers())["reason"].decode() for m in msgs)
