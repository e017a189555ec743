"""LocalCluster: three KRaft nodes from the Maven jars answer as one cluster; a topic created with replication
factor 3 has three in-sync replicas (read back with the admin API); a node killed and restarted keeps the topic
readable, and the restarted node catches up (back in the ISR). Real brokers: the session `cluster` fixture."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import ConfigResource, NewTopic

from edgestream.kafka.admin import admin_client
from edgestream.kafka.broker import admin_answers
from edgestream.kafka.clients import consumer_config, producer_config


def _isr_of(cluster, topic: str, want: int, timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        isr = sorted(cluster.partition(topic, 0).isrs)
        if len(isr) == want or time.monotonic() > deadline:
            return isr
        time.sleep(0.5)


def _read_all(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list[bytes]:
    c = Consumer(consumer_config(bootstrap, f"g-{topic}", **{"auto.offset.reset": "earliest"}))
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_three_nodes_answer_as_one_cluster(cluster):
    assert len(cluster.bootstrap.split(",")) == 3
    assert [n.node_id for n in cluster.nodes] == [1, 2, 3]
    assert len({n.port for n in cluster.nodes}) == 3
    for n in cluster.nodes:
        assert n.running_pid() is not None
        assert admin_answers(f"{n.advertised_host}:{n.port}")  # each node answers on its own
        assert n.data_dir == cluster.data_dir / f"node-{n.node_id}"
    assert cluster.broker_ids() == [1, 2, 3]
    st = cluster.status()
    assert st["answering"] and st["brokers"] == [1, 2, 3]
    # the replication defaults, read back from a broker
    admin = admin_client(cluster.bootstrap)
    res = ConfigResource(ConfigResource.Type.BROKER, "2")
    cfg = admin.describe_configs([res])[res].result(30)
    assert cfg["default.replication.factor"].value == "3"
    assert cfg["min.insync.replicas"].value == "2"
    assert cfg["unclean.leader.election.enable"].value == "false"
    assert cfg["offsets.topic.replication.factor"].value == "3"


def test_rf3_topic_survives_a_killed_node(cluster, run_prefix):
    topic = f"{run_prefix}.rf3"
    admin = admin_client(cluster.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    assert _isr_of(cluster, topic, 3) == [1, 2, 3]
    assert sorted(cluster.partition(topic, 0).replicas) == [1, 2, 3]

    p = Producer(producer_config(cluster.bootstrap))
    for i in range(50):
        p.produce(topic, f"a{i}".encode())
    assert p.flush(30) == 0

    leader = cluster.leader_of(topic, 0)
    assert leader is not None
    cluster.kill(leader)
    assert leader.running_pid() is None
    # a new leader is elected among the two others, and the topic stays readable and writable
    # (each metadata answer comes from whichever broker the client asks, and brokers' metadata caches catch up with
    # the controller each on its own: the answer that names a new leader is the one checked, not a second read)
    deadline = time.monotonic() + 60
    new_leader = cluster.leader_of(topic, 0)
    while new_leader in (None, leader) and time.monotonic() < deadline:
        time.sleep(0.5)
        new_leader = cluster.leader_of(topic, 0)
    assert new_leader not in (None, leader)
    for i in range(50):
        p.produce(topic, f"b{i}".encode())
    assert p.flush(60) == 0
    got = _read_all(cluster.bootstrap, topic, 100)
    assert got == [f"a{i}".encode() for i in range(50)] + [f"b{i}".encode() for i in range(50)]
    assert leader.node_id not in _isr_of(cluster, topic, 2)

    # restarted on the same data dir and ports, the node catches up: back in the ISR
    port = leader.port
    cluster.restart(leader)
    assert leader.port == port and cluster.broker_ids() == [1, 2, 3]
    assert _isr_of(cluster, topic, 3) == [1, 2, 3]
    assert _read_all(f"{leader.advertised_host}:{leader.port}", topic, 100)[-1] == b"b49"
    admin.delete_topics([topic])
