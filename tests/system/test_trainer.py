"""Real trainer processes (`edgestream train`, gloo) on real Kafka streams: nothing mocked.

Each test streams a small digits run into the session broker (in-process producer, persist buffers, so
the streams are fixed), starts one `edgestream train` process per device with the torchrun
environment, and checks what the per-rank event files say.
"""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest
from factories import free_port  # tests/factories.py
from support.trainers import _config, _finish, _produce, _start

from edgestream.config import load_config
from edgestream.runner.plan import RunPlan


def _train(tmp_path, bootstrap, name, devices, algorithm, produce_s=2.0, **extra):
    cfg_path = _config(tmp_path, name, devices, algorithm, **extra)
    run_id = f"{os.getpid()}{int(time.time() * 1000) % 10**8}"
    _produce(cfg_path, bootstrap, run_id, produce_s)
    out = tmp_path / "runs"
    results = _finish(_start(cfg_path, bootstrap, run_id, out, range(devices), devices, free_port()))
    for rank, (code, _, err) in enumerate(results):
        assert code == 0, f"rank {rank}: {err[-3000:]}"
    run_dir = out / f"{name}-{algorithm['name']}-{run_id}"
    steps = {r: [json.loads(line) for line in open(run_dir / "ranks" / f"{r}.jsonl")] for r in range(devices)}
    return run_dir, steps, [json.loads(out.strip().splitlines()[-1]) for _, out, _ in results]


def _step_lines(lines: list[dict]) -> list[dict]:
    return [e for e in lines if e["kind"] == "step" and "loss" in e and e.get("round") is None]


def _falling(losses: list[float]) -> bool:
    k = max(3, len(losses) // 4)
    return float(np.mean(losses[-k:])) < float(np.mean(losses[:k]))


def test_ddl_two_ranks_learn_with_identical_replicas(bootstrap, tmp_path, run_prefix):
    run_dir, lines, summaries = _train(tmp_path, bootstrap, "ddl2", 2, {"name": "ddl", "batch": {"policy": "fixed",
                                                                                                 "size": 32}})
    per_rank = [_step_lines(lines[r]) for r in range(2)]
    assert [len(s) for s in per_rank] == [16, 16] and all(s["stop_reason"] == "max_steps" for s in summaries)
    assert [e["digest"] for e in per_rank[0]] == [e["digest"] for e in per_rank[1]]  # bitwise-identical replicas
    assert _falling([e["loss"] for e in per_rank[0]])
    # batches are consecutive slices of each device's stream: nothing lost, nothing twice
    for r in range(2):
        firsts = [e["seq_first"] for e in per_rank[r]]
        assert firsts == list(range(0, 16 * 32, 32)) and all(e["seq_last"] == e["seq_first"] + 31 for e in per_rank[r])
    evals = [e for e in lines[0] if e["kind"] == "eval"]
    assert evals and evals[-1]["step"] == 16 and 0.0 <= evals[-1]["accuracy"] <= 1.0
    assert (run_dir / "ranks" / "1.summary.json").exists()


def test_scadles_injection_and_adaptive_topk_on_four_ranks(bootstrap, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    from edgestream.consumers.device_stream import trainer_group
    from edgestream.kafka import consumer_config, injection_topic

    algo = {"name": "scadles", "batch": {"policy": "available", "max": 48}, "injection": {"alpha": 0.5, "beta": 0.25},
            "params": {"base_batch": 32}}
    run_dir, lines, summaries = _train(tmp_path, bootstrap, "scadles4", 4, algo, produce_s=1.5,
                                       compression={"name": "adaptive-topk", "ratio": 0.1, "delta": 0.3},
                                       stop={"max_steps": 10, "max_time_s": 300, "target_accuracy": None})
    per_rank = [_step_lines(lines[r]) for r in range(4)]
    assert all(len(s) == 10 for s in per_rank)
    for r in range(1, 4):
        assert [e["digest"] for e in per_rank[r]] == [e["digest"] for e in per_rank[0]]
    # one injection per step per device: floor(beta b_i) samples to ceil(alpha M) = 2 peers
    for r in range(4):
        for e in per_rank[r]:
            assert e["injected_sent"] == e.get("inject_sent", 0) == 2 * (e["batch"] // 4)
    sent = sum(e["injected_sent"] for s in per_rank for e in s)
    received = sum(e["injected"] for s in per_rank for e in s)
    # counted on both sides: what was sent is what the inj topics hold, and what was received plus what
    # still waits in them (sent during the last step) is the same number
    run = run_dir.name
    c = Consumer(consumer_config(bootstrap, f"{run}.check"))
    held = waiting = 0
    for d in range(4):
        tp = TopicPartition(injection_topic(run, d), 0)
        lo, hi = c.get_watermark_offsets(tp, timeout=10)
        held += hi - lo
        g = Consumer(consumer_config(bootstrap, trainer_group(run, d, "inj")))
        committed = g.committed([tp], timeout=10)[0].offset
        g.close()
        waiting += hi - max(committed, 0)
    c.close()
    assert sent == held and received + waiting == sent and received > 0
    assert {e["compressed"] for s in per_rank for e in s} <= {True, False}


FIXED32 = {"policy": "fixed", "size": 32}


def test_ranks_on_one_host_meet_in_shared_memory_with_the_exact_modes_bits(bootstrap, tmp_path, devices=3):
    """Ranks of one host all-reduce through shared memory by default (runtime.shared_memory; every rank's log
    says so), and their replicas are, step for step, bit for bit those of a run on the same streams with
    runtime.reduction: exact (gloo all-gather + the simulator's rank-order sum); with runtime.shared_memory
    false no rank joins it. (World 3: gloo's ring would sum in another order; 2-4 ranks of every dtype and op
    in tests/unit/test_collectives.py.)"""
    algo = {"name": "ddl", "batch": FIXED32}
    stop = {"max_steps": 6, "max_time_s": 300, "target_accuracy": None}
    runs = {}
    for name, runtime in (("shm", {}), ("exact", {"reduction": "exact"}), ("gloo", {"shared_memory": False})):
        (tmp_path / name).mkdir()
        run_dir, lines, _ = _train(tmp_path / name, bootstrap, f"{name}{devices}", devices, algo, produce_s=0.5,
                                   stop=stop, runtime=runtime)
        logs = [(run_dir / "ranks" / f"{r}.log").read_text() for r in range(devices)]
        runs[name] = ([[e["digest"] for e in _step_lines(lines[r])] for r in range(devices)], logs)
    digests, logs = runs["shm"]
    assert all(f"rank {r}: all-reduces through shared memory" in logs[r] for r in range(devices))
    assert all(d == digests[0] for d in digests) and len(digests[0]) == 6
    assert digests[0] == runs["exact"][0][0]  # the exact mode's replicas, step for step
    assert not any("all-reduces through" in log for log in runs["exact"][1] + runs["gloo"][1])


@pytest.mark.parametrize(("algo", "compression"), [
    ({"name": "abs-sgd", "params": {"ref_batch": 32}}, None),
    ({"name": "local-sgd", "params": {"tau": 2}, "batch": FIXED32}, None),
    ({"name": "adacomm", "params": {"tau": 3, "check_every": 2}, "batch": FIXED32}, None),
    ({"name": "dbs-sgd", "params": {"base_batch": 32, "every": 5}}, {"name": "topk", "ratio": 0.1}),
    ({"name": "ddl", "batch": FIXED32}, {"name": "qsgd", "levels": 16}),
], ids=["abs-sgd", "local-sgd", "adacomm", "dbs-sgd-topk", "ddl-qsgd"])
def test_other_algorithms_finish_and_learn(bootstrap, tmp_path, algo, compression):
    name = algo["name"].replace("-", "")
    extra = {"compression": compression} if compression else {}
    _, lines, summaries = _train(tmp_path, bootstrap, name, 2, algo, stop={"max_steps": 20, "max_time_s": 300,
                                                                           "target_accuracy": None}, **extra)
    per_rank = [_step_lines(lines[r]) for r in range(2)]
    assert all(s["stop_reason"] == "max_steps" for s in summaries)
    assert all(len(s) >= 20 for s in per_rank)
    assert _falling([e["loss"] for e in per_rank[0]])
    if compression or algo["name"] in ("abs-sgd", "dbs-sgd", "ddl"):  # synchronous: identical after every step
        assert [e["digest"] for e in per_rank[0]] == [e["digest"] for e in per_rank[1]]
    if compression:
        assert any(e["compressed"] for e in per_rank[0])
    if algo["name"] in ("local-sgd", "adacomm"):  # replicas agree after every averaging round
        rounds = [[e["digest"] for e in lines[r] if e["kind"] == "step" and e.get("round") is not None]
                  for r in range(2)]
        assert rounds[0] and rounds[0] == rounds[1]


def test_resume_after_a_kill_trains_no_acked_sample_twice_and_loses_none(bootstrap, tmp_path):
    cfg_path = _config(tmp_path, "resume", 2, {"name": "ddl", "batch": {"policy": "fixed", "size": 16}},
                       stop={"max_steps": 30, "max_time_s": 300, "target_accuracy": None},
                       checkpoint={"every_steps": 5})
    run_id = f"r{os.getpid()}{int(time.time()) % 10**6}"
    _produce(cfg_path, bootstrap, run_id, 1.5)
    out = tmp_path / "runs"
    run_dir = out / f"resume-ddl-{run_id}"
    # slow steps (devices.compute.static 40x) so the kill lands mid-run, after the first checkpoints
    procs = _start(cfg_path, bootstrap, run_id, out, range(2), 2, free_port(),
                   args=("--set", "devices.compute.static=[40.0]"))
    deadline = time.monotonic() + 180
    files = [run_dir / "ranks" / f"{r}.jsonl" for r in range(2)]
    while time.monotonic() < deadline:  # both ranks past step 12 (rank 1 writes its line a moment later)
        if all(f.exists() and sum(1 for line in open(f) if '"kind":"step"' in line) >= 12 for f in files):
            break
        time.sleep(0.2)
    for p in procs:
        p.send_signal(signal.SIGKILL)
    _finish(procs)
    first = [_step_lines([json.loads(x) for x in open(run_dir / "ranks" / f"{r}.jsonl")]) for r in range(2)]
    assert all(len(f) >= 12 for f in first)
    # the same config (a checkpoint is pinned to everything but runtime, stop and eval)
    results = _finish(_start(cfg_path, bootstrap, run_id, out, range(2), 2, free_port(),
                             args=("--resume", "--set", "devices.compute.static=[40.0]")))
    assert all(code == 0 for code, _, _ in results), [err[-2000:] for _, _, err in results]
    for r in range(2):
        lines = _step_lines([json.loads(x) for x in open(run_dir / "ranks" / f"{r}.jsonl")])
        before = lines[:len(first[r])]
        after = lines[len(first[r]):]
        resumed_at = after[0]["step"]
        assert resumed_at % 5 == 0 and 10 <= resumed_at <= len(first[r])  # from the last checkpoint
        # the steps the checkpoint holds, then everything after it: contiguous sequence numbers
        kept = [e for e in before if e["step"] < resumed_at] + after
        seqs = [(e["seq_first"], e["seq_last"]) for e in kept]
        assert seqs[0][0] == 0 and all(b[0] == a[1] + 1 for a, b in zip(seqs, seqs[1:], strict=False))
        assert after[-1]["step"] == 29 and len(kept) == 30


def test_bad_input_ends_with_one_line(bootstrap, tmp_path):
    cfg_path = _config(tmp_path, "bad", 2, {"name": "ddl", "batch": {"policy": "fixed", "size": 8}})
    out = tmp_path / "runs"
    # a device index outside the config
    [(code, _, err)] = _finish(_start(cfg_path, bootstrap, "x1", out, [5], 2, free_port()))
    assert code != 0 and err.strip().count("\n") == 0 and "RANK=5" in err and "Traceback" not in err
    # an unreachable bootstrap
    dead = f"127.0.0.1:{free_port()}"
    [(code, _, err)] = _finish(_start(cfg_path, dead, "x2", out, [0], 2, free_port(),
                                      args=("--set", "runtime.kafka_outage_s=3")))
    assert code != 0 and err.strip().count("\n") == 0 and dead in err
    assert err.startswith("error: device 0: ") and "runtime.kafka_outage_s" in err, err
    # a missing rendezvous peer
    _produce(cfg_path, bootstrap, "x3", 0.3)
    port = free_port()
    [(code, _, err)] = _finish(_start(cfg_path, bootstrap, "x3", out, [0], 2, port,
                                      EDGESTREAM_RENDEZVOUS_TIMEOUT_S=4))
    assert code != 0 and err.strip().count("\n") == 0 and f"127.0.0.1:{port}" in err and "rendezvous" in err


def test_lockstep_and_real_engine_agree_on_the_same_stream(bootstrap, tmp_path):
    """The engines differ only in how they perform requests: the same config and the same streams give
    the same parameters after k steps (real: trainer processes over Kafka and gloo; lockstep: one
    process, the device streams replayed in the producers' order)."""
    import torch

    from edgestream.data.order import ShardOrder
    from edgestream.models import param_names
    from edgestream.runner.lockstep import ArraySource, LockstepEngine
    from edgestream.trainer.checkpoint import load_checkpoint

    k = 6
    algo = {"name": "ddl", "batch": {"policy": "fixed", "size": 24}}
    run_dir, lines, _ = _train(tmp_path, bootstrap, "same", 2, algo, produce_s=0.5, checkpoint={"every_steps": k},
                               stop={"max_steps": k, "max_time_s": 300, "target_accuracy": None})
    real = load_checkpoint(run_dir / "checkpoints" / "rank0.pt")
    assert real["step"] == k

    cfg = load_config(tmp_path / "same.yaml")
    ds = RunPlan.resolve(cfg).dataset
    shards = RunPlan.resolve(cfg).shards
    x_all = torch.from_numpy(ds.affine(ds.x_train))
    y_all = torch.from_numpy(ds.y_train).long()

    class StreamSource(ArraySource):  # device d's stream in the producer's order (ShardOrder)
        def __init__(self, d: int) -> None:
            super().__init__(x_all, y_all, rate=1500.0)
            self.order, self.k = ShardOrder(shards[d], cfg.seed, d), 0

        def take(self, n: int):
            idx = torch.tensor([self.order.index(i) for i in range(self.k, self.k + n)])
            self.k += n
            return self.x[idx], self.y[idx]

    plan = RunPlan.resolve(cfg)
    model = plan.build_model()
    engine = LockstepEngine(model, [StreamSource(0), StreamSource(1)], batch_policy=plan.batch_policy(),
                            momentum=0.9, weight_decay=0.0)
    spec = plan.algorithm
    ctxs = [plan.worker_context(r, param_names=param_names(model), should_stop=lambda completed: completed >= k)
            for r in range(2)]
    engine.run([spec.worker(c) for c in ctxs])
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    for rank in range(2):
        for name, p in zip(names, engine.params(rank), strict=True):
            # the same arithmetic in two processes: equal up to float32 rounding of a different thread split
            assert torch.allclose(real["model"][name], p, rtol=1e-5, atol=1e-6), name
    losses_real = [e["loss"] for e in _step_lines(lines[0])]
    losses_lock = [e["loss"] for e in engine.events if e["device"] == 0 and "loss" in e]
    assert np.allclose(losses_real, losses_lock, rtol=1e-4)




@pytest.mark.parametrize("target_dim,norm", [(None, False), (2, True)], ids=["scalar", "vector-batchnorm"])
def test_regression_two_ranks_train_a_user_model_on_float_targets(bootstrap, tmp_path, target_dim, norm):
    """task: regression on real trainers: float targets over the wire, the task's MSE, eval lines with
    rmse/mae/loss (accuracy null), a user's model by import path from the config's folder (in every
    trainer process), identical replicas, the model on the trainer's device as before."""
    from support.sources import USERMOD  # the user's models module of the engine tests

    (tmp_path / "trainer_usernet.py").write_text(USERMOD)
    data = {"dataset": "synthetic", "shape": [6], "n_train": 800, "n_test": 200,
            **({"kwargs": {"target_dim": target_dim}} if target_dim else {})}
    run_dir, lines, summaries = _train(
        tmp_path, bootstrap, f"reg{target_dim or 1}", 2, {"name": "ddl", "batch": {"policy": "fixed", "size": 32}},
        task="regression", data=data, model={"name": "trainer_usernet:build", "kwargs": {"norm": norm}},
        optim={"lr": 0.05, "momentum": 0.5, "weight_decay": 0.0}, stop={"max_steps": 30, "max_time_s": 300})
    per_rank = [_step_lines(lines[r]) for r in range(2)]
    assert [len(s) for s in per_rank] == [30, 30] and all(s["stop_reason"] == "max_steps" for s in summaries)
    # the parameters agree (BatchNorm's running statistics are each rank's own; training uses batch statistics)
    assert [e["digest"] for e in per_rank[0]] == [e["digest"] for e in per_rank[1]]
    assert _falling([e["loss"] for e in per_rank[0]])
    evals = [e for e in lines[0] if e["kind"] == "eval"]
    assert evals and all(e["accuracy"] is None and {"rmse", "mae", "loss"} <= set(e) for e in evals)
    assert evals[-1]["rmse"] < evals[0]["rmse"]
    assert all(s["device"] == "cpu" for s in summaries)
