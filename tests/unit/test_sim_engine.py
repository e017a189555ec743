"""The virtual-time simulator end to end: determinism, buffers (eq. 2, truncation), learning, compression.

Small runs only: digits, the mlp, a few devices, explicit compute times (no calibration, so runs are
exactly repeatable) and short virtual time or few steps.
"""

from __future__ import annotations

import pytest
import torch
from factories import cfg_of, merge, simulate, steps_of  # the simulator tests' config helpers (tests/factories.py)

from edgestream.config import validate_dict
from edgestream.metrics import EventLog, read_events
from edgestream.sim.engine import SimConfigError, SimEngine
from edgestream.streams import persist_buffer_size
from edgestream.sync import ALGORITHMS


def test_same_seed_gives_identical_events(tmp_path):
    cfg = cfg_of(
        devices={"rates": {"distribution": "uniform", "low": 20, "high": 120},
                 "compute": {"static": [1, 2], "dynamic": 0.3}},
        data={"partition": "labels", "labels_per_device": 3},
        algorithm={"name": "scadles", "batch": {"policy": "rate", "min": 8, "max": 256}, "buffer": "truncate",
                   "injection": {"alpha": 0.5, "beta": 0.25}},
        compression={"name": "adaptive-topk", "ratio": 0.1},
        stop={"max_steps": 8})
    simulate(cfg, tmp_path / "a.jsonl")
    simulate(cfg, tmp_path / "b.jsonl")
    a, b = (tmp_path / "a.jsonl").read_text(), (tmp_path / "b.jsonl").read_text()
    assert a == b
    events = read_events(tmp_path / "a.jsonl")
    assert len(steps_of(events)) == 8 * 4
    assert sum(e["injected"] for e in steps_of(events)) > 0           # injection reached peers' batches
    assert "wall" not in a
    other = validate_dict({**cfg.model_dump(mode="json"), "seed": 4})
    simulate(other, tmp_path / "c.jsonl")
    assert (tmp_path / "c.jsonl").read_text() != a


@pytest.mark.parametrize("algorithm,compression", [("ddl", "none"), ("scadles", "adaptive-topk"),
                                                   ("abs-sgd", "none")])
def test_shared_replica_gives_the_same_run_as_per_worker_replicas(tmp_path, algorithm, compression):
    cfg = cfg_of(algorithm={"name": algorithm, "batch": {"policy": "rate" if algorithm == "scadles" else "fixed"}},
                 devices={"compute": {"static": [1, 3], "dynamic": 0.2}},
                 compression={"name": compression}, stop={"max_steps": 6})
    shared = SimEngine(cfg, EventLog(tmp_path / "s.jsonl"))
    shared.run()
    shared.events.close()
    per_worker = SimEngine(cfg, EventLog(tmp_path / "p.jsonl"), share_replicas=False)
    per_worker.run()
    per_worker.events.close()
    assert (tmp_path / "s.jsonl").read_text() == (tmp_path / "p.jsonl").read_text()
    assert per_worker.replicas.layout()["replicas"] == "per-worker" and per_worker.replicas.identical()
    layout = shared.replicas.layout()
    if algorithm == "abs-sgd":   # workers apply at different virtual times: the replica is split once
        assert layout["replicas"] == "per-worker" and "read its model" in layout["unshared_reason"]
    else:
        assert layout == {"replicas": "shared", "unshared_reason": None} and len(shared.replicas.models) == 1


def test_persist_buffer_follows_eq2():
    """Constant S, fixed b, fixed step time t (comm ~0): Q(T) = (t S - b) T + S (eq. 2 of 004) up to the
    paper's initial S samples (our devices start with an empty buffer)."""
    S, b, t = 100.0, 20, 0.5
    cfg = cfg_of(devices={"count": 2, "rates": {"distribution": "constant", "rate": S},
                          "compute": {"base_s": t, "per_sample_s": 0.0},
                          "network": {"latency_ms": 0, "bandwidth_mbps": 1e7}},
                 algorithm={"batch": {"policy": "fixed", "size": b}}, stop={"max_steps": 12})
    engine, log = simulate(cfg)
    lines = [e for e in steps_of(_events(log)) if e["device"] == 0]
    period = (lines[-1]["time"] - lines[1]["time"]) / (len(lines) - 2)
    assert period == pytest.approx(t, abs=1e-4)
    for e in lines:
        T = e["step"]
        q = e["buffer_samples"]
        assert q == pytest.approx(persist_buffer_size(S, t, b, T) - S, abs=1.0), (T, q)
    assert lines[-1]["buffer_samples"] - lines[1]["buffer_samples"] == round((t * S - b) * (len(lines) - 2))
    assert engine.extra_summary(1.0)["replicas_identical"]


def _events(log: EventLog) -> list[dict]:
    assert log.records is not None
    return log.records


def test_truncate_bounds_buffer_while_persist_grows():
    """Slow devices (t_i = 2 s) on S_i = 50/s streams with ScaDLES' b_i = S_i: persist accumulates
    (t_i S_i - b_i) per step, truncate never holds more than the last window's S_i samples."""
    S = 50
    over = dict(devices={"count": 2, "rates": {"distribution": "constant", "rate": S},
                         "compute": {"base_s": 2.0, "per_sample_s": 0.0}},
                algorithm={"name": "scadles", "batch": {"policy": "rate", "min": 8, "max": 1024}},
                stop={"max_steps": 8})
    _, persist = simulate(cfg_of(**merge(over, {"algorithm": {"buffer": "persist"}})))
    _, truncate = simulate(cfg_of(**merge(over, {"algorithm": {"buffer": "truncate"}})))
    p_lines, t_lines = steps_of(_events(persist)), steps_of(_events(truncate))
    assert max(e["buffer_samples"] for e in t_lines) <= 1
    assert max(e["held_samples"] for e in t_lines) <= S + 1
    assert sum(e["dropped"] for e in t_lines) > 0 and sum(e["dropped"] for e in p_lines) == 0
    last = max(e["buffer_samples"] for e in p_lines if e["step"] == 7)
    assert last >= 6 * (2 * S - S)                       # grows ~ (t S - b) = 50 per step
    assert persist.buffer_max > 10 * truncate.buffer_max + 100
    assert all(e["buffer_bytes"] > e["buffer_samples"] * 64 for e in p_lines if e["buffer_samples"])


@pytest.mark.parametrize("name", sorted(n for n, s in ALGORITHMS.items() if s.family == "collective"))
def test_every_algorithm_learns(name):
    """The collective family (the parameter-server family: tests/unit/test_ps_sim.py)."""
    cfg = cfg_of(algorithm={"name": name, "batch": ({"policy": "rate", "min": 8, "max": 64} if name == "scadles"
                                                    else {"policy": "fixed", "size": 32})},
                 stop={"max_steps": 96})
    engine, log = simulate(cfg)
    lines = [e for e in steps_of(_events(log)) if e.get("loss") is not None]
    evals = [e for e in _events(log) if e["kind"] == "eval"]
    first = sum(e["loss"] for e in lines[:8]) / 8
    late = sum(e["loss"] for e in lines[-8:]) / 8
    assert late < 0.7 * first, (first, late)
    assert evals[-1]["accuracy"] > 0.5, evals[-1]       # chance is 0.1
    assert engine.finished == engine.world and engine.stop_reason == "max_steps"


def test_compression_reduces_floats_sent_and_comm_time():
    over = dict(devices={"network": {"latency_ms": 1, "bandwidth_mbps": 5}},
                algorithm={"name": "scadles", "batch": {"policy": "rate", "min": 8, "max": 64}},
                stop={"max_steps": 6})
    _, dense = simulate(cfg_of(**over))
    _, topk = simulate(cfg_of(**merge(over, {"compression": {"name": "topk", "ratio": 0.05}})))
    comm = [sum(e["comm_s"] for e in steps_of(_events(log))) for log in (dense, topk)]
    assert topk.floats_sent < 0.3 * dense.floats_sent
    assert comm[1] < 0.5 * comm[0]
    assert topk.compressed == topk.exchanges > 0 and dense.compressed == 0


def test_target_accuracy_stops_the_run_and_time_limit_holds():
    cfg = cfg_of(stop={"target_accuracy": 0.5, "max_steps": None, "max_time_s": 200.0}, eval={"every_s": 1.0})
    engine, log = simulate(cfg)
    assert engine.stop_reason == "target_accuracy"
    evals = [e for e in _events(log) if e["kind"] == "eval"]
    hit = next(e["time"] for e in evals if e["accuracy"] >= 0.5)
    assert float(engine.env.now) < hit + 5.0          # everyone left within a step or two of the decision
    engine, log = simulate(cfg_of(stop={"target_accuracy": None, "max_steps": None, "max_time_s": 3.0}))
    assert engine.stop_reason == "max_time_s" and 3.0 <= float(engine.env.now) < 4.0


def test_problems_found_when_building_the_run_are_config_errors():
    """Problems config validation cannot see (they need the data) come out as one line each."""
    with pytest.raises(SimConfigError) as exc:
        SimEngine(cfg_of(devices={"count": 2000}))
    assert exc.value.problems and "2000 devices" in exc.value.problems[0]
    with pytest.raises(SimConfigError) as exc:
        SimEngine(cfg_of(data={"shape": [3, 32, 32]}))
    assert exc.value.problems[0].startswith("data.shape:")  # the plan names the config field


def test_calibrated_compute_model_and_injection_bytes():
    cfg = cfg_of(devices={"compute": {"base_s": None, "per_sample_s": None}},
                 algorithm={"name": "scadles", "batch": {"policy": "rate", "min": 8, "max": 64},
                            "injection": {"alpha": 0.3, "beta": 0.1}},
                 stop={"max_steps": 3})
    engine, log = simulate(cfg)
    assert engine.calibrated and engine.compute_model.a > 0 and engine.compute_model.c > 0
    lines = steps_of(_events(log))
    sent = sum(e.get("inject_bytes", 0) for e in lines)
    assert sent == engine.stats.inject_bytes > 0
    assert sent == sum(e.get("injected_sent", 0) for e in lines) * engine.data.sample_bytes


def test_batch_norm_model_runs_as_on_per_worker_replicas(tmp_path):
    """A shared replica would update batch-norm running statistics once per worker per step; the
    simulator keeps per-worker replicas for models with buffers, so a run equals the per-worker run
    (events and every buffer bitwise) and each worker's statistics see its own batches once per step."""
    from edgestream.sim.replicas import BUFFERS_REASON

    steps = 2
    cfg = cfg_of(data={"dataset": "synthetic", "shape": [3, 8, 8], "num_classes": 4, "n_train": 160, "n_test": 20},
                 model={"name": "resnet20"}, devices={"count": 2}, algorithm={"batch": {"policy": "fixed", "size": 8}},
                 stop={"max_steps": steps}, eval={"every_s": 1000.0})
    default = SimEngine(cfg, EventLog(tmp_path / "d.jsonl"))
    default.run()
    default.events.close()
    per_worker = SimEngine(cfg, EventLog(tmp_path / "p.jsonl"), share_replicas=False)
    per_worker.run()
    per_worker.events.close()
    assert (tmp_path / "d.jsonl").read_text() == (tmp_path / "p.jsonl").read_text()
    for rank in range(2):
        a, b = default.replicas.models[rank].state_dict(), per_worker.replicas.models[rank].state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert all(int(v) == steps for k, v in a.items() if k.endswith("num_batches_tracked"))
    means = [m.state_dict() for m in default.replicas.models]
    key = next(k for k in means[0] if k.endswith("running_mean"))
    assert not torch.equal(means[0][key], means[1][key])  # each worker's statistics follow its own batches
    assert default.replicas.identical()  # the trainable parameters stay in lockstep
    assert default.replicas.layout() == {"replicas": "per-worker", "unshared_reason": BUFFERS_REASON}
