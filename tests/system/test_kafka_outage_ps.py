"""A Kafka outage of minutes under a parameter-server run, and the producer's account at any stop (issue 32).

Real brokers (a private `LocalBroker` in tmp_path that the test stops and starts again on the same port
and data dir, or the session broker), real `edgestream run --engine local` orchestrators with real
`edgestream produce` / `edgestream ps` / `edgestream train` children. Nothing is mocked; timeouts are
hang guards only.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from factories import write_cfg
from support.faults import SSP, _applied_pushes, _end_offsets
from support.producers import RAW_CLIENT_LOG, _raw, _read_stderr_until, _spawn, _summary, _write
from support.runs import finish, records, start, step_lines, wait_steps

from edgestream.kafka import LocalBroker, consumer_config, device_topic, free_port

OUTAGE_S = 90.0


def _sleep_while_running(proc, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the run ended during the outage ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        time.sleep(0.5)


def _wait_for_line(path: Path, words: str, proc, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists() and words in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {path.name} said {words!r}: {proc.stderr.read()[-3000:]}")
        time.sleep(0.3)
    pytest.fail(f"{path.name} never said {words!r}")


@pytest.mark.timeout(900)
def test_ps_run_rides_out_a_90_s_broker_outage(run_prefix, tmp_path):
    broker = LocalBroker(tmp_path / "broker")
    broker.start()
    proc = None
    try:
        bs = broker.bootstrap
        cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=60, every_steps=10, algorithm=SSP,
                        stop={"target_accuracy": None, "max_time_s": 900, "max_steps": 60})
        out = tmp_path / "runs"
        run_dir = out / f"{run_prefix}-ssp-r1"
        proc = start(cfg, bs, out=out)
        wait_steps(run_dir, proc, 2, 12)
        at_stop = {r: len(step_lines(run_dir / "ranks" / f"{r}.jsonl")) for r in range(2)}
        broker.stop()
        _sleep_while_running(proc, OUTAGE_S)
        broker.start()
        assert broker.bootstrap == bs  # the same port and data dir: the run's address still holds
        code, _, err = finish(proc)
        assert code == 0, err[-3000:]

        summary = json.loads((run_dir / "summary.json").read_text())
        ranks = [json.loads((run_dir / "ranks" / f"{r}.summary.json").read_text()) for r in range(2)]
        # every sequence number trained exactly once, in order, in batches of 16, training went on after it
        for r in range(2):
            lines = step_lines(run_dir / "ranks" / f"{r}.jsonl")
            assert len(lines) == ranks[r]["steps"] > at_stop[r]
            assert [e["step"] for e in lines] == list(range(len(lines)))
            assert lines[0]["seq_first"] == 0
            for a, b in zip(lines, lines[1:], strict=False):
                assert b["seq_first"] == a["seq_last"] + 1, (r, a, b)
            assert all(e["seq_last"] - e["seq_first"] + 1 == e["batch"] == 16 for e in lines)
        # every push applied exactly once: ids 1..steps of each worker, none twice, none missing
        applied = _applied_pushes(run_dir, 2)
        for r in range(2):
            assert sorted(applied[r]) == list(range(1, ranks[r]["steps"] + 1)), r
        ps = summary["ps"]
        assert ps["status"] == "finished" and ps["rejected"] == 0
        assert ps["pushes"] == [ranks[r]["steps"] for r in range(2)]
        # the PS said it waited, and for how long
        waits = [rec for rec in records(run_dir / "ranks" / "ps.jsonl") if rec["kind"] == "wait"]
        assert [w["state"] for w in waits] == ["start", "end"], waits
        assert waits[0]["bootstrap"] == bs and waits[0]["budget_s"] == 300.0
        assert 60 <= waits[1]["outage_s"] <= OUTAGE_S + 60
        assert ps["kafka_waits"] == 1
        # the producer rode it out too: everything it sent was acknowledged, and the topics hold exactly that
        producer = summary["producer"]
        assert "source" not in producer, producer  # its own summary
        assert producer["failed"] == producer["unacknowledged"] == 0
        assert producer["delivered"] == producer["produced"] > 0
        assert producer["kafka_waits"] == 1 and producer["kafka_wait_s"] >= 60
        assert sum(_end_offsets(bs, [device_topic(run_dir.name, d) for d in range(2)])) == producer["delivered"]
        said = (run_dir / "producer.out").read_text()
        assert f"producer: waiting for Kafka at {bs}" in said and f"producer: Kafka at {bs} answers again" in said
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
        broker.stop()


@pytest.mark.timeout(600)
def test_a_run_stopped_during_an_outage_accounts_for_the_producers_queue(run_prefix, tmp_path):
    """The issue's case: the broker gone, the run stopped. The producer flushes within the time it gets,
    gives up on the rest and prints its summary: summary.json counts what was not acknowledged (never
    `producer: null`), and no more than that is missing from the topics."""
    broker = LocalBroker(tmp_path / "broker")
    broker.start()
    proc = None
    try:
        bs = broker.bootstrap
        cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=500, every_steps=5,
                        stop={"target_accuracy": None, "max_time_s": 600, "max_steps": 500})
        out = tmp_path / "runs"
        run_dir = out / f"{run_prefix}-ddl-r1"
        proc = start(cfg, bs, out=out)
        wait_steps(run_dir, proc, 2, 5)
        broker.stop()
        _wait_for_line(run_dir / "producer.out", f"producer: waiting for Kafka at {bs}", proc)
        time.sleep(1.0)  # samples fall due and queue up while nothing answers
        proc.send_signal(signal.SIGTERM)
        code, _, err = finish(proc)
        assert code == 128 + signal.SIGTERM, err[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        producer = summary["producer"]
        assert producer is not None and "source" not in producer, producer
        assert "producer" not in summary["children_killed"]
        assert producer["unacknowledged"] > 0 and producer["delivered"] > 0
        assert producer["produced"] == producer["delivered"] + producer["failed"] + producer["unacknowledged"]
        broker.start()
        ends = sum(_end_offsets(bs, [device_topic(run_dir.name, d) for d in range(2)]))
        assert producer["delivered"] <= ends <= producer["delivered"] + producer["unacknowledged"]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
        broker.stop()


@pytest.mark.timeout(600)
def test_a_producer_killed_before_its_summary_is_accounted_from_its_last_report(bootstrap, run_prefix, tmp_path):
    """A producer that cannot answer SIGTERM (here: stopped with SIGSTOP) is killed after its grace; the
    run's summary still has its counts, from its last progress report, marked as such."""
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=500, every_steps=5,
                    stop={"target_accuracy": None, "max_time_s": 600, "max_steps": 500})
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-ddl-r1"
    proc = start(cfg, bootstrap, out=out)
    try:
        wait_steps(run_dir, proc, 2, 5)
        _wait_for_line(run_dir / "producer.out", "] delivered ", proc)  # a progress report was written
        status = json.loads((run_dir / "producer.status.json").read_text())
        pids = json.loads((run_dir / "pids.json").read_text())
        os.kill(pids["producer"], signal.SIGSTOP)
        time.sleep(0.5)
        reported = json.loads((run_dir / "producer.status.json").read_text())
        assert reported["produced"] >= status["produced"] > 0
        os.kill(pids["trainers"]["1"], signal.SIGKILL)  # the run fails; the producer cannot say a word
        code, _, err = finish(proc)
        assert code == 1, err[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        producer = summary["producer"]
        assert "producer" in summary["children_killed"]
        assert producer["produced"] == reported["produced"] and producer["delivered"] == reported["delivered"]
        assert producer["unacknowledged"] == reported["unacknowledged"]
        assert producer["source"].startswith(f"its last progress report ({reported['t']} s after it began streaming)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)


@pytest.mark.timeout(300)
def test_a_producer_past_its_outage_budget_stops_with_its_summary_and_one_line(tmp_path):
    broker = LocalBroker(tmp_path / "broker", port=free_port())
    broker.start()
    proc = None
    try:
        boot = broker.bootstrap
        proc = _spawn(_write(tmp_path, _raw("budget", rate=300)), boot, "r1", "--report-every", "0.5",
                      "--flush-timeout", "2", "--set", "runtime.kafka_outage_s=6")
        _read_stderr_until(proc, lambda line: line.lstrip().startswith("[") and " delivered 0 " not in line)
        broker.stop()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, err
        assert "Traceback" not in err and not any(tag in err for tag in RAW_CLIENT_LOG), err
        assert f"producer: waiting for Kafka at {boot} (no answer since " in err
        summary = _summary(out)  # the summary first, on stdout, then one line on stderr
        last = err.strip().splitlines()[-1]
        assert summary["error"] == f"no answer from Kafka at {boot} for 6 s (runtime.kafka_outage_s) while streaming"
        assert summary["kafka_waits"] == 1 and summary["kafka_wait_s"] >= 6
        assert summary["delivered"] > 0 and summary["unacknowledged"] > 0
        assert summary["produced"] == summary["delivered"] + summary["failed"] + summary["unacknowledged"]
        assert last == (f"error: producer: {summary['error']}; stopped streaming; {summary['unacknowledged']:,} of "
                        f"{summary['produced']:,} samples sent were not acknowledged (the same --run-id continues "
                        "after the last sample in each topic)")
        broker.start()
        for dev in summary["devices"]:  # what it calls delivered is in the topic; at most what it gave up on more
            n = _end_offsets(boot, [device_topic("budget-scadles-r1", dev["device"])])[0]
            assert dev["delivered"] <= n <= dev["delivered"] + dev["unacknowledged"]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        broker.stop()


def test_a_ps_reader_that_stalls_is_reopened_at_its_position(bootstrap, run_prefix, monkeypatch):
    """A consumer that returns nothing while messages wait (here: its partition paused behind its back), or
    gets no answer while Kafka answers a new client, is reopened where it was: the messages come, once
    each, in order."""
    from edgestream.kafka import topic_reader
    from edgestream.ps import transport
    from edgestream.ps.wire import Envelope

    monkeypatch.setattr(topic_reader, "STALL_S", 1.0)  # the PS's reader is kafka.topic_reader's Receiver
    transport.ensure_ps_topics(bootstrap, run_prefix, 1, 1000)
    topic = transport.push_topic(run_prefix)
    rx = transport.Receiver(bootstrap, topic, f"{run_prefix}.ps", "beginning")
    tx = transport.Sender(bootstrap, 100_000)
    try:
        tx.send(topic, Envelope(run_prefix, "hello", 0, 1, 0, {}))
        got: list[int] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got += [m.offset for m in rx.poll(0.05)]
        rx.consumer.pause([TopicPartition(topic, 0)])
        for seq in (2, 3):
            tx.send(topic, Envelope(run_prefix, "hello", 0, seq, 0, {}))
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m.offset for m in rx.poll(0.05)]
        # reopened for the pause (and, on a loaded machine, maybe once more for a poll slower than STALL_S:
        # what matters is that each reopening resumed at the reader's position: every message once, in order)
        assert got == [0, 1, 2] and rx.reopened >= 1
        first = rx.reopened
        # a consumer that gets no answer while Kafka answers a new client (here: one that talks to a dead
        # address) is reopened too
        rx.consumer.close()
        rx.consumer = Consumer(consumer_config("127.0.0.1:1", "outage-test.dead"))
        tx.send(topic, Envelope(run_prefix, "hello", 0, 4, 0, {}))
        deadline = time.monotonic() + 60
        while len(got) < 4 and time.monotonic() < deadline:
            got += [m.offset for m in rx.poll(0.05)]
        assert got == [0, 1, 2, 3] and rx.reopened > first
    finally:
        rx.close()
        tx.close()
