"""The managed broker against real Kafka: durability across restart, side-by-side instances, errors."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from factories import free_port

from edgestream.kafka import (
    BrokerError,
    LocalBroker,
    consumer_config,
    create_topics,
    delete_run_topics,
    list_topics,
    producer_config,
)
from edgestream.kafka.admin import KafkaUnavailable, wait_for_broker

N = 10_000


def _produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer(producer_config(bootstrap))
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"0", value=i.to_bytes(8, "little"))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(30) == 0


def _consume_all(bootstrap: str, topic: str, n: int, group: str) -> list[int]:
    c = Consumer(consumer_config(bootstrap, group))
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[int] = []
    idle = 0
    while len(got) < n and idle < 20:
        msgs = c.consume(2000, timeout=0.5)
        idle = idle + 1 if not msgs else 0
        for m in msgs:
            assert m.error() is None, m.error()
            got.append(int.from_bytes(m.value(), "little"))
    c.close()
    return got


def test_produce_consume_restart_keeps_data(tmp_path):
    broker = LocalBroker(tmp_path / "b1")
    broker.start()
    try:
        topic = "durable.dev.0"
        create_topics(broker.bootstrap, {topic: 1})
        assert create_topics(broker.bootstrap, {topic: 1}) == []  # idempotent
        _produce(broker.bootstrap, topic, N)
        assert _consume_all(broker.bootstrap, topic, N, "g1") == list(range(N))
        port = broker.port
        broker.stop()
        assert broker.status()["running"] is False
        again = LocalBroker(tmp_path / "b1")
        again.start()
        broker = again
        assert again.port == port  # restart reuses the recorded port
        assert _consume_all(again.bootstrap, topic, N, "g2") == list(range(N))
    finally:
        broker.stop()


def test_two_brokers_side_by_side(tmp_path, bootstrap):
    with LocalBroker(tmp_path / "other") as other:
        assert other.bootstrap != bootstrap
        create_topics(other.bootstrap, ["only-here.dev.0"])
        assert "only-here.dev.0" in list_topics(other.bootstrap)
        assert "only-here.dev.0" not in list_topics(bootstrap)
        assert other.status()["answering"]


def test_port_in_use_is_named(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(BrokerError, match=f"port {port} is in use.*--port"):
            LocalBroker(tmp_path / "busy", port=port).start()


def test_topic_admin_and_run_cleanup(bootstrap, run_prefix):
    names = {f"{run_prefix}.dev.{i}": 1 for i in range(3)} | {f"{run_prefix}.dlq": 1}
    created = create_topics(bootstrap, names)
    assert sorted(created) == sorted(names)
    assert list_topics(bootstrap, f"{run_prefix}.") == sorted(names)
    assert sorted(delete_run_topics(bootstrap, run_prefix)) == sorted(names)


def test_unreachable_broker_names_the_address():
    port = free_port()
    with pytest.raises(KafkaUnavailable, match=f"127.0.0.1:{port}"):
        wait_for_broker(f"127.0.0.1:{port}", attempts=2, first_backoff_s=0.2)


def test_cli_start_status_stop(tmp_path):
    from edgestream.kafka import free_port

    port = free_port()
    cli = [sys.executable, "-m", "edgestream.cli", "broker"]
    data = ["--data-dir", str(tmp_path / "cli")]
    start = subprocess.run([*cli, "start", "--port", str(port), *data], capture_output=True, text=True, timeout=180)
    try:
        assert start.returncode == 0, start.stderr
        assert start.stdout.strip() == f"127.0.0.1:{port}"
        status = subprocess.run([*cli, "status", *data], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and "running" in status.stdout and "answering" in status.stdout
    finally:
        stop = subprocess.run([*cli, "stop", *data], capture_output=True, text=True, timeout=60)
    assert stop.returncode == 0 and "stopped" in stop.stdout
    status = subprocess.run([*cli, "status", *data], capture_output=True, text=True, timeout=60)
    assert status.returncode == 1 and "not running" in status.stdout
