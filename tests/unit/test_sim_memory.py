"""The simulator's memory stays flat over a run, whatever the stream rates (issue 35, item 2).

Streams that outrun training are counted, not stored: a `VirtualStream` holds positions and counts,
the data holds one block of each device's stream order, and the collectives keep only the operations
in flight. These tests run many steps at a high rate with the cyclic garbage collector OFF (so garbage
that only the collector could free stays visible, as it did when every all-reduce was a reference
cycle holding every receiver's copy of the model) and check that what the run holds does not grow
with the steps. No wall-clock assertion.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
from factories import DATA_VARIANTS, cfg_of  # the simulator tests' config helpers (tests/factories.py)
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.metrics import EventLog
from edgestream.sim.collectives import CollectiveOp, ReduceResult
from edgestream.sim.engine import SimEngine


def stored(engine: SimEngine) -> dict[str, int]:
    """What the run holds now: live collective operations and results (reachable or not), samples
    queued as injected, and stream-order positions held in the data's blocks."""
    live = {"ops": 0, "results": 0}
    for obj in gc.get_objects():
        if type(obj) is CollectiveOp:
            live["ops"] += 1
        elif type(obj) is ReduceResult:
            live["results"] += 1
    inbox = sum(len(idx) for s in engine.streams for _, idx in s.inbox)
    blocks = sum(len(block[1]) for block in engine.data.epochs._blocks.values())
    return {**live, "inbox_samples": inbox, "order_positions": blocks}


def run_steps(over: dict[str, Any], steps: int) -> tuple[SimEngine, dict[str, int]]:
    """Run `steps` steps with the cyclic collector off; (engine, what it holds at the end)."""
    over = {**over, "stop": {**over.get("stop", {}), "max_steps": steps}}
    engine = SimEngine(cfg_of(**over), EventLog(None))
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        engine.run()
        held = stored(engine)
    finally:
        if was:
            gc.enable()
    gc.collect()
    return engine, held


CASES = {
    "ddl": {"algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 8}, "buffer": "persist"}},
    "local-sgd tau 1": {"algorithm": {"name": "local-sgd", "batch": {"policy": "fixed", "size": 8},
                                      "buffer": "persist", "params": {"tau": 1}}},
    "scadles truncate + injection": {"algorithm": {"name": "scadles", "batch": {"policy": "rate", "min": 8,
                                                                                "max": 16},
                                                   "buffer": "truncate",
                                                   "injection": {"alpha": 0.5, "beta": 0.25}}},
    "abs-sgd": {"algorithm": {"name": "abs-sgd", "batch": {"policy": "fixed", "size": 8}, "buffer": "persist"}},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_a_run_holds_does_not_grow_with_steps_at_a_high_rate(case):
    over = {**CASES[case], "devices": {"count": 6, "rates": {"distribution": "constant", "rate": 1000}}}
    _, short = run_steps(over, 4)
    engine, long = run_steps(over, 60)
    # the streams delivered far more than was trained: counted (dropped or backlog), not stored
    arrived = sum(s.arrived(engine.env.now) for s in engine.streams)
    trained = sum(s.taken_total for s in engine.streams)
    assert arrived > 1.5 * trained
    assert long["inbox_samples"] <= 6 * 5 * 4 * 3  # a few steps of injections in flight (60 steps of them: ~4,000)
    assert long["order_positions"] <= max(short["order_positions"], 6 * 2 * 512)
    # operations in flight only: at most a couple per worker's pending handles, never one per step
    assert long["ops"] <= max(short["ops"], 4)
    assert long["results"] <= max(short["results"], 4 * 6)


@settings(max_examples=6, deadline=None)
@given(devices=st.integers(2, 9), rate=st.sampled_from([2000.0, 20000.0, 200000.0]),
       steps=st.integers(20, 50), data=st.sampled_from(sorted(DATA_VARIANTS)))
def test_no_collective_result_outlives_its_step(devices, rate, steps, data):
    """ddl on any device count, rate, input shape, class count or task: after the run no operation or result
    is left (the cycle each all-reduce used to form kept up to a garbage-collector generation's worth of
    models alive)."""
    over = {**DATA_VARIANTS[data], "devices": {"count": devices, "rates": {"distribution": "constant", "rate": rate}},
            "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 8}, "buffer": "persist"}}
    engine, held = run_steps(over, steps)
    assert held["ops"] == 0 and held["results"] == 0
    assert engine.collectives.ops == {}
    # the persist buffer's backlog is only a count: it grows with the rate, nothing is stored for it
    backlog = sum(s.available(engine.env.now) for s in engine.streams)
    assert backlog >= devices * (steps * 8)  # the streams ran far ahead of training
