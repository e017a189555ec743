"""The trainer's feed (issue 36 item 4): the prefetch around a real KafkaStreamDataset keeps stream order,
hands out the state of what was handed out (not of what was taken ahead), commits acks off the step and
never loses one at close; which runs prefetch; the live event log buffers step lines and loses none."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from confluent_kafka import Consumer, Producer, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.config import load_dict
from edgestream.consumers import KafkaStreamDataset
from edgestream.consumers.device_stream import trainer_group
from edgestream.data import Affine, SampleSerde, SampleSpec
from edgestream.kafka import consumer_config, device_topic, producer_config
from edgestream.kafka.topic_provision import ensure_run_topics
from edgestream.metrics import EventLog
from edgestream.runner.plan import RunPlan
from edgestream.trainer.digest import ParamDigest
from edgestream.trainer.main import param_digest
from edgestream.trainer.prefetch import PrefetchDataset, prefetch_depth

SPEC = SampleSpec(np.uint8, (1, 4, 4), 10)


def _fill(bootstrap: str, run: str, n: int) -> None:
    ensure_run_topics(bootstrap, run, [0])
    serde = SampleSerde(SPEC, None)
    p = Producer(producer_config(bootstrap))
    for k in range(n):
        p.produce(device_topic(run, 0), value=serde.encode(np.full((1, 4, 4), k % 256, np.uint8), k % 10, 0, k,
                                                           time.time()), key=b"0")
    assert p.flush(30) == 0


def _dataset(bootstrap: str, run: str, batch: int) -> KafkaStreamDataset:
    return KafkaStreamDataset(bootstrap, run, 0, num_devices=1, serde=SampleSerde(SPEC, None),
                              batch={"policy": "fixed", "size": batch}, timeout=2)


def _committed(bootstrap: str, run: str) -> int:
    c = Consumer(consumer_config(bootstrap, trainer_group(run, 0, "dev")))
    try:
        return c.committed([TopicPartition(device_topic(run, 0), 0)], timeout=10)[0].offset
    finally:
        c.close()


def test_prefetch_keeps_order_state_and_acks(bootstrap, run_prefix):
    _fill(bootstrap, run_prefix, 80)
    ds = PrefetchDataset(_dataset(bootstrap, run_prefix, 8), depth=2)
    seqs = []
    for _ in range(3):
        b = ds.next_batch()
        seqs += b.seqs.tolist()
        ds.ack_later(b)
    assert seqs == list(range(24))  # stream order, nothing skipped
    time.sleep(1.0)  # the thread has taken batches ahead meanwhile
    state = ds.state_dict()
    assert state["offsets"]["dev"] == 24 and state["step"] == 3  # what was handed out, not taken ahead
    assert ds.totals["samples"] == 24
    last = ds.next_batch()  # handed out, never acknowledged
    assert last.seqs.tolist() == list(range(24, 32))
    ds.close()
    assert _committed(bootstrap, run_prefix) == 24  # the pending ack committed at close; no more

    again = _dataset(bootstrap, run_prefix, 8)  # a restart reads on from the last acknowledged batch
    try:
        assert again.next_batch().seqs.tolist() == list(range(24, 32))
    finally:
        again.close()


def test_a_newer_ack_is_never_undone_by_an_older_pending_one(bootstrap, run_prefix):
    _fill(bootstrap, run_prefix, 40)
    ds = PrefetchDataset(_dataset(bootstrap, run_prefix, 8), depth=1)
    first, second = ds.next_batch(), ds.next_batch()
    ds.ack_later(second)
    ds.ack_later(first)  # older: ignored
    ds.ack(second)
    ds.close()
    assert _committed(bootstrap, run_prefix) == 16


def _plan(**algorithm) -> RunPlan:
    return RunPlan.resolve(load_dict({"name": "p", "data": {"dataset": "digits"}, "devices": {"count": 2},
                                             "algorithm": algorithm}))


def test_which_runs_prefetch():
    fixed = {"name": "ddl", "batch": {"policy": "fixed", "size": 32}}
    assert prefetch_depth(_plan(**fixed), {}) == 1
    assert prefetch_depth(_plan(**fixed), {"EDGESTREAM_PREFETCH": "2"}) == 2
    assert prefetch_depth(_plan(**fixed), {"EDGESTREAM_PREFETCH": "0"}) == 0
    assert prefetch_depth(_plan(name="scadles"), {}) == 0  # its batch follows the stream's rate
    assert prefetch_depth(_plan(name="ddl", batch={"policy": "available", "max": 64}), {}) == 0


def test_live_event_log_buffers_step_lines_and_loses_none(tmp_path):
    path = tmp_path / "0.jsonl"
    events = EventLog(path, live=True)
    for k in range(50):
        events.step(time=float(k), device=0, step=k, batch=8)
    events.record("wait", time=50.0, note="kafka")  # not a step line: written through at once
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["step"] * 50 + ["wait"]
    events.step(time=51.0, device=0, step=50, batch=8)
    deadline = time.monotonic() + 5  # the flusher writes a buffered step line through within LIVE_FLUSH_S
    while len(path.read_text().splitlines()) < 52 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(path.read_text().splitlines()) == 52
    events.step(time=52.0, device=0, step=51, batch=8)
    events.close()
    assert [json.loads(x)["step"] for x in path.read_text().splitlines() if '"step"' in x][-1] == 51


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(fields=st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k != "kind"), _JSON_VALUES,
                              max_size=25), live=st.booleans())
def test_event_lines_read_back_as_written_whatever_the_values(tmp_path_factory, fields, live):
    """Each line is encoded by orjson or, where it refuses or would write non-ASCII, the standard library's
    encoder: every line reads back (json.loads) to the values given, one line per record, ASCII only, and a
    value neither knows is written as its str()."""
    path = tmp_path_factory.mktemp("ev") / "0.jsonl"
    events = EventLog(path, live=live)
    events.record("any", **fields)
    events.record("digest", value=ParamDigestLike())
    events.close()
    raw = path.read_bytes()
    assert raw.isascii()
    lines = [json.loads(x) for x in raw.decode().splitlines()]
    given_back = {k: round(v, 6) if type(v) is float else v for k, v in fields.items()}  # a line's floats: 6 places
    assert lines == [{"kind": "any", **given_back}, {"kind": "digest", "value": "digest-of-the-parameters"}]


class ParamDigestLike:
    def __str__(self) -> str:
        return "digest-of-the-parameters"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_prefetched_batches_and_digests_are_the_plain_ones(bootstrap, run_prefix):
    _fill(bootstrap, run_prefix, 48)
    dev = torch.device("cuda", torch.cuda.current_device())

    def batches(prefetch: bool) -> list:
        ds = KafkaStreamDataset(bootstrap, run_prefix, 0, num_devices=1, serde=SampleSerde(SPEC, Affine()),
                                batch={"policy": "fixed", "size": 8}, timeout=2, torch_device=dev)
        ds = PrefetchDataset(ds, depth=2, device=dev) if prefetch else ds
        try:  # nothing acknowledged: the second reader starts from the beginning again
            out = []
            for _ in range(5):
                b = ds.next_batch()
                out.append((b.x.to(dev, non_blocking=True) * 1.0).cpu())  # used on the step's stream, as the step does
            return out
        finally:
            ds.close()

    got, want = batches(True), batches(False)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    params = [torch.randn(3, 4, device=dev), torch.randn(5, device=dev), torch.arange(4, device=dev)]
    digest = ParamDigest(params)
    expect = param_digest([p.cpu() for p in params])
    params[0].add_(1.0)  # after the snapshot: not in the digest
    assert str(digest) == expect
