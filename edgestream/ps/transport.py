"""The parameter server's Kafka side: its topics, a sender that chunks envelopes, a receiver that
reassembles them (DESIGN.md "Kafka conventions").

Topics of run `<run>` (one partition each, so a worker's messages stay in the order it sent them):

* `<run>.ps.push`: every worker's pushes, pull requests and join requests ("hello"), keyed by worker;
  the PS reads it from the offset its checkpoint names (edgestream.ps.server);
* `<run>.ps.pull.<i>`: the PS's replies to worker i (the model, its version, stop, the coordinator's info).

They are created explicitly, with a topic-level `max.message.bytes` sized for the model: one chunk of
the model (`chunk_bytes`: the whole model when it fits, at most `wire.DEFAULT_CHUNK_BYTES`) plus the
header, never below the producer's 1 MiB batch. Both the PS and every worker create them (idempotent),
so either may start first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from edgestream.kafka.admin import create_topics
from edgestream.kafka.broker import MAX_MESSAGE_BYTES
from edgestream.kafka.clients import consumer_config, produce, producer_config
from edgestream.kafka.topics import dlq_topic, ps_topic
from edgestream.ps.wire import DEFAULT_CHUNK_BYTES, Envelope, chunks

#: room for a chunk's header (run name included) and Kafka's record overhead
HEADER_ROOM = 64 * 1024
#: the producer batches up to 1 MiB: a topic must accept at least that
MIN_TOPIC_BYTES = 2 * 1024 * 1024
#: meta (loss trace, info) a message may carry beside the model's tensors
META_ROOM = 256 * 1024


def push_topic(run: str) -> str:
    return ps_topic(run, "push")


def pull_topic(run: str, worker: int) -> str:
    return ps_topic(run, f"pull.{worker}")


def chunk_bytes(model_bytes: int) -> int:
    """The body size of one chunk for a model of `model_bytes`: the whole message when it fits."""
    return max(1024, min(DEFAULT_CHUNK_BYTES, MAX_MESSAGE_BYTES - HEADER_ROOM, int(model_bytes) + META_ROOM))


def topic_bytes(model_bytes: int) -> int:
    """The topics' `max.message.bytes` for a model of `model_bytes`."""
    return min(MAX_MESSAGE_BYTES, max(MIN_TOPIC_BYTES, chunk_bytes(model_bytes) + HEADER_ROOM))


def ensure_ps_topics(bootstrap: str, run: str, world: int, model_bytes: int,
                     security: Mapping[str, str] | None = None) -> list[str]:
    """Create the run's PS topics (and its DLQ, where rejected PS messages go) unless they exist; returns
    their names."""
    names = {push_topic(run): 1, **{pull_topic(run, i): 1 for i in range(world)}, dlq_topic(run): 1}
    create_topics(bootstrap, names, max_message_bytes=topic_bytes(model_bytes), security=security)
    return list(names)


class DeliveryFailed(RuntimeError):
    """A message was not acknowledged by the broker."""


class Sender:
    """Sends envelopes as chunks and waits until the broker acknowledged all of them (acks=all,
    idempotent): when `send` returns, the message is durable in its topic."""

    def __init__(self, bootstrap: str, max_bytes: int, security: Mapping[str, str] | None = None) -> None:
        self.max_bytes = int(max_bytes)
        self._producer = Producer(producer_config(bootstrap, security, **{"linger.ms": 0}))
        self._errors: list[str] = []

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err.str()}")

    def send(self, topic: str, env: Envelope, timeout_s: float = 60.0, *, wait: bool = True) -> int:
        """Produce `env` to `topic` (key: the worker); returns the bytes sent (chunk values)."""
        values = chunks(env, self.max_bytes)
        key = str(env.worker).encode()
        sent = 0
        for value in values:
            produce(self._producer, topic, value, key=key, on_delivery=self._on_delivery)
            sent += len(value)
        self._producer.poll(0)
        if wait:
            self.flush(timeout_s)
        return sent

    def flush(self, timeout_s: float = 60.0) -> None:
        left = self._producer.flush(timeout_s)
        if left:
            raise DeliveryFailed(f"{left} message(s) were not acknowledged within {timeout_s:g} s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise DeliveryFailed(f"delivery failed: {errors[0]}")

    def close(self) -> None:
        self._producer.flush(10.0)


@dataclass
class Raw:
    """One Kafka message read from a PS topic: its offset and value."""

    offset: int
    value: bytes | None
    key: bytes | None


class Receiver:
    """A manually assigned reader of one single-partition PS topic from a given offset (`start`:
    an offset; None = the topic's current end, so only messages produced from now on are seen;
    "beginning" = its first message)."""

    def __init__(self, bootstrap: str, topic: str, group: str, start: int | str | None,
                 security: Mapping[str, str] | None = None) -> None:
        self.topic = topic
        self.consumer = Consumer(consumer_config(bootstrap, group, security,
                                                 **{"fetch.wait.max.ms": 5, "fetch.queue.backoff.ms": 1}))
        tp = TopicPartition(topic, 0)
        if start is None:
            offset = self._end(tp)
        elif start == "beginning":
            offset = OFFSET_BEGINNING
        else:
            offset = int(start)
        self.consumer.assign([TopicPartition(topic, 0, offset)])

    def _end(self, tp: TopicPartition, timeout_s: float = 30.0) -> int:
        """The partition's end offset (retried while a new topic's leader is being elected)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return int(self.consumer.get_watermark_offsets(tp, timeout=5.0)[1])
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def poll(self, timeout_s: float, max_messages: int = 256) -> Iterator[Raw]:
        """Messages that arrived within `timeout_s`: returns at the first one (with whatever else is already
        fetched), so a reply is handled the moment it lands; transport errors other than end-of-partition raise."""
        first = self.consumer.poll(max(0.0, timeout_s))
        if first is None:
            return
        batch = [first, *self.consumer.consume(max_messages - 1, timeout=0)] if max_messages > 1 else [first]
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(err)
            yield Raw(int(msg.offset()), msg.value(), msg.key())

    def close(self) -> None:
        self.consumer.close()
