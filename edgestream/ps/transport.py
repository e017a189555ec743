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

Outages: given the process's `Outage` (edgestream.kafka.outage; runtime.kafka_outage_s), a `Sender` keeps
its messages in librdkafka's queue through an outage (their `message.timeout.ms` is above the budget) and
its `send` waits until they are acknowledged, and a `Receiver` treats transport errors as Kafka not
answering (never as the end of its reader): both tell the outage when the wait starts and ends, ask Kafka
every few seconds whether it answers again (kafka.outage_calls.Probe), and raise KafkaUnavailable once the
wait has lasted the budget. Without an `Outage` they behave as before (a send fails after `timeout_s`).
With one, a topic whose leader went away (one broker of a cluster) is a wait for a new leader
(kafka.leader_watch.LeaderWatch), bounded by the same budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from edgestream.kafka.admin import create_topics
from edgestream.kafka.broker import MAX_MESSAGE_BYTES
from edgestream.kafka.outage import Outage
from edgestream.kafka.topic_names import dlq_topic, ps_topic
from edgestream.kafka.topic_reader import Raw, Receiver  # noqa: F401 - the PS's reader (moved to kafka/, no torch)
from edgestream.kafka.topic_settings import TopicSettings
from edgestream.kafka.topic_writer import DeliveryFailed, SendInterrupted, TopicWriter  # noqa: F401 - the PS's
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
                     security: Mapping[str, str] | None = None, *, settings: TopicSettings | None = None) -> list[str]:
    """Create the run's PS topics (and its DLQ, where rejected PS messages go) unless they exist, with the
    run's topic `settings` (replication, retention; kafka.topics); returns their names."""
    names = {push_topic(run): 1, **{pull_topic(run, i): 1 for i in range(world)}, dlq_topic(run): 1}
    create_topics(bootstrap, names, max_message_bytes=topic_bytes(model_bytes), security=security,
                  settings=settings)
    return list(names)


class Sender(TopicWriter):
    """Sends envelopes as chunks and waits until the broker acknowledged all of them (acks=all,
    idempotent): when `send` returns, the message is durable in its topic. With an `outage`, it waits
    through an outage (module doc); `stop()` true while it waits: SendInterrupted."""

    def __init__(self, bootstrap: str, max_bytes: int, security: Mapping[str, str] | None = None, *,
                 outage: Outage | None = None, stop: Callable[[], bool] | None = None) -> None:
        super().__init__(bootstrap, max_bytes, security, outage=outage, stop=stop, who="PS sender")

    def send(self, topic: str, env: Envelope, timeout_s: float = 60.0, *, wait: bool = True) -> int:
        """Produce `env` to `topic` (key: the worker); returns the bytes sent (chunk values)."""
        key = str(env.worker).encode()
        return self.send_values(topic, ((key, value, None) for value in chunks(env, self.max_bytes)), timeout_s,
                                wait=wait)
