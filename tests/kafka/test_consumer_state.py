"""KafkaStreamDataset.state_dict / load_state_dict against a real broker: a restored dataset continues
exactly after the batches it had handed out (acknowledged or not), whatever its consumer groups had
committed -- behind, deleted, or ahead of the state."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import torch
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from edgestream.consumers import KafkaStreamDataset, StreamBatch
from edgestream.consumers.device_stream import trainer_group
from edgestream.data import Affine, SampleSerde, SampleSpec
from edgestream.kafka import consumer_config, device_topic, injection_topic, producer_config
from edgestream.kafka.topic_provision import ensure_run_topics

INJ_SEQ0 = 10_000  # injected samples (device 1's) are numbered from here


def _send(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer(producer_config(bootstrap))
    for v in values:
        p.produce(topic, value=v, key=b"x")
    assert p.flush(30) == 0


def _committed(bootstrap: str, run: str, kind: str) -> int:
    topic = device_topic(run, 0) if kind == "dev" else injection_topic(run, 0)
    c = Consumer(consumer_config(bootstrap, trainer_group(run, 0, kind)))
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        c.close()


def _dataset(bootstrap: str, run: str, serde: SampleSerde, batch: int) -> KafkaStreamDataset:
    return KafkaStreamDataset(bootstrap, run, 0, num_devices=2, serde=serde, batch={"policy": "fixed", "size": batch},
                              injection={"alpha": 0.5, "beta": 0.5}, timeout=2)


def _own_and_injected(b: StreamBatch) -> tuple[list[int], list[int]]:
    own = b.n - b.injected
    assert (b.devices[:own] == 0).all() and (b.devices[own:] == 1).all()  # own rows first, then injected
    return b.seqs[:own].tolist(), b.seqs[own:].tolist()


@pytest.mark.parametrize("dtype,shape,classes,size,groups", [
    (np.uint8, (1, 6, 6), 2, 7, "behind"),
    (np.float32, (3, 5, 7), 15, 16, "ahead"),
    (np.uint8, (3, 5, 7), 20, 5, "deleted"),
])
def test_a_restored_dataset_continues_after_what_was_consumed(bootstrap, run_prefix, dtype, shape, classes, size,
                                                             groups):
    ensure_run_topics(bootstrap, run_prefix, [0, 1])
    rng = np.random.default_rng(classes)
    affine = Affine((1 / 255,) * shape[0], (0.5,) * shape[0]) if np.dtype(dtype) == np.uint8 else Affine((2.0,), (0.0,))
    serde = SampleSerde(SampleSpec(dtype, shape, classes), affine)
    n = 12 * size

    def sample(k: int, device: int) -> bytes:
        x = (rng.integers(0, 256, shape).astype(dtype) if np.dtype(dtype) == np.uint8
             else rng.normal(size=shape).astype(dtype))
        return serde.encode(x, k % classes, device, k, time.time())

    _send(bootstrap, device_topic(run_prefix, 0), [sample(k, 0) for k in range(n)])
    _send(bootstrap, injection_topic(run_prefix, 0), [sample(INJ_SEQ0 + k, 1) for k in range(6)])

    first = _dataset(bootstrap, run_prefix, serde, size)
    own, inj = [], []
    for step in range(3):
        b = first.next_batch()
        assert b.step == step and b.x.shape == (b.n, *shape) and b.x.dtype == torch.float32
        o, i = _own_and_injected(b)
        own += o
        inj += i
        if groups != "behind":
            first.ack(b)
    state = first.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    state = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)  # plain data: no pickle needed
    assert state["offsets"] == {"dev": 3 * size, "inj": len(inj)} and state["step"] == 3
    assert state["totals"]["samples"] == 3 * size + len(inj)
    if groups == "ahead":  # the group moves on past the state (acked later batches): the state must win
        for _ in range(2):
            first.ack(first.next_batch())
        assert _committed(bootstrap, run_prefix, "dev") == 5 * size
    first.close()
    if groups == "deleted":
        admin = AdminClient({"bootstrap.servers": bootstrap})
        names = [trainer_group(run_prefix, 0, kind) for kind in ("dev", "inj")]
        futures = admin.delete_consumer_groups(names, request_timeout=30)
        futures[names[0]].result()
        try:  # the injection group exists only if an injected sample was acknowledged
            futures[names[1]].result()
        except KafkaException:
            pass
        assert _committed(bootstrap, run_prefix, "dev") < 0
    elif groups == "behind":
        assert _committed(bootstrap, run_prefix, "dev") < 0  # nothing was ever acknowledged
    _send(bootstrap, injection_topic(run_prefix, 0), [sample(INJ_SEQ0 + 6 + k, 1) for k in range(4)])

    again = _dataset(bootstrap, run_prefix, serde, size)
    with pytest.raises(ValueError, match="device 1's"):
        again.load_state_dict({**state, "device": 1})
    again.load_state_dict(state)
    # the state's positions are now the groups' committed offsets: acks and a restart agree with it
    assert _committed(bootstrap, run_prefix, "dev") == 3 * size
    assert _committed(bootstrap, run_prefix, "inj") == len(inj)
    assert again.state_dict() == state
    for _ in range(40):  # the rest of the device stream, and then until every injected sample came
        if len(own) >= n:
            if len(inj) == 10:
                break
            _send(bootstrap, device_topic(run_prefix, 0), [sample(k, 0) for k in range(len(own), len(own) + size)])
        b = again.next_batch()
        assert b is not None and b.step == again.step - 1 >= 3
        o, i = _own_and_injected(b)
        own += o
        inj += i
        again.ack(b)
    assert own == list(range(len(own))) and len(own) >= n  # no gap, no repeat
    assert inj == list(range(INJ_SEQ0, INJ_SEQ0 + 10))
    assert again.totals["samples"] == len(own) + len(inj)
    again.close()
