"""A model's floating buffers (BatchNorm running statistics) on the parameter server (docs/ps.md,
"Buffers"): the PS keeps each worker's latest and hands out their mean, pushes and replies carry them in
both engines (the simulator's PS node and the Kafka PS), checkpoints hold them (a checkpoint without them
loads with the initial ones), evaluation uses the trained statistics, and a model without buffers moves
exactly what it did before.

The BatchNorm model is a user's, loaded by import path from a module this file writes into a temporary
folder: an MLP whose inputs arrive in a sensor's own units (x * 4 + 3), so the statistics its BatchNorm
learns are far from the initial mean 0 / variance 1.
"""

from __future__ import annotations

import io
import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from factories import ps_cfg_of as cfg_of  # the PS simulator tests' config helpers: tests/factories.py
from factories import simulate_records as simulate
from support.ps import Served  # a ParameterServer in a thread

from edgestream.config import validate_dict
from edgestream.runner.evaluate import evaluate
from edgestream.runner.plan import RunPlan
from edgestream.sync.buffers import BufferMean, floating_buffer_names, floating_buffers, load_buffers
from edgestream.sync.coordinator import Coordinator, ServerContext
from edgestream.sync.requests import Push

MODEL_SOURCE = textwrap.dedent('''
    import math

    from torch import nn


    class Offset(nn.Module):
        """A sensor's own units: the normalised input times 4 plus 3."""

        def forward(self, x):
            return x * 4.0 + 3.0


    def build(input_shape, num_outputs, hidden=32):
        return nn.Sequential(nn.Flatten(), Offset(), nn.Linear(math.prod(input_shape), hidden),
                             nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, num_outputs))
''')
MODEL = "psbn_model:build"


@pytest.fixture
def bn_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The BatchNorm model's import path, importable here and in every child process."""
    folder = tmp_path / "usercode"
    folder.mkdir()
    (folder / "psbn_model.py").write_text(MODEL_SOURCE)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.delitem(sys.modules, "psbn_model", raising=False)
    return MODEL


def _accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    score = evaluate(model, x, y)
    return float(score["accuracy"] if isinstance(score, dict) else score[0])


def _accuracies(model: torch.nn.Module, trained: list[torch.Tensor], initial: list[torch.Tensor],
                x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(accuracy with the trained statistics, accuracy with the initial ones) of `model`'s weights."""
    load_buffers(floating_buffers(model), trained)
    with_trained = _accuracy(model, x, y)
    load_buffers(floating_buffers(model), initial)
    with_initial = _accuracy(model, x, y)
    load_buffers(floating_buffers(model), trained)
    return with_trained, with_initial


def _differ(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return any(not torch.allclose(x, y) for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------- the reading, without an engine


def test_the_ps_buffers_are_the_mean_of_each_workers_latest_and_survive_a_checkpoint() -> None:
    initial = [torch.zeros(3), torch.ones(3), torch.zeros(2, 2, dtype=torch.float64)]
    coord = Coordinator(ServerContext(world_size=3), [torch.zeros(4)])
    coord.init_buffers(initial)
    assert all(torch.equal(a, b) for a, b in zip(coord.buffers(), initial, strict=True)), "initial before a push"

    def bufs(v: float) -> list[torch.Tensor]:
        return [torch.full((3,), v), torch.full((3,), 2 * v), torch.full((2, 2), -v, dtype=torch.float64)]

    coord.push_buffers(0, bufs(1.0))
    coord.push_buffers(1, bufs(3.0))
    mean = coord.buffers()
    assert torch.equal(mean[0], torch.full((3,), 2.0)) and torch.equal(mean[1], torch.full((3,), 4.0))
    assert mean[2].dtype == torch.float64 and mean[2].shape == (2, 2)
    coord.push_buffers(0, bufs(5.0))   # worker 0's latest replaces its earlier ones
    assert torch.equal(coord.buffers()[0], torch.full((3,), 4.0))
    assert torch.equal(mean[0], torch.full((3,), 2.0)), "handed-out buffers never change afterwards"
    # the checkpoint: weights_only, and a restored coordinator goes on identically
    saved = io.BytesIO()
    torch.save(coord.state_dict(), saved)
    state = torch.load(io.BytesIO(saved.getvalue()), weights_only=True)
    other = Coordinator(ServerContext(world_size=3), [torch.zeros(4)])
    other.init_buffers(initial)
    other.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(other.buffers(), coord.buffers(), strict=True))
    for c in (coord, other):
        c.push_buffers(2, bufs(6.0))
    assert all(torch.equal(a, b) for a, b in zip(other.buffers(), coord.buffers(), strict=True))
    assert torch.allclose(other.buffers()[0], torch.full((3,), (5.0 + 3.0 + 6.0) / 3))
    # a checkpoint from before buffers reached the PS loads: the buffers are the initial ones
    old = {k: v for k, v in state.items() if k != "buffers"}
    restored = Coordinator(ServerContext(world_size=3), [torch.zeros(4)])
    restored.init_buffers(initial)
    restored.load_state_dict(old)
    assert all(torch.equal(a, b) for a, b in zip(restored.buffers(), initial, strict=True))
    restored.push_buffers(1, bufs(2.0))
    assert torch.equal(restored.buffers()[0], torch.full((3,), 2.0))
    # buffers that do not fit the model: one line
    with pytest.raises(ValueError, match="buffers: 2 tensors for the model's 3 floating buffers"):
        coord.push_buffers(0, bufs(1.0)[:2])
    with pytest.raises(ValueError, match="buffers: tensor 1 has 4 elements"):
        coord.push_buffers(0, [torch.zeros(3), torch.zeros(4), torch.zeros(2, 2)])


def test_a_model_without_floating_buffers_adds_nothing_to_the_state() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2, track_running_stats=False))
    assert floating_buffers(model) == []
    coord = Coordinator(ServerContext(world_size=2), list(model.parameters()))
    coord.init_buffers(floating_buffers(model))
    coord.push_buffers(0, [])
    coord.push(0, Push([torch.zeros_like(p) for p in model.parameters()], lr=0.1), 0.0)
    assert coord.buffers() == [] and "buffers" not in coord.state_dict()
    # BatchNorm's integer num_batches_tracked stays with each replica: only the floating ones travel
    bn = torch.nn.BatchNorm1d(4)
    assert floating_buffer_names(bn) == ["running_mean", "running_var"]
    assert BufferMean(floating_buffers(bn), 3).nbytes() == 32


# ---------------------------------------------------------------- the simulator


def test_ssp_in_the_simulator_evaluates_with_the_trained_statistics(bn_model: str) -> None:
    engine, _ = simulate(cfg_of("ssp", {"s": 2}, model={"name": bn_model}))
    ps, coord = engine.ps, engine.ps.coord
    initial = [b.clone() for b in floating_buffers(engine.replicas.base)]
    trained = coord.buffers()
    assert len(trained) == 2 and _differ(trained, initial), "the PS's buffers moved from the initial ones"
    # replies carry the buffers into the replicas: the worker answered last holds the PS's final ones
    assert any(all(torch.equal(a, b) for a, b in zip(floating_buffers(m), trained, strict=True))
               for m in engine.replicas.models)
    # pushes and replies cost the buffers' bytes on top of the dense model (uncompressed ssp)
    summary = ps.summary()
    dense = sum(t.numel() * t.element_size() for t in coord.model())
    extra = sum(b.numel() * b.element_size() for b in initial)
    assert summary["push_bytes"][0] == summary["pushes"][0] * (dense + extra)
    assert summary["pull_bytes"][0] == summary["pulls"][0] * (dense + extra)
    # evaluation scored W with the trained statistics; with the initial ones the accuracy differs
    x, y = engine.data.x_test, engine.data.y_test
    with_trained, with_initial = _accuracies(ps.eval_model(), trained, initial, x, y)
    assert engine.last_accuracy == pytest.approx(with_trained, abs=1e-12)
    assert with_trained != with_initial, (with_trained, with_initial)
    assert with_trained >= with_initial - 0.02 and with_trained > 0.8, (with_trained, with_initial)
    print(f"ssp in the simulator: accuracy {with_trained:.4f} with the trained statistics, {with_initial:.4f} with "
          "the initial ones")


def test_a_model_without_buffers_costs_in_the_simulator_what_it_did() -> None:
    engine, _ = simulate(cfg_of("asp", stop={"target_accuracy": None, "max_time_s": 1.0, "max_steps": None}))
    summary = engine.ps.summary()
    dense = sum(t.numel() * t.element_size() for t in engine.ps.coord.model())
    assert engine.ps.buffer_bytes == 0 and engine.ps.coord.buffers() == []
    assert summary["push_bytes"][0] == summary["pushes"][0] * dense and summary["pushes"][0] > 0
    assert "buffers" not in engine.ps.coord.state_dict()


# ---------------------------------------------------------------- the Kafka PS


def _plan(model: str, world: int = 2, algorithm: str = "asp") -> RunPlan:
    return RunPlan.resolve(validate_dict({
        "name": "psbuf", "seed": 3, "data": {"dataset": "synthetic", "shape": [1, 4, 3], "num_classes": 3,
                                            "n_train": 60, "n_test": 30},
        "devices": {"count": world}, "model": {"name": model},
        "optim": {"lr": 0.5, "momentum": 0.0, "weight_decay": 0.0},
        "algorithm": {"name": algorithm}, "stop": {"max_steps": 1000, "target_accuracy": None}}))




def _sent(client: Any) -> list:
    """Record the envelopes `client` sends (and still send them)."""
    sent: list = []
    send = client.sender.send

    def record(topic: str, env: Any) -> int:
        sent.append(env)
        return send(topic, env)

    client.sender.send = record
    return sent


def test_kafka_ps_pushes_and_replies_carry_the_buffers_and_the_checkpoint_holds_them(
        bn_model: str, bootstrap: str, run_prefix: str, tmp_path: Path) -> None:
    from edgestream.ps.client import PSClient
    from edgestream.ps.server import ParameterServer, ps_checkpoint_path

    plan = _plan(bn_model)
    run = f"{run_prefix}-bn"
    models = [plan.build_model() for _ in range(2)]
    initial = [b.clone() for b in floating_buffers(models[0])]
    clients = [PSClient(bootstrap, run, w, 2, list(m.parameters()), note_s=0.5, buffers=floating_buffers(m))
               for w, m in enumerate(models)]
    served = Served(plan, run, bootstrap, tmp_path)
    try:
        replies = [c.join() for c in clients]
        assert all(torch.equal(a, b) for a, b in zip(replies[0].buffers, initial, strict=True))
        sent = _sent(clients[0])
        for w, m in enumerate(models):  # each worker's own statistics
            load_buffers(floating_buffers(m), [torch.full_like(b, float(w + 1)) for b in initial])
            grads = [torch.zeros_like(p) for p in m.parameters()]
            clients[w].push(grads, 1, version=0, meta={"lr": 0.1, "n": 4})
        assert sent[0].meta["buffers"] == 2 and len(sent[0].tensors) == len(list(models[0].parameters())) + 2
        load_buffers(floating_buffers(models[0]), initial)
        reply = clients[0].pull()
        assert reply.version == 2 and len(reply.params) == len(list(models[0].parameters()))
        # the PS's buffers (the mean of 1 and 2) came back into worker 0's model
        assert all(torch.allclose(b, torch.full_like(b, 1.5)) for b in reply.buffers)
        assert all(torch.allclose(b, torch.full_like(b, 1.5)) for b in floating_buffers(models[0]))
        # a push whose buffers do not fit the model is rejected, never applied
        from edgestream.ps.wire import Envelope

        bad = Envelope(run, "push", 1, 2, 2, {"lr": 0.1, "buffers": 1},
                       [torch.zeros_like(p) for p in models[1].parameters()] + [torch.zeros(5)])
        clients[1].sender.send(f"{run}.ps.push", bad)
        assert clients[1].pull().version == 2
        time.sleep(0.6)  # a checkpoint
    finally:
        first = served.stop()
        for c in clients:
            c.close()
    assert first["rejected"] == 1 and first["pushes_applied"] == 2
    ckpt = torch.load(ps_checkpoint_path(tmp_path), weights_only=True)
    assert "buffers" in ckpt["coordinator"]
    # a restarted PS has the trained buffers; one restarted from a checkpoint without them, the initial ones
    again = ParameterServer(plan, run, bootstrap, tmp_path, evaluate=False)
    assert all(torch.allclose(b, torch.full_like(b, 1.5)) for b in again.coord.buffers())
    del ckpt["coordinator"]["buffers"]
    torch.save(ckpt, ps_checkpoint_path(tmp_path))
    old = ParameterServer(plan, run, bootstrap, tmp_path, evaluate=False)
    assert all(torch.equal(a, b) for a, b in zip(old.coord.buffers(), initial, strict=True))


def test_kafka_ps_messages_of_a_model_without_buffers_are_unchanged(bootstrap: str, run_prefix: str,
                                                                    tmp_path: Path) -> None:
    from edgestream.ps.client import PSClient

    plan = _plan("mlp")
    run = f"{run_prefix}-nobuf"
    model = plan.build_model()
    client = PSClient(bootstrap, run, 0, 2, list(model.parameters()), note_s=0.5, buffers=floating_buffers(model))
    served = Served(plan, run, bootstrap, tmp_path)
    try:
        reply = client.join()
        sent = _sent(client)
        update = [torch.ones_like(p) for p in model.parameters()]
        client.push(update, 1, version=0, meta={"lr": 0.1})
        reply = client.pull()
    finally:
        served.stop()
        client.close()
    assert reply.buffers == [] and "buffers" not in reply.meta and reply.version == 1
    push = sent[0]
    assert "buffers" not in push.meta and len(push.tensors) == len(update)


def test_ssp_through_the_kafka_ps_evaluates_with_the_trained_statistics(bn_model: str, bootstrap: str,
                                                                       tmp_path: Path) -> None:
    from edgestream.ps.server import ps_checkpoint_path
    from edgestream.runner import run_config

    cfg = validate_dict({
        "name": "ps-bn", "seed": 1, "data": {"dataset": "digits"},
        "devices": {"count": 3, "rates": {"distribution": "constant", "rate": 400},
                    "compute": {"static": [1.0, 1.0, 2.0]}},
        "model": {"name": bn_model}, "optim": {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0},
        "algorithm": {"name": "ssp", "params": {"s": 2}, "batch": {"policy": "fixed", "size": 32}},
        "stop": {"max_steps": 60, "max_time_s": 180, "target_accuracy": None}, "eval": {"every_s": 1.0}})
    run_dir, summary = run_config(cfg, "local", out=tmp_path, bootstrap=bootstrap, progress=False)
    assert summary["ps"]["status"] == "finished" and summary["ps"]["rejected"] == 0
    plan = RunPlan.resolve(cfg)
    model = plan.build_model()
    initial = [b.clone() for b in floating_buffers(model)]
    state = torch.load(ps_checkpoint_path(run_dir), weights_only=True)["coordinator"]
    coord = Coordinator(ServerContext(world_size=3), [p for p in model.parameters() if p.requires_grad])
    coord.init_buffers(initial)
    coord.load_state_dict(state)
    trained = coord.buffers()
    assert _differ(trained, initial), "the PS's buffers moved from the initial ones"
    assert bool(state["buffers"]["has"].all()), "every worker's statistics reached the PS"
    with torch.no_grad():
        for p, w in zip([p for p in model.parameters() if p.requires_grad], coord.model(), strict=True):
            p.copy_(w)
    ds = plan.dataset
    x, y = ds.normalize(torch.from_numpy(ds.x_test)), torch.from_numpy(ds.y_test).long()
    with_trained, with_initial = _accuracies(model, trained, initial, x, y)
    evals = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()
             if '"eval"' in line]
    final = [e for e in evals if e.get("kind") == "eval"][-1]
    assert final["accuracy"] == pytest.approx(with_trained, abs=1e-6), "the PS scored W with the trained statistics"
    assert abs(with_trained - with_initial) > 1e-6, (with_trained, with_initial)  # eval lines round to 6 places
    assert with_trained >= with_initial - 0.02 and with_trained > 0.6, (with_trained, with_initial)
    print(f"ssp on the Kafka PS: accuracy {with_trained:.4f} with the trained statistics, {with_initial:.4f} with "
          "the initial ones")
