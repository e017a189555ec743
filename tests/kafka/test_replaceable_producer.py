"""A producer whose librdkafka client wedged after an outage is replaced, and its queue moves with it.

After a broker restart librdkafka 2.16's clients sometimes never reconnect (CI: the stream producer and a
worker's PS sender got no answer for the rest of a 300 s budget while new clients did). The wedge is rare
and cannot be called up at will; a client talking to a dead address behaves the same way (no error, no
answer, ever) while the real broker answers a new client, so here each owner's producer is swapped for
one on a dead address with messages queued in it. Real broker (the session one), real clients; nothing
mocked.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgestream.consumers.dlq import DeadLetters
from edgestream.data import SampleSerde, SampleSpec, wire
from edgestream.kafka import consumer_config, device_topic, dlq_topic, outage_calls, replaceable_producer
from edgestream.kafka.outage import Outage
from edgestream.kafka.replaceable_producer import ReplaceableProducer
from edgestream.kafka.stream_ends import stream_ends
from edgestream.producers.stream_producer import StreamProducer
from edgestream.ps import transport
from edgestream.ps.frames import Envelope, peek
from edgestream.streams import build_rate_model

_EXAMPLES = itertools.count()
DEAD = "127.0.0.1:1"  # nobody listens: a client there never gets an answer, like a wedged one


@pytest.fixture
def quick_wedge(monkeypatch):
    """Check for a wedge after 0.3 s of outage instead of 60 (the rule, not its patience, is under test)."""
    monkeypatch.setattr(outage_calls, "REOPEN_AFTER_S", 0.3)
    monkeypatch.setattr(replaceable_producer, "REPLACE_AFTER_S", 0.3)


def _wedge(tx: ReplaceableProducer) -> None:
    """Swap in a producer with the same settings on a dead address (the one a wedged client behaves like)."""
    tx.producer = Producer({**tx.conf, "bootstrap.servers": DEAD, "log_level": 0})  # (its refusals unlogged)


def _topic(bootstrap: str, name: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=config or {})]).values():
        f.result()


def _read_all(bootstrap: str, topic: str, partitions: int, want: int, limit_s: float = 30.0) -> list:
    c = Consumer(consumer_config(bootstrap, f"{topic}.check"))
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    msgs, deadline = [], time.monotonic() + limit_s
    while len(msgs) < want and time.monotonic() < deadline:
        msgs += [m for m in c.consume(1000, timeout=0.3) if m.error() is None]
    msgs += [m for m in c.consume(1000, timeout=1.0) if m.error() is None]  # none more than sent
    c.close()
    return msgs


def _outage_of(seconds: float, bootstrap: str) -> Outage:
    outage = Outage(bootstrap, 300.0)
    outage.down("testing", since=time.monotonic() - seconds)
    return outage


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(partitions=st.integers(1, 3), n=st.integers(1, 400), with_headers=st.booleans(), keyed=st.booleans())
def test_a_wedged_producer_is_replaced_and_its_queue_arrives_once_in_order(bootstrap, run_prefix, quick_wedge,
                                                                           partitions, n, with_headers, keyed):
    topic = f"{run_prefix}.{next(_EXAMPLES)}"  # a topic per example (hypothesis may run one again)
    _topic(bootstrap, topic, partitions)
    reports = []
    outage = Outage(bootstrap, 300.0)
    tx = ReplaceableProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                              "message.timeout.ms": 600_000}, outage, on_delivery=lambda e, m: reports.append(e))
    _wedge(tx)
    for i in range(n):
        tx.produce(topic, f"{i}".encode(), key=f"k{i % 5}".encode() if keyed else None, partition=i % partitions,
                   headers=[("i", f"{i}".encode()), ("reason", b"x" * (i % 7))] if with_headers else None)
    # not an outage long enough yet: its own request fails and that is all
    with pytest.raises(KafkaException):
        tx.ask(0.5)
    assert tx.replaced == 0
    outage.down("testing", since=time.monotonic() - 1.0)
    assert tx.ask(0.5) is None and tx.replaced == 1 and tx.moved == n
    tx.producer.flush(30)
    assert reports == [None] * n  # each delivered once; the move's purges not reported
    got = _read_all(bootstrap, topic, partitions, n)
    assert len(got) == n
    for p in range(partitions):
        values = [int(m.value()) for m in got if m.partition() == p]
        assert values == list(range(p, n, partitions))  # the order it was produced in, per partition
    for m in got:
        i = int(m.value())
        assert m.key() == (f"k{i % 5}".encode() if keyed else None)
        assert (m.headers() or None) == ([("i", f"{i}".encode()), ("reason", b"x" * (i % 7))] if with_headers
                                         else None)


def test_a_producer_is_not_replaced_while_kafka_answers_nobody(quick_wedge):
    """Kafka gone for every client (an outage, not a wedge): the producer keeps its queue and waits."""
    outage = _outage_of(5.0, DEAD)
    tx = ReplaceableProducer({"bootstrap.servers": DEAD, "message.timeout.ms": 600_000, "log_level": 0}, outage)
    tx.produce("t", b"v")
    with pytest.raises(KafkaException):
        tx.ask(0.3)
    assert not tx.revive()
    assert tx.replaced == 0


def test_a_producer_is_not_replaced_before_a_minute_of_outage(bootstrap):
    """A producer waiting for a new leader (~10 s on a cluster) has messages in flight to the old one and is
    not wedged: before REPLACE_AFTER_S (60 s) of outage it is never replaced, whoever answers."""
    outage = _outage_of(20.0, bootstrap)
    tx = ReplaceableProducer({"bootstrap.servers": bootstrap, "message.timeout.ms": 600_000}, outage)
    _wedge(tx)
    tx.produce("t", b"v")
    with pytest.raises(KafkaException):
        tx.ask(0.3)
    assert not tx.revive() and tx.replaced == 0


def test_a_producer_that_answers_is_not_replaced(bootstrap, quick_wedge):
    outage = _outage_of(5.0, bootstrap)
    tx = ReplaceableProducer({"bootstrap.servers": bootstrap}, outage)
    assert not tx.revive() and tx.ask(2.0) is not None and tx.replaced == 0


def test_the_dlq_flushes_through_a_wedged_producer_with_its_headers(bootstrap, run_prefix, quick_wedge):
    _topic(bootstrap, dlq_topic(run_prefix), 1)  # made with the run's topics in a run
    dlq = DeadLetters(bootstrap, run_prefix, outage=Outage(bootstrap, 300.0))
    _wedge(dlq._tx)
    for i in range(5):
        dlq.send(f"bad {i}".encode(), f"reason {i}", source_topic="src", offset=i, key=b"k")
    dlq.flush()  # a second without progress at a time: an outage, then (0.3 s on) the producer is replaced
    assert dlq._tx.replaced == 1
    got = sorted(_read_all(bootstrap, dlq_topic(run_prefix), 1, 5), key=lambda m: m.offset())
    assert [m.value() for m in got] == [f"bad {i}".encode() for i in range(5)]
    assert [dict(m.headers()) for m in got] == [{"reason": f"reason {i}".encode(), "source_topic": b"src",
                                                 "source_offset": f"{i}".encode()} for i in range(5)]


def test_a_dlq_copy_the_broker_refuses_is_counted_and_said(bootstrap, run_prefix, caplog):
    """A rejected message larger than the DLQ topic takes: not dropped silently -- counted, said at once and
    at the flush; the copies the broker takes are there."""
    _topic(bootstrap, dlq_topic(run_prefix), 1, {"max.message.bytes": "4096"})
    dlq = DeadLetters(bootstrap, run_prefix, outage=Outage(bootstrap, 300.0))
    with caplog.at_level("ERROR", logger="edgestream.consumers.dlq"):
        for i, size in enumerate((10, 20_000, 30, 50_000)):  # one at a time (the broker refuses a whole batch)
            dlq.send(bytes(size), f"reason {i}", source_topic="src", offset=i)
            dlq.flush()
    assert dlq.count == 4 and dlq.failed == 2
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3 and "could not be copied to" in said[0] and dlq_topic(run_prefix) in said[0], said
    assert said[1].startswith("DLQ: 1 of the 2 rejected message(s) sent were not copied to"), said
    assert said[2].startswith("DLQ: 1 of the 4 rejected message(s) sent were not copied to"), said
    got = sorted(_read_all(bootstrap, dlq_topic(run_prefix), 1, 2), key=lambda m: m.offset())
    assert [len(m.value()) for m in got] == [10, 30]
    dlq.flush()  # nothing new: nothing said
    assert len(caplog.records) == 3


def test_a_ps_send_rides_through_a_wedged_producer(bootstrap, run_prefix, quick_wedge):
    transport.ensure_ps_topics(bootstrap, run_prefix, 1, 1000)
    topic = transport.push_topic(run_prefix)
    tx = transport.Sender(bootstrap, 100_000, outage=Outage(bootstrap, 300.0))
    try:
        tx.send(topic, Envelope(run_prefix, "hello", 0, 1, 0, {}))
        _wedge(tx._tx)
        tx.send(topic, Envelope(run_prefix, "hello", 0, 2, 0, {}))  # waits: an outage, then a replacement
        assert tx._tx.replaced == 1 and not tx.outage.waiting
        got = sorted(_read_all(bootstrap, topic, 1, 2), key=lambda m: m.offset())
        assert [peek(m.value()).seq for m in got] == [1, 2]
    finally:
        tx.close()


def test_a_stream_producer_replaces_its_wedged_client_and_every_sample_arrives_once(bootstrap, run_prefix,
                                                                                      quick_wedge, monkeypatch):
    """Its client wedged mid-stream (librdkafka says all brokers are down, or it is silent for SILENT_S with
    samples queued), no answer to its own metadata request while a new client gets one: the stream producer
    moves its queue to a new client and streams on; each device's topic holds its samples 0..n-1 once, in
    order, and the summary accounts for every one."""
    monkeypatch.setattr(replaceable_producer, "SILENT_S", 1.0)
    rng = np.random.default_rng(0)
    devices, n_data = 3, 300
    x = rng.integers(0, 255, size=(n_data, 4, 4), dtype=np.uint8)
    y = rng.integers(0, 10, size=n_data)
    serde = SampleSerde(SampleSpec(np.uint8, (4, 4), 10))
    rates = build_rate_model({"distribution": "constant", "rate": 200}, None, devices, 1)
    sp = StreamProducer(bootstrap, run_prefix, list(range(devices)), x, y,
                        [np.arange(d, n_data, devices) for d in range(devices)], rates, serde, seed=2,
                        outage_s=300.0, note=lambda line: None)
    t0, wedged = time.monotonic(), []

    def wedge_midway() -> bool:  # 1.5 s into the stream the client wedges (what it had is delivered first)
        if not wedged and time.monotonic() - t0 > 1.5:
            wedged.append(sp.producer.flush(10))
            _wedge(sp._tx)
        return False

    summary = sp.run_for(10.0, should_stop=wedge_midway)  # replaced within ~1-3 s of it
    assert wedged == [0] and sp._tx.replaced == 1 and sp._tx.moved > 0
    assert summary.failed == summary.unacknowledged == 0 and summary.delivered == summary.produced > 0
    ends = stream_ends(bootstrap, run_prefix, range(devices))
    for d in range(devices):
        got = sorted(_read_all(bootstrap, device_topic(run_prefix, d), 1, ends[d]), key=lambda m: m.offset())
        assert [SampleSerde.header(m.value()).seq for m in got] == list(range(sp.stats[d].delivered)), d


def test_a_device_producer_replaces_its_wedged_client_and_every_sample_arrives_once(bootstrap, run_prefix,
                                                                                     quick_wedge, monkeypatch):
    """`edgestream.DeviceProducer` (a device's own Python): its client wedged with samples queued, no answer to
    its own metadata request while a new client gets one: `send` or `flush` replaces it and delivers them; the device's
    topic holds seq 0..n-1 once, in order, each with its own values."""
    from edgestream.kafka.topic_provision import ensure_run_topics
    from edgestream.producers.device import DeviceProducer

    monkeypatch.setattr(replaceable_producer, "SILENT_S", 1.0)
    ensure_run_topics(bootstrap, run_prefix, [0, 1])
    dev = DeviceProducer(bootstrap, run_prefix, 1, outage_s=120)
    for k in range(10):
        dev.send(np.full((2, 3), k, np.float32), float(k))
    assert dev.flush(30) == 0
    _wedge(dev._tx)
    for k in range(10, 60):
        dev.send(np.full((2, 3), k, np.float32), float(k))
    # replaced as soon as the outage has lasted (0.3 s here): in a later `send` or in `flush`
    assert dev.flush(60) == 0 and dev._tx.replaced == 1 and 0 < dev._tx.moved <= 50
    dev.close()
    assert dev.sent == dev.delivered == 60 and dev.failed == dev.unacknowledged == 0
    got = sorted(_read_all(bootstrap, device_topic(run_prefix, 1), 1, 60), key=lambda m: m.offset())
    assert [m.key() for m in got] == [b"1"] * 60
    samples = [wire.decode_sample(m.value()) for m in got]
    assert [s.seq for s in samples] == list(range(60))
    assert all((s.x == s.seq).all() and s.x.shape == (2, 3) and float(s.target) == s.seq for s in samples)
