"""A live run's mark on its broker: the orchestrator is a member of the consumer group `<run>.orchestrator`
for its whole life, so that another orchestrator of the same run id -- in another `--out` folder, on
another host, where the run directory's lock (a flock, per folder) cannot see it -- finds the run held.

Group membership is Kafka's own liveness signal: the member heartbeats from librdkafka's thread; one that
leaves (`RunHold.close`) is gone at once, one whose process died is dropped after `session.timeout.ms`
(10 s, edgestream.kafka.clients.consumer_config). A member must subscribe to an existing topic to join:
it subscribes to the run's DLQ and pauses what it is assigned, so it reads nothing and commits nothing.
Its client id names the holder (pid, host, run directory); `live_holder` reads it back.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import Consumer, KafkaException

from edgestream.kafka.admin import admin_client
from edgestream.kafka.clients import consumer_config
from edgestream.kafka.topic_names import dlq_topic, hold_group


class RunHold:
    """This process's membership in `hold_group(run)` until `close()` (a thread serves the consumer)."""

    def __init__(self, bootstrap: str, run: str, run_dir: Path, security: Mapping[str, str] | None = None) -> None:
        who = f"orchestrator pid {os.getpid()} on {socket.gethostname()}, run directory {run_dir}"
        self._consumer = Consumer(consumer_config(bootstrap, hold_group(run), security, **{"client.id": who}))

        def on_assign(consumer: Consumer, partitions: list) -> None:
            consumer.assign(partitions)
            consumer.pause(partitions)  # a member, not a reader

        self._consumer.subscribe([dlq_topic(run)], on_assign=on_assign)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"hold {run}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():  # poll serves the group's callbacks and keeps max.poll.interval.ms
            with contextlib.suppress(KafkaException, RuntimeError):
                self._consumer.poll(0.5)

    def close(self) -> None:
        """Leave the group (at once: the next orchestrator of this run id finds it free)."""
        self._stop.set()
        self._thread.join(timeout=5)
        with contextlib.suppress(KafkaException, RuntimeError):
            self._consumer.close()


def live_holder(bootstrap: str, run: str, security: Mapping[str, str] | None = None,
                timeout_s: float = 10.0) -> str | None:
    """Who holds `run` now (a live member's client id, see RunHold), or None when nobody does (or Kafka
    cannot say)."""
    group = hold_group(run)
    admin = admin_client(bootstrap, security)  # kept while the future runs (it resolves through the client)
    try:
        desc = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result(timeout=timeout_s + 5)
    except (KafkaException, ValueError, TypeError, TimeoutError):
        return None
    members = list(getattr(desc, "members", None) or [])
    return (members[0].client_id or "another orchestrator") if members else None
