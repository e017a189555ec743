"""EventLog's step lines: a log with no file and no record list builds no line, and keeps the same
running aggregates as one that writes them (the summary reads only the aggregates)."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.metrics import EventLog

AGGREGATES = ("steps", "device_steps", "samples", "buffer_max", "dropped", "injected", "floats_sent",
              "bytes_sent", "exchanges", "compressed", "last_loss")

STEP = st.fixed_dictionaries({
    "time": st.floats(0, 1e4), "device": st.integers(0, 5), "step": st.integers(0, 50),
    "batch": st.integers(0, 1024), "buffer_samples": st.integers(0, 10**6), "dropped": st.integers(0, 99),
    "injected": st.integers(0, 99), "floats_sent": st.integers(0, 10**6), "bytes_sent": st.integers(0, 10**7),
    "compressed": st.one_of(st.none(), st.booleans()),
    "loss": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
})


@settings(max_examples=40, deadline=None)
@given(st.lists(STEP, max_size=30))
def test_a_log_without_a_file_keeps_the_same_aggregates(tmp_path_factory, lines: list[dict]) -> None:
    path = tmp_path_factory.mktemp("events") / "events.jsonl"
    written, kept, bare = EventLog(path), EventLog(None, keep=True), EventLog(None)
    for line in lines:
        for log in (written, kept, bare):
            log.step(**line)
    written.close()
    for name in AGGREGATES:
        values = [getattr(log, name) for log in (written, kept, bare)]
        if isinstance(values[0], float) and math.isnan(values[0]):
            assert all(math.isnan(v) for v in values), name
        else:
            assert values[0] == values[1] == values[2], name
    assert bare.records is None
    on_disk = [json.loads(text) for text in path.read_text().splitlines()]
    assert on_disk == kept.records
    assert len(on_disk) == len(lines) and all(rec["kind"] == "step" for rec in on_disk)
