"""Shared client-config builders for confluent-kafka producers, consumers and admin clients.

Security settings (security.protocol, sasl.*, ssl.*) pass through from the experiment config's
`runtime.kafka_client`, so the same code talks to the managed local broker and to a broker on a WAN.

librdkafka's own log lines (connection refused, broker down, ...) never go raw to the terminal: every
client routes them to the Python logger `edgestream.kafka.client` (a NullHandler by default; an
application that wants them, e.g. the trainer, attaches a file handler to it or to `edgestream`).
While a broker is down, librdkafka repeats the same line (a refused connection) up to 20 times a second;
each distinct line is logged at most once every REPEAT_S seconds, the next one saying how many it held back.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from edgestream.kafka.broker import MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

#: a librdkafka line repeated within this many seconds is held back (counted, said with the next one)
REPEAT_S = 10.0


class _Repeats(logging.Filter):
    """Holds back a line that repeats one logged less than REPEAT_S ago (numbers aside: "after 0ms")."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, list] = {}  # line without numbers -> [when last logged, lines held back since]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < REPEAT_S:
                seen[1] += 1
                return False
            if len(self._seen) > 1000:
                self._seen.clear()
            held = seen[1] if seen is not None else 0
            self._seen[key] = [now, 0]
        if held:
            record.msg, record.args = f"{record.getMessage()} (and {held} more like it in {REPEAT_S:g} s)", None
        return True


#: where librdkafka's log lines go (served by the client's poll/consume calls)
CLIENT_LOGGER = logging.getLogger("edgestream.kafka.client")
CLIENT_LOGGER.addHandler(logging.NullHandler())
CLIENT_LOGGER.addFilter(_Repeats())


#: librdkafka's socket.timeout.ms for every client (client_config)
SOCKET_TIMEOUT_MS = 30_000


def client_config(bootstrap: str, security: Mapping[str, str] | None = None, **overrides) -> dict:
    """Base settings every client shares: bootstrap servers, pass-through security settings, and
    librdkafka's logs routed to CLIENT_LOGGER (never printed raw to stderr)."""
    conf = {"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER,
            # the longest wait between two connection attempts to a broker that is down (librdkafka doubles it
            # from reconnect.backoff.ms up to this; its default of 10 s left a client idle for up to 10 s after
            # its broker was back, in every outage, bounce and restarted node)
            "reconnect.backoff.max.ms": 1000,
            # how long a request may go unanswered before the connection is dropped and the request retried,
            # on a partition's new leader if there is one (librdkafka: 60 s; the Java clients' request.timeout.ms:
            # 30 s). A broker cut off without a reset (a link down, a silent network) answers nothing: a producer
            # then keeps its messages for that partition queued and its broker thread busy-polls the writable
            # socket at a full core until this expires (librdkafka 2.16, tests/system/test_kafka_cluster_netns.py),
            # and a reader waits as long. 30 s halves both and still lets a 1 MB batch cross a slow edge link
            # (a slower one: runtime.kafka_client's socket.timeout.ms, which overrides this).
            "socket.timeout.ms": SOCKET_TIMEOUT_MS}
    conf.update(dict(security or {}))
    conf.update({k.replace("_", "."): v for k, v in overrides.items()})
    return conf


#: seconds a producer's messages may wait in its local queue beyond the outage budget before librdkafka
#: fails them (message.timeout.ms): the process gives up first (runtime.kafka_outage_s), never a message
DELIVERY_MARGIN_S = 60.0


def producer_config(bootstrap: str, security: Mapping[str, str] | None = None, *, outage_s: float | None = None,
                    **overrides) -> dict:
    """Idempotent producer batching for throughput; never flush per message. `outage_s` (the run's
    runtime.kafka_outage_s): its messages stay queued through an outage of that long (message.timeout.ms =
    budget + DELIVERY_MARGIN_S; librdkafka's default of 300 s would fail them at a 300 s budget)."""
    conf = client_config(bootstrap, security)
    conf.update({
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1024 * 1024,
        "message.max.bytes": MAX_MESSAGE_BYTES,
        "queue.buffering.max.kbytes": 256 * 1024,
        "queue.buffering.max.messages": 1_000_000,
        "compression.type": "none",
    })
    if outage_s is not None:
        conf["message.timeout.ms"] = int((float(outage_s) + DELIVERY_MARGIN_S) * 1000)
    conf.update(overrides)
    return conf


def consumer_config(bootstrap: str, group: str, security: Mapping[str, str] | None = None, **overrides) -> dict:
    """Consumer of a named group, starting at the earliest offset, committing only on explicit ack."""
    conf = client_config(bootstrap, security)
    conf.update({
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": MAX_MESSAGE_BYTES,
        # how long the broker holds a fetch while no data is there (new data ends it at once, since
        # fetch.min.bytes is 1): a caught-up trainer's empty fetch every 50 ms cost the broker ~7 ms of
        # CPU per trainer step (benchmarks/bench_vs_ddp.py); librdkafka's default is 500
        "fetch.wait.max.ms": 500,
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 1000,
        # librdkafka pauses fetching this long once its local queue is full (default 1000 ms): a trainer
        # draining a backlog faster than that starved for up to a second at a time
        "fetch.queue.backoff.ms": 10,
    })
    conf.update(overrides)
    return conf


def admin_config(bootstrap: str, security: Mapping[str, str] | None = None, **overrides) -> dict:
    conf = client_config(bootstrap, security)
    conf.update(overrides)
    return conf


def admin_client(bootstrap: str, security: Mapping[str, str] | None = None) -> AdminClient:
    """An admin client of the cluster at `bootstrap` (librdkafka's log at level 3: errors only)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(admin_config(bootstrap, security, log_level=3))


def produce(producer, topic: str, value, *, key=None, headers=None, on_delivery=None, wait_s: float = 0.05,
            partition: int | None = None) -> None:
    """`producer.produce(...)`, waiting while librdkafka's local queue is full (serving delivery reports
    meanwhile) instead of dropping the message."""
    kwargs = {"value": value, "key": key}
    if partition is not None:
        kwargs["partition"] = partition
    if headers is not None:
        kwargs["headers"] = headers
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(wait_s)
