"""The ONE request driver: an algorithm's worker generator run against an engine's performer.

Every engine (the simulator, the in-process lockstep engine, the real trainer) runs a worker the same
way: `drive(rank, program, performer, sink)` sends each request the worker yields to
`performer.perform(rank, request)` (runner.performer: one `do_<kind>` method per request kind) and sends the
result back. The driver also measures, in the
engine's own clock (`performer.now(rank)`), how long the worker spent waiting for data (TakeBatch),
computing (Compute) and communicating (blocking collectives, Wait, and parameter-server Push and Pull,
waiting for peers or the coordinator included),
notes what the stream did to get each batch (the batch's `facts`: batch, buffer, dropped, injected,
...; edgestream.streams.source) on the step's `StepMeter`, merges that with what the performer noted
there and with the algorithm's `Log` fields, and hands one events.jsonl step line to `sink`.

A performer returns a request's result directly (the real runtime blocks inside `perform`), or, in a
cooperative engine, a generator that the driver `yield from`s (SimPy events in the simulator, park
tokens in the lockstep engine); the driver itself is therefore a generator: cooperative engines
schedule it, a blocking engine runs it with `run_blocking`.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from types import GeneratorType
from typing import TYPE_CHECKING, Any

import numpy as np

from edgestream.runner.performer import Performer
from edgestream.sync.requests import AllGather, AllReduce, Compute, Log, Pull, Push, TakeBatch, Wait

if TYPE_CHECKING:
    from edgestream.streams.source import BatchFacts

#: events.jsonl step-line keys in DESIGN.md order; other keys follow.
LINE_ORDER = ("time", "device", "step", "batch", "wait_s", "compute_s", "comm_s", "buffer_samples",
              "buffer_bytes", "dropped", "injected", "bytes_sent", "floats_sent", "compressed", "loss")

#: request type -> the StepMeter timing it is counted in
TIMED: dict[type, str] = {TakeBatch: "wait_s", Compute: "compute_s", AllReduce: "comm_s", AllGather: "comm_s",
                          Wait: "comm_s", Push: "comm_s", Pull: "comm_s"}


@dataclass
class StepMeter:
    """What an engine measured for one worker since its last `Log`: timings (added by the driver),
    `counts` that add up over the step (samples taken, dropped, injected, bytes) and `gauges` that
    keep the newest value (buffer samples and bytes, rate). Performers call `count` and `gauge`."""

    wait_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    counts: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, Any] = field(default_factory=dict)
    #: the step's prequential scores: (Task.sample_sums rows, the batch's own-stream seqs or None) per Compute,
    #: in order (a run with prequential evaluation; edgestream.runner.session scores them at the Log)
    scores: list[tuple[Any, Any]] = field(default_factory=list)

    def count(self, **values: float) -> None:
        for k, v in values.items():
            self.counts[k] = self.counts.get(k, 0) + v

    def gauge(self, **values: Any) -> None:
        self.gauges.update(values)

    def note_batch(self, facts: BatchFacts) -> None:
        """What the stream did to get a batch (`BatchFacts`; its None fields are not measured by the
        engine and not noted); the driver calls it once per TakeBatch, for every engine."""
        counts = self.counts
        if facts.batch is not None:
            counts["batch"] = counts.get("batch", 0) + facts.batch
        if facts.dropped is not None:
            counts["dropped"] = counts.get("dropped", 0) + facts.dropped
        counts["injected"] = counts.get("injected", 0) + facts.injected
        if facts.dlq is not None:
            counts["dlq"] = counts.get("dlq", 0) + facts.dlq
        gauges = self.gauges
        if facts.buffer_samples is not None:
            gauges["buffer_samples"], gauges["buffer_bytes"] = facts.buffer_samples, facts.buffer_bytes
            if facts.held_samples is not None:
                gauges["held_samples"] = facts.held_samples
            gauges["rate"], gauges["lag_s"] = facts.rate, facts.lag_s
        if facts.lag_warning is not None:
            gauges["lag_warning"] = facts.lag_warning
        if facts.seqs is not None:
            self.note_samples(facts.seqs, facts.labels)

    def note_samples(self, seqs: Any, labels: Any) -> None:
        """The worker's own-stream samples of a batch (their sequence numbers and labels, int arrays):
        `seq_first`, `seq_last`, `seq_count` and `labels_crc` (CRC-32 of the int64 labels, chained over
        the step's batches). Every engine notes the same fields, so runs can be compared sample by sample."""
        if type(seqs) is not range:  # a range (the simulator's consecutive positions) needs no array
            seqs = np.asarray(seqs, dtype=np.int64)
        if len(seqs) == 0:
            return
        gauges = self.gauges
        gauges.setdefault("seq_first", int(seqs[0]))
        crc = zlib.crc32(np.ascontiguousarray(labels, dtype=np.int64).tobytes(), int(gauges.get("labels_crc", 0)))
        gauges.update(seq_last=int(seqs[-1]), seq_count=int(gauges.get("seq_count", 0)) + len(seqs), labels_crc=crc)

    def fields(self) -> dict[str, Any]:
        return {"wait_s": self.wait_s, "compute_s": self.compute_s, "comm_s": self.comm_s,
                **self.counts, **self.gauges}


def step_line(now: float, rank: int, given: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """One events.jsonl step line: time and device, then DESIGN.md's keys (the algorithm's `Log`
    fields win over what the engine measured), then the remaining keys of both."""
    line: dict[str, Any] = {"time": float(now), "device": rank}
    for key in LINE_ORDER[2:]:
        if key in given:
            line[key] = given[key]
        elif key in measured:
            line[key] = measured[key]
    for key, value in given.items():
        line.setdefault(key, value)
    for key, value in measured.items():
        line.setdefault(key, value)
    return line


def drive(rank: int, program: Generator[Any, Any, Any], performer: Performer,
          sink: Callable[[dict[str, Any]], None], meters: dict[int, StepMeter] | None = None,
          on_request: Callable[[int, Any], None] | None = None,
          profile: dict[str, float] | None = None,
          on_batch: Callable[[Any, float], None] | None = None) -> Generator[Any, Any, Any]:
    """Run worker `rank`'s `program` to its end against `performer`; return what the program returns.

    meters: where the worker's StepMeter lives (the performer reads `meters[rank]` to note batch
    figures); a private one when None. sink(line) receives each step line. on_request(rank, request)
    is called before each request is performed (counters, progress, checkpoint hooks: at a `Log`
    the worker's ctx.step and ctx.state are complete, see edgestream.sync.context). profile: when
    given, profile["algorithm"] accumulates the wall seconds spent inside the worker's own code and
    profile["requests"] counts its requests (the simulator's wall profile). on_batch(facts, time): after each
    batch's facts are noted, with the engine's time (the session's drift_start records).
    """
    meters = meters if meters is not None else {}
    meter = meters.setdefault(rank, StepMeter())
    now, perform = performer.now, performer.perform
    timed_of, log_type, generator_type = TIMED.get, Log, GeneratorType
    send: Any = None
    perf = time.perf_counter
    profiled = profile is not None
    alg_s, requests = 0.0, 0  # the profile's figures since they were last added to it
    if profiled:
        profile.setdefault("algorithm", 0.0)
        profile.setdefault("requests", 0)
    # this loop runs once per request of every worker (the simulator: ~6 per device-step), so it keeps
    # to plain local lookups; the profile is added to when the worker waits and when it ends
    while True:
        t_alg = perf() if profiled else 0.0
        try:
            req = program.send(send)
        except StopIteration as stop:
            if profiled:
                profile["algorithm"] += alg_s + perf() - t_alg
                profile["requests"] += requests
            return stop.value
        if profiled:
            alg_s += perf() - t_alg
            requests += 1
        if on_request is not None:
            on_request(rank, req)
        timed = timed_of(type(req))
        t0 = now(rank) if timed is not None else 0.0
        out = perform(rank, req)
        if type(out) is generator_type:
            if profiled:
                profile["algorithm"] += alg_s
                profile["requests"] += requests
                alg_s, requests = 0.0, 0
            out = yield from out
        if timed is not None:
            setattr(meter, timed, getattr(meter, timed) + now(rank) - t0)
            if timed == "wait_s":  # a TakeBatch: the batch's facts, noted once here for every engine
                facts = getattr(out, "facts", None)
                if facts is not None:
                    meter.note_batch(facts)
                    if on_batch is not None:
                        on_batch(facts, now(rank))
            elif timed == "compute_s":  # prequential scores of the batch, before the step that trains on it
                scores = getattr(out, "scores", None)
                if scores is not None:
                    meter.scores.append((scores, getattr(getattr(req.batch, "facts", None), "seqs", None)))
        elif isinstance(req, log_type):
            sink(step_line(now(rank), rank, req.fields, meter.fields()))
            meter = meters[rank] = StepMeter()
        send = out


def run_blocking(driver: Generator[Any, Any, Any]) -> Any:
    """Run a driver whose performer never returns generators (the real runtime); its return value."""
    try:
        token = next(driver)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError(f"a blocking engine's performer (or stream source) yielded {token!r}: it must wait "
                       "and perform requests itself")
