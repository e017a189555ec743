"""Batched simulation (edgestream.sim.batched): the devices' Compute requests served by one vmapped
forward/backward give the same run as the per-device reference path.

Same run = the same parameters (allclose, rtol 1e-5) and the same events.jsonl lines: every field
equal, floats (losses, the adaptive statistic) up to float rounding. Small runs: digits, a few
devices, explicit compute times, a few steps.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from factories import DATA_VARIANTS as SUM_DATA  # digits, synthetic of other ranks and classes, regression
from factories import cfg_of  # the simulator tests' config helper: tests/factories.py
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from edgestream.data.order import ShardOrder
from edgestream.metrics import EventLog
from edgestream.runner.plan import RunPlan
from edgestream.sim import orders as orders_mod
from edgestream.sim.batchable import batch_independent
from edgestream.sim.batched import BatchedCompute
from edgestream.sim.engine import AUTO_PER_DEVICE, COMPUTE_ENV, SimConfigError, SimEngine
from edgestream.sim.orders import (
    SMALL_SHARD,
    EpochOrders,
    epoch_permutation,
    permutation,
    permutations,
    seed_words,
)
from edgestream.sim.replicas import Replicas
from edgestream.sync.registry import ALGORITHMS

RTOL, ATOL = 1e-5, 1e-6


def run(cfg: Any, batch_compute: bool | None) -> tuple[SimEngine, list[dict]]:
    log = EventLog(None, keep=True)
    engine = SimEngine(cfg, log, batch_compute=batch_compute)
    engine.run()
    log.close()
    assert log.records is not None
    return engine, log.records


def assert_same_lines(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys(), (x, y)
        for key, u in x.items():
            v = y[key]
            if isinstance(u, float) and isinstance(v, float):
                assert u == pytest.approx(v, rel=RTOL, abs=2e-6), (key, x, y)  # lines round to 6 decimals
            else:
                assert u == v, (key, x, y)


def assert_same_run(per_device: SimEngine, batched: SimEngine, lines_a: list[dict], lines_b: list[dict]) -> None:
    assert per_device.compute_mode == "per-device" and batched.compute_mode == "batched"
    assert_same_lines(lines_a, lines_b)
    assert per_device.replicas.layout() == batched.replicas.layout()
    for pa, pb in zip(per_device.replicas.params, batched.replicas.params, strict=True):
        for a, b in zip(pa, pb, strict=True):
            assert torch.allclose(a, b, rtol=RTOL, atol=ATOL), (a - b).abs().max()
    assert per_device.stats.device_steps == batched.stats.device_steps
    assert batched.batcher is not None and batched.batcher.served == batched.stats.device_steps


HETERO = {"rates": {"distribution": "uniform", "low": 20, "high": 120},
          "compute": {"static": [1, 2, 3], "dynamic": 0.3}}

CASES = {
    "ddl-mlp-2": dict(devices={"count": 2}, algorithm={"name": "ddl", "batch": {"policy": "fixed", "size": 16}}),
    "ddl-cnn-3": dict(devices={"count": 3, **HETERO}, model={"name": "cnn-small"},
                      algorithm={"name": "ddl", "batch": {"policy": "fixed", "size": 8}}),
    "ddl-topk-7": dict(devices={"count": 7}, algorithm={"name": "ddl", "batch": {"policy": "fixed", "size": 5}},
                       compression={"name": "topk", "ratio": 0.05}),
    "scadles-mlp-7": dict(devices={"count": 7, **HETERO},
                          algorithm={"name": "scadles", "batch": {"policy": "rate", "min": 4, "max": 90},
                                     "buffer": "truncate"}),
    "scadles-adaptive-3": dict(devices={"count": 3, **HETERO},
                               algorithm={"name": "scadles", "batch": {"policy": "rate", "min": 8, "max": 64},
                                          "buffer": "truncate", "injection": {"alpha": 0.5, "beta": 0.25}},
                               compression={"name": "adaptive-topk", "ratio": 0.1}),
    "scadles-adaptive-cnn-2": dict(devices={"count": 2, **HETERO,  # b_i within 25 %: one padded pass
                                            "rates": {"distribution": "uniform", "low": 30, "high": 36}},
                                   model={"name": "cnn-small"},
                                   algorithm={"name": "scadles", "batch": {"policy": "rate", "min": 8, "max": 48}},
                                   compression={"name": "adaptive-topk", "ratio": 0.1}),
    "dbs-sgd-3": dict(devices={"count": 3, **HETERO},
                      algorithm={"name": "dbs-sgd", "batch": {"policy": "fixed", "size": 16},
                                 "params": {"base_batch": 16, "every": 2}}),
    "abs-sgd-3": dict(devices={"count": 3, **HETERO},
                      algorithm={"name": "abs-sgd", "batch": {"policy": "fixed", "size": 16},
                                 "params": {"ref_batch": 12}}),
    "abs-sgd-cnn-2": dict(devices={"count": 2, "compute": {"static": [1, 3]}}, model={"name": "cnn-small"},
                          algorithm={"name": "abs-sgd", "batch": {"policy": "fixed", "size": 16}}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_batched_and_per_device_runs_are_the_same(case):
    cfg = cfg_of(**CASES[case], stop={"max_steps": 5}, eval={"every_s": 0.5})
    per_device, lines_a = run(cfg, False)
    batched, lines_b = run(cfg, None)  # auto: batched
    assert_same_run(per_device, batched, lines_a, lines_b)
    assert batched.batcher is not None and batched.batcher.passes < batched.batcher.served  # it batched
    assert any(e["kind"] == "eval" for e in lines_b)


def test_batching_a_non_synchronous_algorithm_is_the_same_run():
    """local-sgd's replicas drift apart between averaging rounds: a pass stacks their parameters."""
    cfg = cfg_of(devices={"count": 3, **HETERO}, algorithm={"name": "local-sgd", "params": {"tau": 3},
                                                             "batch": {"policy": "fixed", "size": 8}},
                 stop={"max_steps": 7})
    per_device, lines_a = run(cfg, False)
    batched, lines_b = run(cfg, None)  # auto batches it (issue 35 item 2)
    assert batched.compute_reason == "batched (auto)"
    assert_same_run(per_device, batched, lines_a, lines_b)
    assert batched.replicas.layout()["replicas"] == "per-worker"


#: asynchronous algorithms that auto batches since issue 35 item 2, one or more per family: the
#: local-SGD family's loss-driven tau (adacomm), and the parameter-server family's coordinators (pulls
#: that never wait, staleness-bounded pulls, averaged updates, ZipLine barriers, timed commits, the PS's
#: BSP barrier, local steps committed to the PS)
ASYNC_CASES = {
    "adacomm": {"tau": 2, "check_every": 1},
    "asp": {},
    "ssp": {"s": 1},
    "dynsgd": {},
    "elastic-bsp": {"R": 3},
    "adsp": {},
    "bsp": {},
    "adacomm-ps": {"tau": 2, "check_every": 1},
}


@pytest.mark.parametrize("name", list(ASYNC_CASES))
def test_auto_batched_asynchronous_algorithms_are_the_same_run(name, monkeypatch):
    monkeypatch.delenv(COMPUTE_ENV, raising=False)
    cfg = cfg_of(devices={"count": 3, **HETERO}, stop={"max_steps": 6}, eval={"every_s": 0.5},
                 algorithm={"name": name, "params": ASYNC_CASES[name], "batch": {"policy": "fixed", "size": 8}})
    per_device, lines_a = run(cfg, False)
    batched, lines_b = run(cfg, None)
    assert batched.compute_reason == "batched (auto)", batched.compute_reason
    assert_same_run(per_device, batched, lines_a, lines_b)
    assert batched.batcher is not None and batched.batcher.passes < batched.batcher.served  # it batched
    assert any(e["kind"] == "eval" for e in lines_b)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_auto_batches_every_algorithm_not_measured_slower(name, monkeypatch):
    """auto: batched for every registered algorithm on a per-sample model, except AUTO_PER_DEVICE's
    (measured slower batched), which say so; `batched` and batch_compute=True batch those too."""
    monkeypatch.delenv(COMPUTE_ENV, raising=False)
    spec = ALGORITHMS[name]
    cfg = cfg_of(algorithm={"name": name, "batch": spec.suited_batch({"policy": "fixed", "size": 8})},
                 stop={"max_steps": 1})
    engine = SimEngine(cfg, EventLog(None))
    if name in AUTO_PER_DEVICE:
        assert engine.compute_mode == "per-device"
        assert engine.compute_reason.startswith(f"per-device: {name} is slower batched (")
        assert SimEngine(cfg, EventLog(None), batch_compute=True).compute_mode == "batched"
        monkeypatch.setenv(COMPUTE_ENV, "batched")
        assert SimEngine(cfg, EventLog(None)).compute_mode == "batched"
    else:
        assert (engine.compute_mode, engine.compute_reason) == ("batched", "batched (auto)")
    monkeypatch.setenv(COMPUTE_ENV, "per-device")
    assert SimEngine(cfg, EventLog(None)).compute_mode == "per-device"


def test_an_algorithm_measured_slower_stays_per_device_under_auto(monkeypatch):
    monkeypatch.delenv(COMPUTE_ENV, raising=False)
    monkeypatch.setitem(AUTO_PER_DEVICE, "asp", "measured 1 vs 2 device-steps/s")
    cfg = cfg_of(algorithm={"name": "asp", "batch": {"policy": "fixed", "size": 8}}, stop={"max_steps": 1})
    engine = SimEngine(cfg, EventLog(None))
    assert engine.compute_mode == "per-device"
    assert engine.compute_reason == "per-device: asp is slower batched (measured 1 vs 2 device-steps/s; auto)"
    assert SimEngine(cfg, EventLog(None), batch_compute=True).compute_reason == "batched (batch_compute=True)"
    monkeypatch.setenv(COMPUTE_ENV, "batched")
    assert SimEngine(cfg, EventLog(None)).compute_reason == f"batched ({COMPUTE_ENV}=batched)"


def test_the_switch_and_models_that_stay_per_device(monkeypatch):
    cfg = cfg_of(stop={"max_steps": 1})
    assert SimEngine(cfg, EventLog(None)).compute_mode == "batched"
    monkeypatch.setenv(COMPUTE_ENV, "per-device")
    engine = SimEngine(cfg, EventLog(None))
    assert engine.compute_mode == "per-device" and COMPUTE_ENV in engine.compute_reason
    assert SimEngine(cfg, EventLog(None), batch_compute=True).compute_mode == "batched"  # the argument wins
    monkeypatch.setenv(COMPUTE_ENV, "sometimes")
    with pytest.raises(SimConfigError, match=COMPUTE_ENV):
        SimEngine(cfg, EventLog(None))
    monkeypatch.delenv(COMPUTE_ENV)
    bn = SimEngine(cfg_of(model={"name": "resnet20"}, stop={"max_steps": 1}), EventLog(None), batch_compute=True)
    assert bn.compute_mode == "per-device" and "batch-norm" in bn.compute_reason
    summary = bn.extra_summary(1.0)
    assert summary["compute_path"] == "per-device" and "batch-norm" in summary["compute_reason"]


def test_which_batched_path_a_model_takes():
    from edgestream.models import build_model
    from edgestream.sim.batched import DenseStack

    assert DenseStack.of(build_model("mlp", (1, 8, 8), 10)) is not None
    assert DenseStack.of(build_model("cnn-small", (1, 8, 8), 10)) is None  # convolutions: the vmap path
    assert DenseStack.of(nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU()), nn.Linear(4, 2))) is None
    frozen = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 2))
    stack = DenseStack.of(frozen)
    assert stack is not None and not stack.layers[1][1].inplace and frozen[1].inplace  # a copy runs out of place
    frozen[0].bias.requires_grad_(False)
    assert DenseStack.of(frozen) is None


def test_which_models_treat_samples_independently():
    assert batch_independent(nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4, 2))) is None
    assert "batch" in batch_independent(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))
    assert "batch" in batch_independent(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4, track_running_stats=False)))
    assert "random masks" in batch_independent(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1)))

    class Custom(nn.Linear):  # a subclass may do anything in forward
        pass

    assert "not known" in batch_independent(nn.Sequential(Custom(4, 4)))


def test_a_pass_serves_only_devices_whose_model_is_settled():
    """Shared replica: a worker that applied an update its peers have not applied yet reads the next
    version at the end of its compute; a pass run earlier must leave it pending."""
    torch.manual_seed(0)
    shape, classes = (1, 8, 8), 10
    rep = Replicas("mlp", shape, classes, 2, lr=0.1, momentum=0.0, weight_decay=0.0, seed=1, shared=True)
    ref = Replicas("mlp", shape, classes, 2, lr=0.1, momentum=0.0, weight_decay=0.0, seed=1, shared=False)
    batcher = BatchedCompute(rep)
    x, y = torch.randn(2, 6, *shape), torch.randint(0, classes, (2, 6))
    update = [torch.randn_like(p) for p in rep.params[0]]
    rep.apply(0, update, 0.1)                   # worker 0 applied; the shared replica waits for worker 1
    batcher.post(0, SimpleNamespace(n=6, x=x[0], y=y[0]))
    batcher.post(1, SimpleNamespace(n=6, x=x[1], y=y[1]))
    got1 = batcher.result(1)                    # worker 1's compute ends first: worker 0 is not settled
    assert set(batcher.pending) == {0} and batcher.passes == 1
    rep.apply(1, update, 0.1)                   # now the replica steps
    got0 = batcher.result(0)
    want1 = ref.compute(1, x[1], y[1])
    ref.apply(0, update, 0.1)
    want0 = ref.compute(0, x[0], y[0])
    for got, want in ((got0, want0), (got1, want1)):
        assert got.n == want.n and got.loss == pytest.approx(want.loss, rel=1e-6)
        for a, b in zip(got.grads, want.grads, strict=True):
            assert torch.allclose(a, b, rtol=RTOL, atol=1e-7)


@pytest.mark.parametrize("path", ["dense-stack", "vmap"])
def test_padding_buckets_and_independent_results(path):
    rep = Replicas("mlp", (1, 8, 8), 10, 4, lr=0.1, momentum=0.0, weight_decay=0.0, seed=2, shared=True)
    ref = Replicas("mlp", (1, 8, 8), 10, 4, lr=0.1, momentum=0.0, weight_decay=0.0, seed=2, shared=False)
    batcher = BatchedCompute(rep)
    assert batcher.dense is not None  # the mlp: one autograd pass, per-device gradients by bmm
    if path == "vmap":
        batcher.dense = None
    sizes = [5, 6, 3, 40]  # buckets {3}, {5, 6} padded to 6, {40}
    data = [(torch.randn(n, 1, 8, 8), torch.randint(0, 10, (n,))) for n in sizes]
    for r, (x, y) in enumerate(data):
        batcher.post(r, SimpleNamespace(n=len(y), x=x, y=y))
    results = [batcher.result(0)]
    assert set(batcher.ready) == {1, 2, 3} and not batcher.pending  # one call served every device
    results += [batcher.result(r) for r in range(1, 4)]
    assert batcher.passes == 3 and batcher.served == 4  # one vmapped pass per bucket
    for r, (x, y) in enumerate(data):
        want = ref.compute(r, x, y)
        assert results[r].n == sizes[r] and results[r].loss == pytest.approx(want.loss, rel=1e-6)
        for a, b in zip(results[r].grads, want.grads, strict=True):
            assert torch.allclose(a, b, rtol=RTOL, atol=1e-7)
    results[0].grads[0].add_(1.0)  # a worker may modify its own result
    assert not torch.equal(results[0].grads[0], results[1].grads[0])
    assert torch.allclose(results[1].grads[0], ref.compute(1, *data[1]).grads[0], rtol=RTOL, atol=1e-7)


def test_epoch_permutations_are_the_producers_order():
    keys = [(seed, device, epoch) for seed in (0, 3, 2**32 - 1) for device in (0, 1, 7, 255, 1023, 70001)
            for epoch in (0, 1, 2, 63, 64, 1000)]
    words = seed_words(np.array(keys, dtype=np.uint32)).tolist()
    for key, w in zip(keys, words, strict=True):
        for n in (2, 3, 6, 7, 17, SMALL_SHARD, 100):
            assert permutation(w, n) == np.random.default_rng(list(key)).permutation(n).tolist(), (key, n)
    for n in (1, 5, SMALL_SHARD + 1, 300):  # both paths, and one-sample shards
        shard = np.arange(1000, 1000 + n)
        orders = [ShardOrder(shard, 11, d) for d in range(3)]
        fast = EpochOrders(orders)
        assert fast.agrees()
        for device in range(3):
            for epoch in (0, 1, 5, 64, 65, 130):
                want = [orders[device].index(epoch * n + j) for j in range(n)]
                assert fast.order(device, epoch).tolist() == want
                assert epoch_permutation(shard, 11, device, epoch).tolist() == want
    plan = RunPlan.resolve(cfg_of(devices={"count": 300}))  # shards of 4-5 samples: many epochs per batch
    engine = SimEngine(plan, EventLog(None))
    assert engine.data._fast
    for device in (0, 123, 299):
        order = ShardOrder(plan.shards[device], plan.seed, device)
        got = engine.data.stream_indices(device, 3, 250)
        assert got.tolist() == [order.index(k) for k in range(3, 250)]


def test_the_c_shuffle_is_built_and_equals_python_and_numpy():
    """The C extension (built by `make install`) and the Python fallback give numpy's permutations."""
    assert orders_mod._shuffle is not None, "edgestream.sim._shuffle was not built (setup.py)"
    keys = np.array([(s, d, e) for s in (0, 5, 2**32 - 1) for d in (0, 9, 4095) for e in (0, 1, 300)],
                    dtype=np.uint32)
    words = seed_words(keys)
    for n in (1, 2, 3, 16, SMALL_SHARD, 257):
        fast = permutations(words, n)
        assert fast.shape == (len(keys), n) and fast.dtype == np.int64
        for row, key, w in zip(fast.tolist(), keys.tolist(), words.tolist(), strict=True):
            want = np.random.default_rng(key).permutation(n).tolist()
            assert row == want == permutation(w, n), (key, n)
    with pytest.raises(ValueError, match="out must hold"):
        orders_mod._shuffle.permutations(words, 4, np.empty((len(keys), 3), dtype=np.int64))
    with pytest.raises(ValueError, match="n must be"):
        orders_mod._shuffle.permutations(words, 0, np.empty((len(keys), 0), dtype=np.int64))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), device=st.integers(0, 2**32 - 1), epoch=st.integers(0, 2**32 - 1),
       n=st.integers(1, 64))
def test_permutations_equal_numpy_for_any_key(seed: int, device: int, epoch: int, n: int) -> None:
    key = [seed, device, epoch]
    got = permutations(seed_words(np.array([key], dtype=np.uint32)), n)[0].tolist()
    assert got == np.random.default_rng(np.array(key, dtype=np.uint32)).permutation(n).tolist()


def test_epoch_orders_without_the_c_shuffle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python fallback (no C compiler at install) gives the same blocks."""
    shard = np.arange(40, 47)
    orders = [ShardOrder(shard, 3, d) for d in range(2)]
    with_c = EpochOrders(orders).indices(1, 5, 400).tolist()
    monkeypatch.setattr(orders_mod, "_shuffle", None)
    without = EpochOrders(orders)
    assert without.agrees()
    assert without.indices(1, 5, 400).tolist() == with_c == [orders[1].index(k) for k in range(5, 400)]


def test_stream_blocks_span_epochs_and_seed_blocks():
    """EpochOrders.indices: read-only slices of per-device blocks of whole epochs, equal to ShardOrder
    across block ends and across the seed-word blocks (BLOCK epochs), for any (start, stop)."""
    from edgestream.sim.orders import BLOCK, BLOCK_SAMPLES

    for n in (1, 2, 5, SMALL_SHARD + 3):
        shard = np.arange(500, 500 + n)
        orders = [ShardOrder(shard, 7, d) for d in range(2)]
        fast = EpochOrders(orders)
        end = (BLOCK + 5) * n + BLOCK_SAMPLES  # past the first seed block and several sample blocks
        want = [orders[1].index(k) for k in range(end)]
        start = 0
        for size in (3, 32, 1, BLOCK_SAMPLES + 9, 64):  # a batch may be larger than a block
            while start + size <= end:
                got = fast.indices(1, start, start + size)
                assert got.dtype == np.int64 and not got.flags.writeable
                assert got.tolist() == want[start:start + size], (n, start, size)
                start += size
            start = 0 if size != 64 else start


def test_the_exchange_mean_is_computed_once_per_all_reduce_and_is_read_only():
    """The simulated all-reduce hands each worker its own tensors, but the exchange's division by W is
    shared (the same tensors for every worker: Replicas compares them by identity) and checked."""
    import simpy

    from edgestream.sim.collectives import Collectives
    from edgestream.sim.costs import NetworkModel
    from edgestream.sync.exchange import exchange

    env = simpy.Environment()

    def schedule(delay, callback):
        env.timeout(delay).callbacks.append(lambda _ev: callback())

    col = Collectives(3, NetworkModel(0.0, 1e9), schedule, env.event)
    grads = [[torch.full((2, 2), float(r + 1)), torch.full((3,), -float(r))] for r in range(3)]
    progs = [exchange(g, 1.0 + r) for r, g in enumerate(grads)]
    ops = [col.post(r, next(p), 0.0) for r, p in enumerate(progs)]
    env.run()
    results = []
    for r, (p, op) in enumerate(zip(progs, ops, strict=True)):
        reduced = col.result(op, r)
        with pytest.raises(StopIteration) as stop:
            p.send(reduced)
        results.append(stop.value.value)
    w = np.array([1.0, 2.0, 3.0])
    for res in results:
        assert res.total_weight == 6.0 and not res.stop
        assert res.update[0].flatten().tolist() == pytest.approx([float((w * [1, 2, 3]).sum() / 6)] * 4)
        assert res.update[1].tolist() == pytest.approx([float((w * [0, -1, -2]).sum() / 6)] * 3)
        assert all(a is b for a, b in zip(res.update, results[0].update, strict=True))  # shared, not copied
    col.result(ops[0], 0)[0].add_(1.0)           # a worker's own all-reduce result: its own to modify
    assert not torch.equal(col.result(ops[0], 0)[0], col.result(ops[1], 1)[0])
    results[1].update[0].mul_(2.0)               # the shared mean is read-only
    with pytest.raises(RuntimeError, match="derived from an AllReduce result.*read-only"):
        col.check_gathers()


@settings(max_examples=12, deadline=None)
@given(st.integers(2, 9), st.integers(1, 12), st.sampled_from(list(SUM_DATA)), st.sampled_from(["ddl", "scadles"]))
def test_the_all_reduce_sums_the_batched_gradients_as_one_block(devices: int, batch: int, data: str,
                                                                algorithm: str) -> None:
    """A batched synchronous run is the per-device run, and ddl's all-reduce sums the workers' gradients
    as one block: its plain mean sends them as they are, rows of one pass's stacked gradients (ScaDLES'
    weighted ones are each worker's own products)."""
    from edgestream.sync import reduction

    blocks: list[bool] = []
    original = reduction._leading_block

    def spy(rows):
        lead = original(rows)
        blocks.append(lead is not None and rows[0]._base is not None and lead[0].data_ptr() == rows[0].data_ptr())
        return lead

    over = dict(SUM_DATA[data])
    stop = {**over.pop("stop", {}), "max_steps": 3}
    batch_policy = ({"policy": "fixed", "size": batch} if algorithm == "ddl"
                    else {"policy": "rate", "min": batch, "max": batch + 8})
    cfg = cfg_of(**over, devices={"count": devices}, algorithm={"name": algorithm, "batch": batch_policy},
                 stop=stop, eval={"every_s": 0.5})
    reduction._leading_block = spy
    try:
        per_device, lines_a = run(cfg, False)
        assert not any(blocks)  # per-device gradients: separate tensors
        blocks.clear()
        batched, lines_b = run(cfg, True)
    finally:
        reduction._leading_block = original
    assert_same_run(per_device, batched, lines_a, lines_b)
    if algorithm == "ddl":
        assert any(blocks)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(1, SMALL_SHARD + 4), min_size=1, max_size=6),
       positions=st.lists(st.integers(0, 5000), min_size=6, max_size=6), reads=st.integers(1, 300))
def test_warmed_orders_are_the_producers_order(seed: int, sizes: list[int], positions: list[int], reads: int) -> None:
    """EpochOrders.warm (the seed words of every small-shard device at once, from the streams' positions
    when a run starts or resumes) changes no order: each device's stream from its position on, across
    the warmed block's end, is ShardOrder's; a device warmed twice keeps its words."""
    from edgestream.sim.orders import BLOCK

    orders = [ShardOrder(np.arange(100 * d, 100 * d + n), seed, d) for d, n in enumerate(sizes)]
    at = {d: positions[d] for d in range(len(sizes))}
    warmed = EpochOrders(orders)
    warmed.warm(at)
    small = {d for d, n in enumerate(sizes) if 1 < n <= SMALL_SHARD}
    assert set(warmed._words) == small
    kept = {d: warmed._words[d][1] for d in small}
    warmed.warm({d: 0 for d in at})  # already warm: nothing recomputed
    assert all(warmed._words[d][1] is kept[d] for d in small)
    for d, n in enumerate(sizes):
        stop = at[d] + max(reads, (BLOCK + 1) * n - at[d] % n)  # past the warmed seed block
        want = [orders[d].index(k) for k in range(at[d], stop)]
        assert warmed.indices(d, at[d], stop).tolist() == want, (d, n)


def test_a_resumed_simulation_warms_its_orders_at_the_streams_positions():
    """The engine warms the orders at its streams' positions (a resumed run's, not 0): the first batches
    after the positions are the producers' order either way."""
    plan = RunPlan.resolve(cfg_of(devices={"count": 300}))  # shards of 4-5 samples
    engine = SimEngine(plan, EventLog(None))
    for d, stream in enumerate(engine.streams):
        stream.pos = 37 * d  # as a resumed run's state would set them
    engine.data.warm({d: s.pos for d, s in enumerate(engine.streams)})
    for device in (0, 123, 299):
        order = ShardOrder(plan.shards[device], plan.seed, device)
        first = engine.data.epochs._words[device][0]
        assert first == 37 * device // len(plan.shards[device])
        got = engine.data.stream_indices(device, 37 * device, 37 * device + 50)
        assert got.tolist() == [order.index(k) for k in range(37 * device, 37 * device + 50)]


def test_gradient_buffers_are_reused_only_when_nothing_holds_them():
    """GradBuffers: a buffer comes back once every view of it is gone (never while a worker's gradients
    still live in it); sizes and dtypes that do not fit get a new one; at most KEEP are kept per layer."""
    from edgestream.sim.batched import GradBuffers

    bufs = GradBuffers()
    a = bufs.take("w", (4, 3, 2), torch.float32)
    rows = a.unbind(0)
    b = bufs.take("w", (4, 3, 2), torch.float32)
    assert b.data_ptr() != a.data_ptr()  # a's rows are still held
    ptr_a = a.data_ptr()
    del a, rows
    c = bufs.take("w", (2, 3, 2), torch.float32)  # smaller: fits in a's memory, now free
    assert c.data_ptr() == ptr_a and c.shape == (2, 3, 2)
    d = bufs.take("w", (4, 3, 2), torch.float64)
    assert d.dtype == torch.float64 and d.data_ptr() not in (ptr_a, b.data_ptr())
    held = [bufs.take("w", (40, 3, 2), torch.float32) for _ in range(GradBuffers.KEEP + 2)]
    assert len({t.data_ptr() for t in held}) == len(held)
    assert len(bufs._kept["w"]) <= GradBuffers.KEEP
    view = np.asarray(held[-1])  # a numpy array over a buffer holds it too
    del held
    again = [bufs.take("w", (40, 3, 2), torch.float32) for _ in range(GradBuffers.KEEP)]
    assert view.ctypes.data not in {t.data_ptr() for t in again}


def test_simulated_batches_are_gathered_when_read():
    """A SimBatch's tensors are the dataset rows of its indices, gathered when first read (one device's
    batch, or a pass's [K, b] block of them through SimData.rows)."""
    plan = RunPlan.resolve(cfg_of(devices={"count": 4}))
    engine = SimEngine(plan, EventLog(None))
    data = engine.data
    idx = np.array([[3, 1, 4], [1, 5, 9]], dtype=np.int64)
    x, y = data.rows(idx)
    assert x.shape == (2, 3, *data.shape) and y.shape == (2, 3)
    for k in range(2):
        batch = data.batch(0, idx[k], 3)
        assert batch._x is None and batch.n == 3 and batch.own == 3 and batch.injected == 0
        assert torch.equal(batch.y, y[k]) and torch.equal(batch.x, x[k])
        assert torch.equal(batch.x, data.x_train[idx[k]]) and torch.equal(batch.y, data.y_train[idx[k]])
    with pytest.raises(ValueError, match="SimData"):
        type(batch)(3, None, None, idx[0], 0, 3, 0)
