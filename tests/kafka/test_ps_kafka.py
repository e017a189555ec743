"""The Kafka parameter server in this process (edgestream.ps.server) against workers' clients
(edgestream.ps.client) on the real broker: joining before the PS exists, pushes and pulls through the
coordinator, rejected messages, duplicate pushes, and a restart that replays from the checkpoint."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch
from confluent_kafka import Consumer, Producer
from support.ps import Served

from edgestream.config import validate_dict
from edgestream.kafka.clients import consumer_config, producer_config
from edgestream.kafka.topic_names import dlq_topic
from edgestream.ps.client import PSClient
from edgestream.ps.server import ps_checkpoint_path
from edgestream.ps.transport import push_topic
from edgestream.ps.wire import Envelope, encode
from edgestream.runner.plan import RunPlan


def _plan(algorithm: str = "asp", world: int = 2, shape: tuple = (1, 5, 3), classes: int = 3, model: str = "mlp",
          **params) -> RunPlan:
    return RunPlan.resolve(validate_dict({
        "name": "psk", "seed": 3, "data": {"dataset": "synthetic", "shape": list(shape), "num_classes": classes,
                                          "n_train": 60, "n_test": 30},
        "devices": {"count": world}, "model": {"name": model}, "optim": {"lr": 0.5, "momentum": 0.0, "weight_decay": 0.0},
        "algorithm": {"name": algorithm, "params": params}, "stop": {"max_steps": 1000, "target_accuracy": None}}))


def _grads(plan: RunPlan, value: float) -> list[torch.Tensor]:
    return [torch.full_like(p, value) for p in plan.build_model().parameters()]


def _client(plan: RunPlan, bootstrap: str, run: str, worker: int) -> PSClient:
    return PSClient(bootstrap, run, worker, plan.world, list(plan.build_model().parameters()), note_s=0.5)


@pytest.mark.parametrize(("world", "shape", "classes", "model"), [(2, (1, 5, 3), 3, "mlp"),
                                                                  (3, (3, 7, 5), 13, "mlp"),
                                                                  (4, (1, 8, 8), 11, "cnn-small")])
def test_worker_started_before_the_ps_joins_and_pushes_apply(bootstrap: str, run_prefix: str, tmp_path: Path,
                                                             world: int, shape: tuple, classes: int,
                                                             model: str) -> None:
    plan = _plan("asp", world=world, shape=shape, classes=classes, model=model)
    run = f"{run_prefix}-join"
    clients = [_client(plan, bootstrap, run, w) for w in range(2)]
    joined: dict = {}
    t = threading.Thread(target=lambda: joined.update(reply=clients[0].join()), daemon=True)
    t.start()
    time.sleep(1.5)
    assert t.is_alive(), "the worker must wait for the PS"
    served = Served(plan, run, bootstrap, tmp_path)
    try:
        t.join(30)
        assert "reply" in joined and joined["reply"].version == 0
        w0 = [p.detach().clone() for p in plan.build_model().parameters()]
        assert all(torch.equal(a, b) for a, b in zip(joined["reply"].params, w0, strict=True))
        clients[1].join()
        # ASP: every push applied on arrival at its lr; a pull returns at once with the new version
        for step in (1, 2, 3):
            clients[step % 2].push(_grads(plan, 1.0), step, version=0, meta={"lr": 0.1, "n": 4})
        reply = clients[1].pull()
        assert reply.version == 3 and not reply.stop
        assert all(torch.allclose(a, b - 0.3, atol=1e-6) for a, b in zip(reply.params, w0, strict=True))  # 3 x 0.1 steps
        assert reply.meta["staleness"] >= 1  # worker 1's push (id 2) landed on version 1 after worker 0's push
        # a re-sent push (same id) is dropped, a newer one applies
        clients[1].push(_grads(plan, 1.0), 2, version=0, meta={"lr": 0.1})
        clients[1].push(_grads(plan, 1.0), 4, version=3, meta={"lr": 0.1})
        assert clients[1].pull().version == 4
    finally:
        summary = served.stop()
        for c in clients:
            c.close()
    assert summary["pushes_applied"] == 4 and summary["duplicates_dropped"] == 1
    assert summary["pushes"] == [1, 3] + [0] * (world - 2) and summary["rejected"] == 0


def _dlq_reasons(bootstrap: str, run: str, n: int, timeout_s: float = 30.0) -> list[str]:
    c = Consumer(consumer_config(bootstrap, f"{run}.dlqcheck"))
    c.subscribe([dlq_topic(run)])
    out: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(dict(msg.headers())["reason"].decode())
    finally:
        c.close()
    return out


@pytest.mark.parametrize("world", [1, 3])
def test_malformed_truncated_and_foreign_messages_are_rejected_never_applied(bootstrap: str, run_prefix: str,
                                                                             tmp_path: Path, world: int) -> None:
    plan = _plan("asp", world=world)
    run = f"{run_prefix}-rej{world}"
    served = Served(plan, run, bootstrap, tmp_path)
    client = _client(plan, bootstrap, run, world - 1)
    try:
        client.join()
        producer = Producer(producer_config(bootstrap))
        good = encode(Envelope(run, "push", 0, 1, 0, {"lr": 0.1}, _grads(plan, 1.0)), 64)
        assert len(good) > 2
        truncated = good[0][: len(good[0]) - 7]
        flipped = bytearray(good[1])
        flipped[-1] ^= 0xFF
        foreign = encode(Envelope("another-run", "push", 0, 1, 0, {"lr": 0.1}, _grads(plan, 1.0)))[0]
        for value in (truncated, bytes(flipped), foreign, b"not a ps message"):
            producer.produce(push_topic(run), value=value, key=b"0")
        producer.flush(30)
        reply = client.pull()  # after the bad ones in the topic: the PS has judged them all
        assert reply.version == 0, "nothing bad may be applied"
    finally:
        summary = served.stop()
        client.close()
    assert summary["rejected"] == 4 and summary["pushes_applied"] == 0
    reasons = _dlq_reasons(bootstrap, run, 4)
    assert len(reasons) == 4, reasons
    text = " | ".join(reasons)
    assert "truncated" in text and "checksum" in text and "another-run" in text, text


def test_restart_replays_pushes_after_the_checkpoint_exactly_once(bootstrap: str, run_prefix: str,
                                                                  tmp_path: Path) -> None:
    plan = _plan("ssp", world=2, s=2)
    run = f"{run_prefix}-replay"
    served = Served(plan, run, bootstrap, tmp_path)
    clients = [_client(plan, bootstrap, run, w) for w in range(2)]
    for c in clients:
        c.join()
    step = [0, 0]

    def push_pull(w: int) -> None:
        step[w] += 1
        clients[w].push(_grads(plan, 0.01 * (w + 1)), step[w], version=0, meta={"lr": 0.1})
        clients[w].pull()

    for _ in range(5):
        push_pull(0)
        push_pull(1)
    time.sleep(0.6)  # a checkpoint
    first = served.stop()
    assert first["pushes_applied"] == 10
    # pushes made while no PS runs are durable in the topic; a PS restarted from its checkpoint applies them
    for w in range(2):
        step[w] += 1
        clients[w].push(_grads(plan, 0.01), step[w], version=10, meta={"lr": 0.1})
    clients[0].push(_grads(plan, 0.01), step[0], version=10, meta={"lr": 0.1})  # a re-send: dropped
    ckpt = torch.load(ps_checkpoint_path(tmp_path), weights_only=True)
    assert ckpt["last_push"] == [5, 5]
    served = Served(plan, run, bootstrap, tmp_path)
    try:
        assert clients[0].pull().version == 12
    finally:
        second = served.stop()
        for c in clients:
            c.close()
    assert second["starts"] == 2 and second["pushes"] == [6, 6]
    assert second["pushes_applied"] == 12 and second["duplicates_dropped"] == 1
    lines = [json.loads(x) for x in (tmp_path / "ranks" / "ps.jsonl").read_text().splitlines()]
    assert [x["start"] for x in lines if x["kind"] == "ps_start"] == [1, 2]


def test_ps_command_refuses_a_collective_algorithm_in_one_line(tmp_path: Path) -> None:
    import yaml
    from typer.testing import CliRunner

    from edgestream.cli import app

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"name": "c", "devices": {"count": 2}, "algorithm": {"name": "scadles"}}))
    res = CliRunner().invoke(app, ["ps", str(path), "--run-id", "r1", "--bootstrap", "127.0.0.1:1",
                                   "--out", str(tmp_path / "runs")])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "algorithm.name: 'scadles' is not a parameter-server algorithm" in lines[0]
    assert not (tmp_path / "runs").exists()
