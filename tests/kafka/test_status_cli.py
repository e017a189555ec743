"""`edgestream status RUN --bootstrap ...`: produced samples, producer rate, acknowledged offset and lag per
device, and the DLQ count, read from a real broker."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.consumers.device_stream import commit_offset, trainer_group
from edgestream.kafka import device_topic, producer_config
from edgestream.kafka.topic_names import dlq_topic
from edgestream.kafka.topic_provision import ensure_run_topics

runner = CliRunner()


def _produce(bootstrap: str, topic: str, n: int, pause_s: float = 0.0) -> None:
    p = Producer(producer_config(bootstrap))
    for _ in range(n):
        p.produce(topic, value=b"x" * 16, key=b"0")
        if pause_s:
            p.poll(0)
            time.sleep(pause_s)
    p.flush(30)


@pytest.mark.parametrize("produced,acked", [([30, 7, 0], [10, 7, None]), ([5, 12], [None, 1])])
def test_status_reports_produced_acknowledged_and_lag(bootstrap, produced, acked):
    run = f"st{uuid.uuid4().hex[:6]}-r{len(produced)}"
    ensure_run_topics(bootstrap, run, range(len(produced)))
    for d, (n, a) in enumerate(zip(produced, acked, strict=True)):
        _produce(bootstrap, device_topic(run, d), n)
        if a is not None:
            commit_offset(bootstrap, device_topic(run, d), trainer_group(run, d), a)
    _produce(bootstrap, dlq_topic(run), 3)
    result = runner.invoke(app, ["status", run, "--bootstrap", bootstrap, "--interval", "0", "--json"])
    assert result.exit_code == 0, result.output
    st = json.loads(result.stdout.strip().splitlines()[-1])
    assert st["run"] == run and st["dlq"] == 3
    assert [r["produced"] for r in st["devices"]] == produced
    assert [r["acknowledged"] for r in st["devices"]] == acked
    assert [r["lag"] for r in st["devices"]] == [n - (a or 0) for n, a in zip(produced, acked, strict=True)]
    table = runner.invoke(app, ["status", run, "--bootstrap", bootstrap, "--interval", "0"])
    assert table.exit_code == 0 and f"run {run}" in table.stdout
    assert f"total lag {sum(n - (a or 0) for n, a in zip(produced, acked, strict=True)):,} samples" in table.stdout


def test_status_measures_the_producer_rate_and_finds_a_run_by_its_id(bootstrap):
    run_id = uuid.uuid4().hex[:8]
    run = f"rate-{run_id}"
    ensure_run_topics(bootstrap, run, [0, 1])
    feeder = threading.Thread(target=_produce, args=(bootstrap, device_topic(run, 1), 400, 0.005))
    feeder.start()
    try:
        time.sleep(0.3)
        result = runner.invoke(app, ["status", run_id, "--bootstrap", bootstrap, "--interval", "1.0", "--json"])
    finally:
        feeder.join()
    assert result.exit_code == 0, result.output
    st = json.loads(result.stdout.strip().splitlines()[-1])
    assert st["run"] == run
    rates = {r["device"]: r["rate"] for r in st["devices"]}
    assert rates[0] == 0 and rates[1] > 0


@pytest.mark.parametrize("args,expect", [
    (["status", "no-such-run-zz"], "--bootstrap"),
    (["status", "no-such-run-zz", "--interval", "-1", "--bootstrap", "127.0.0.1:1"], "--interval"),
])
def test_status_bad_input_is_one_line(args, expect):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and expect in result.stderr


def test_status_names_a_run_that_is_not_there(bootstrap):
    result = runner.invoke(app, ["status", "nosuchrun-zz9", "--bootstrap", bootstrap, "--interval", "0"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no run 'nosuchrun-zz9' on the broker" in lines[0]
