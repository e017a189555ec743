"""The stream-source protocol (edgestream.streams.source): the three sources implement it, the one
take sequence takes from them, the driver notes a batch's facts, and a source's state round-trips."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.runner.array_stream import ArraySource, ArrayStream
from edgestream.runner.driver import StepMeter, run_blocking
from edgestream.sim.data import SimBatch
from edgestream.sim.stream import VirtualStream
from edgestream.streams import AvailableBatch, FixedBatch, PersistBuffer, RateBatch, TruncateBuffer, build_rate_model
from edgestream.streams.source import BatchFacts, Stateful, StreamSource, take_batch


class Clock:
    """A virtual clock: what a SimPy environment offers a VirtualStream (`now`, `timeout`)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def timeout(self, delay: float) -> float:
        return delay


class Data:
    """What a VirtualStream builds batches from (SimData's interface), without a dataset."""

    sample_bytes = 10

    def stream_indices(self, device: int, start: int, stop: int) -> np.ndarray:
        return np.arange(start, stop, dtype=np.int64) * 7 % 1000

    def labels(self, indices: np.ndarray) -> np.ndarray:
        return indices % 10

    def batch(self, device: int, indices: np.ndarray, own: int) -> SimBatch:
        x = torch.from_numpy(indices.astype(np.float32))
        return SimBatch(len(indices), x, torch.from_numpy(indices % 10), indices, device, own, len(indices) - own)


def take(stream: VirtualStream, size: int | None) -> SimBatch:
    """One batch through the shared sequence, waiting on the stream's clock."""
    steps = take_batch(stream, size)
    try:
        while True:
            stream.clock.now += steps.send(None)
    except StopIteration as done:
        return done.value


def stream_of(draw_args: dict, clock: Clock) -> VirtualStream:
    rm = build_rate_model({"distribution": "uniform", "low": 5, "high": draw_args["high"]},
                          {"kind": "sinusoid", "period_s": 3, "amplitude": 0.5}, 2, seed=draw_args["seed"])
    return VirtualStream(1, rm, draw_args["buffer"], draw_args["batch"], draw_args["max_lag_s"], clock=clock,
                         data=Data())


def summary(batch: SimBatch) -> tuple:
    f = batch.facts
    return (batch.n, batch.own, batch.indices.tolist(), f.dropped, f.injected, f.buffer_samples, f.held_samples,
            f.rate, f.lag_s, list(f.seqs), f.labels.tolist())


STREAMS = st.fixed_dictionaries({
    "high": st.integers(6, 300),
    "seed": st.integers(0, 5),
    "buffer": st.sampled_from([PersistBuffer(), TruncateBuffer(window_s=0.5)]),
    "batch": st.sampled_from([FixedBatch(8), RateBatch(2, 64), AvailableBatch(32)]),
    "max_lag_s": st.sampled_from([None, 0.3, 2.0]),
})
#: one step: (seconds to advance first, explicit size or None, injected indices delivered after the take)
STEPS = st.lists(st.tuples(st.floats(0.0, 1.5), st.one_of(st.none(), st.integers(0, 20)),
                           st.lists(st.integers(0, 999), max_size=4)), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(args=STREAMS, before=STEPS, after=STEPS)
def test_a_restored_virtual_stream_takes_what_the_original_takes(args, before, after):
    clock = Clock()
    stream = stream_of(args, clock)
    for gap, size, injected in before:
        clock.now += gap
        take(stream, size)
        stream.deliver(clock.now + 0.01, np.asarray(injected, dtype=np.int64))
    state = stream.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)  # plain values: loadable without pickle's arbitrary objects
    buf.seek(0)
    fresh = stream_of(args, Clock(clock.now))
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    assert fresh.state_dict() == state
    for gap, size, injected in after:
        for s in (stream, fresh):
            s.clock.now += gap
        a, b = take(stream, size), take(fresh, size)
        assert summary(a) == summary(b)
        assert stream.clock.now == fresh.clock.now
        for s in (stream, fresh):
            s.deliver(s.clock.now + 0.01, np.asarray(injected, dtype=np.int64))
    assert fresh.state_dict() == stream.state_dict()


def test_the_three_sources_implement_the_protocol():
    from edgestream.consumers.kafka_stream import KafkaDeviceStream

    virtual = VirtualStream(0, build_rate_model({"distribution": "constant", "rate": 10}, None, 1, seed=0),
                            PersistBuffer(), FixedBatch(4), clock=Clock(), data=Data())
    array = ArrayStream(ArraySource(torch.zeros(10, 2), torch.zeros(10, dtype=torch.long), rate=5), FixedBatch(3))
    for source in (virtual, array):
        assert isinstance(source, StreamSource) and isinstance(source, Stateful)
    for name in ("counts", "skip", "wait", "take", "state_dict", "load_state_dict"):
        assert callable(getattr(KafkaDeviceStream, name)), name


def test_a_virtual_stream_state_names_what_is_wrong():
    rm = build_rate_model({"distribution": "constant", "rate": 10}, None, 2, seed=0)
    s = VirtualStream(0, rm, PersistBuffer(), FixedBatch(4))
    state = s.state_dict()
    with pytest.raises(ValueError, match="device 0's; this stream is device 1's"):
        VirtualStream(1, rm, PersistBuffer(), FixedBatch(4)).load_state_dict(state)
    with pytest.raises(ValueError, match="missing pos"):
        s.load_state_dict({k: v for k, v in state.items() if k != "pos"})
    with pytest.raises(ValueError, match="version 9"):
        s.load_state_dict({**state, "version": 9})
    with pytest.raises(ValueError, match="negative counts"):
        s.load_state_dict({**state, "pos": -1})
    with pytest.raises(ValueError, match="expected a mapping"):
        s.load_state_dict([1, 2])


def test_an_array_stream_takes_through_the_rule_and_round_trips():
    x, y = torch.arange(40, dtype=torch.float32).reshape(20, 2), torch.arange(20)
    a = ArrayStream(ArraySource(x, y, rate=6.7, seed=1), RateBatch(1, 64))
    first = run_blocking(take_batch(a))
    assert first.n == first.own == 7  # b_i = round(S_i), as the rate policy says
    assert first.facts == BatchFacts(0, batch=7)
    a.inbox.append((x[:2], y[:2]))
    b = ArrayStream(ArraySource(x, y, rate=6.7, seed=99), RateBatch(1, 64))
    b.load_state_dict(a.state_dict())
    ta, tb = run_blocking(take_batch(a, 5)), run_blocking(take_batch(b, 5))
    assert (ta.n, ta.own, ta.facts) == (tb.n, tb.own, tb.facts) == (7, 5, BatchFacts(2, batch=7))
    assert torch.equal(ta.x, tb.x) and torch.equal(ta.y, tb.y)
    with pytest.raises(ValueError, match="needs a batch_policy"):
        run_blocking(take_batch(ArrayStream(ArraySource(x, y, rate=5))))


def test_the_meter_notes_only_what_an_engine_measures():
    sim = StepMeter()
    sim.note_batch(BatchFacts(2, batch=10, dropped=1, buffer_samples=3, buffer_bytes=30, held_samples=5, rate=4.0,
                              lag_s=0.5, seqs=range(4, 12), labels=np.arange(8)))
    assert list(sim.counts) == ["batch", "dropped", "injected"]
    assert list(sim.gauges) == ["buffer_samples", "buffer_bytes", "held_samples", "rate", "lag_s", "seq_first",
                                "seq_last", "seq_count", "labels_crc"]
    real = StepMeter()
    real.note_batch(BatchFacts(0, dropped=0, dlq=1, buffer_samples=0, buffer_bytes=0, rate=1.5, lag_s=None,
                               lag_warning="w", seqs=np.arange(3), labels=np.zeros(3)))
    assert list(real.counts) == ["dropped", "injected", "dlq"]
    assert real.gauges["lag_s"] is None and real.gauges["lag_warning"] == "w" and "held_samples" not in real.gauges
    lock = StepMeter()
    lock.note_batch(BatchFacts(1, batch=4))
    assert lock.counts == {"batch": 4, "injected": 1} and lock.gauges == {}
