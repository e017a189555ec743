"""Simulator building blocks without a full run: the virtual device stream and the collectives."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
import torch

from edgestream.producers.schedule import due_count
from edgestream.sim.collectives import Collectives
from edgestream.sim.costs import ComputeModel, NetworkModel
from edgestream.sim.stream import VirtualStream
from edgestream.streams import (
    AvailableBatch,
    FixedBatch,
    PersistBuffer,
    RateBatch,
    TruncateBuffer,
    build_rate_model,
)
from edgestream.sync.requests import AllGather, AllReduce


def constant(rate: float, devices: int = 1):
    return build_rate_model({"distribution": "constant", "rate": rate}, None, devices, seed=0)


# ---------------------------------------------------------------- VirtualStream


def test_arrivals_use_the_producers_count():
    rm = build_rate_model({"distribution": "uniform", "low": 5, "high": 50},
                          {"kind": "sinusoid", "period_s": 7, "amplitude": 0.6}, 3, seed=1)
    for d in range(3):
        s = VirtualStream(d, rm, PersistBuffer(), FixedBatch(8))
        for t in np.linspace(0, 30, 301):
            assert s.arrived(float(t)) == due_count(rm, d, float(t))
    assert VirtualStream(0, rm, PersistBuffer(), FixedBatch(8)).arrived(-0.1) == 0


def test_fixed_batch_waits_until_the_last_sample_is_due():
    s = VirtualStream(0, constant(100.0), PersistBuffer(), FixedBatch(10))
    plan = s.plan(0.0, None)
    assert plan.target == 10 and plan.dropped == 0
    assert plan.ready_at == pytest.approx(0.09)                 # sample 9 is due at 9/100 s
    taken = s.take_at(plan.ready_at, plan.target)
    assert (taken.start, taken.stop, taken.backlog) == (0, 10, 0)
    plan = s.plan(1.0, 25)                                       # explicit size overrides the policy
    assert plan.target == 25 and plan.ready_at == 1.0
    taken = s.take_at(1.0, 25)
    assert taken.backlog == 101 - 35


def test_truncate_skips_the_backlog_older_than_the_window():
    s = VirtualStream(0, constant(100.0), TruncateBuffer(1.0), RateBatch(8, 1024))
    plan = s.plan(5.0, None)                                     # 501 arrived, 100 in the last second
    assert plan.dropped == 401 and plan.rate == pytest.approx(100.0) and plan.target == 100
    assert plan.ready_at == 5.0
    taken = s.take_at(5.0, plan.target)
    assert taken.start == 401 and taken.backlog == 0 and taken.held == 100
    assert s.dropped_total == 401


def test_persist_keeps_the_backlog_and_available_waits_for_one():
    s = VirtualStream(0, constant(10.0), PersistBuffer(), AvailableBatch(512))
    plan = s.plan(3.0, None)
    assert plan.target == 31 and plan.dropped == 0
    s.take_at(3.0, plan.target)
    plan = s.plan(3.0, None)                                     # nothing left: wait for one sample
    assert plan.target == 1 and plan.ready_at == pytest.approx(3.1)


def test_injected_samples_join_the_next_batch_after_they_arrive():
    s = VirtualStream(0, constant(100.0), PersistBuffer(), FixedBatch(5))
    s.deliver(1.0, np.array([7, 8, 9]))
    early = s.take_at(0.5, 5)
    assert len(early.injected) == 0
    late = s.take_at(1.0, 5)
    assert late.injected.tolist() == [7, 8, 9] and late.held == late.backlog + 5 + 3
    assert s.take_at(2.0, 5).injected.size == 0


# ---------------------------------------------------------------- models


def test_compute_model_is_per_device_and_seeded():
    m1 = ComputeModel(0.1, 0.01, [1.0, 2.0], dynamic=0.5, seed=4)
    m2 = ComputeModel(0.1, 0.01, [1.0, 2.0], dynamic=0.5, seed=4)
    a = [m1.step_time(1, 10) for _ in range(3)]
    m2.step_time(0, 10)                                          # another device's draw does not shift device 1
    assert [m2.step_time(1, 10) for _ in range(3)] == a
    assert all(0.4 <= t <= 0.6 for t in a)                        # (0.1 + 0.1) * 2 * (1 + U(0, 0.5))
    assert ComputeModel(0.1, 0.01, [1.0, 3.0]).step_time(3, 10) == pytest.approx(0.6)


def test_network_model():
    net = NetworkModel(0.01, 1e6)
    assert net.transfer(5e5) == pytest.approx(0.51)
    assert net.allreduce(1e6, 1) == 0.0
    assert net.allreduce(1e6, 4) == pytest.approx(4 * 0.01 + 1.5)
    assert net.allgather([100.0, 300.0, 200.0]) == pytest.approx(2 * 0.01 + 500 / 1e6)


# ---------------------------------------------------------------- Collectives


def make(world: int, net: NetworkModel | None = None) -> tuple[simpy.Environment, Collectives]:
    env = simpy.Environment()

    def schedule(delay, callback):
        env.timeout(delay).callbacks.append(lambda _e: callback())

    return env, Collectives(world, net or NetworkModel(0.001, 1e6), schedule, env.event)


def test_allreduce_matches_by_order_and_completes_after_the_last_plus_network():
    env, col = make(3)
    tensors = [[torch.full((4,), float(r + 1)), torch.tensor([float(r)])] for r in range(3)]
    ops = {}

    def worker(rank):
        yield env.timeout(rank)                                   # ranks arrive at t = 0, 1, 2
        op = col.post(rank, AllReduce(tensors[rank], weight=rank + 1.0), env.now)
        yield op.event
        ops[rank] = (op, env.now, col.result(op, rank))
        col.release(op, rank)

    for r in range(3):
        env.process(worker(r))
    env.run()
    nbytes = 5 * 4
    expected_t = 2 + NetworkModel(0.001, 1e6).allreduce(nbytes, 3)
    w = np.array([1.0, 2.0, 3.0])
    for rank in range(3):
        op, t, res = ops[rank]
        assert t == pytest.approx(expected_t)
        assert res[0].tolist() == pytest.approx([float((w * [1, 2, 3]).sum() / w.sum())] * 4)
        assert res[1].item() == pytest.approx(float((w * [0, 1, 2]).sum() / w.sum()))
    ops[0][2][0].add_(100.0)                                        # results are independent tensors
    assert ops[1][2][0][0].item() < 10
    assert not col.ops                                              # released


def test_collectives_share_the_network_one_at_a_time():
    env, col = make(2, NetworkModel(0.0, 1000.0))
    done = {}

    def worker(rank):
        a = col.post(rank, AllReduce([torch.zeros(250)], op="sum"), env.now)     # 1000 bytes: 1 s
        b = col.post(rank, AllReduce([torch.zeros(500)], op="sum"), env.now)     # 2000 bytes: 2 s
        yield b.event
        done[rank] = (a.complete_at, b.complete_at, env.now)

    for r in range(2):
        env.process(worker(r))
    env.run()
    assert done[0] == pytest.approx((1.0, 3.0, 3.0)) and done[1] == done[0]


def test_allgather_results_are_read_only_and_mismatches_raise():
    env, col = make(2)
    ops = [col.post(r, AllGather([torch.tensor([float(r)])]), 0.0) for r in range(2)]
    env.run()
    res = col.result(ops[0], 0)
    assert [p[0].item() for p in res] == [0.0, 1.0]
    res[1][0].add_(1.0)                                             # an algorithm breaking the contract
    with pytest.raises(RuntimeError, match="read-only"):
        col.check_gathers()
    env, col = make(2)
    col.post(0, AllGather([torch.zeros(1)]), 0.0)
    with pytest.raises(RuntimeError, match="mismatch"):
        col.post(1, AllReduce([torch.zeros(1)]), 0.0)
    env, col = make(2)
    col.post(0, AllReduce([torch.zeros(2)]), 0.0)
    with pytest.raises(RuntimeError, match="shapes"):
        col.post(1, AllReduce([torch.zeros(3)]), 0.0)


def test_a_worker_leaving_a_pending_collective_is_a_deadlock():
    _, col = make(3)
    col.post(0, AllReduce([torch.zeros(1)]), 0.0)
    with pytest.raises(RuntimeError, match="deadlock"):
        col.worker_finished(2)
    _, col = make(2)
    col.worker_finished(1)
    with pytest.raises(RuntimeError, match="deadlock"):
        col.post(0, AllReduce([torch.zeros(1)]), 0.0)
    assert math.isfinite(NetworkModel(0.0, 1.0).allreduce(0, 2))


# ---------------------------------------------------------------- Replicas


def test_shared_replica_defers_updates_and_splits_when_a_worker_runs_ahead():
    from edgestream.sim.replicas import Replicas

    reps = Replicas("mlp", (1, 8, 8), 10, 2, lr=0.1, momentum=0.9, weight_decay=0.0, seed=0, shared=True)
    w0 = reps.get_params(0)
    update = [torch.ones_like(p) for p in w0]
    reps.apply(0, update, 0.1)                        # deferred: worker 1 has not applied yet
    assert reps.shared and torch.equal(reps.get_params(1)[0], w0[0])
    assert len(reps.models) == 1
    reps.apply(1, [u.clone() for u in update], 0.1)   # equal update: one optimizer step for both
    assert reps.shared and reps.version == 1
    w1 = reps.get_params(0)
    assert torch.allclose(w1[0], w0[0] - 0.1)
    reps.apply(0, update, 0.1)                        # worker 0 runs ahead and reads: split, once
    ahead = reps.get_params(0)
    assert not reps.shared and "read its model" in reps.unshared
    assert torch.equal(reps.get_params(1)[0], w1[0])
    reps.apply(1, update, 0.1)
    assert torch.equal(reps.get_params(1)[0], ahead[0])   # momentum state was copied, not shared
    reps.apply(0, update, 0.1)
    reps.apply(1, update, 0.1)
    assert reps.identical()
    per_worker = Replicas("mlp", (1, 8, 8), 10, 2, lr=0.1, momentum=0.9, weight_decay=0.0, seed=0)
    for _ in range(3):
        for r in range(2):
            per_worker.apply(r, update, 0.1)
    assert torch.equal(per_worker.get_params(0)[0], reps.get_params(0)[0])


def test_different_updates_split_the_shared_replica():
    from edgestream.sim.replicas import Replicas

    reps = Replicas("mlp", (1, 8, 8), 10, 2, lr=0.1, momentum=0.0, weight_decay=0.0, seed=0, shared=True)
    w0 = reps.get_params(0)
    reps.apply(0, [torch.ones_like(p) for p in w0], 0.1)
    reps.apply(1, [torch.zeros_like(p) for p in w0], 0.1)
    assert not reps.shared and "differs" in reps.unshared
    assert torch.allclose(reps.get_params(0)[0], w0[0] - 0.1) and torch.equal(reps.get_params(1)[0], w0[0])
    assert not reps.identical()
