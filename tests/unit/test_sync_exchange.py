"""The shared gradient exchange: ScaDLES' weighted aggregation oracle, compressed paths, adaptive votes.

Collectives are executed by `run_lockstep` of the lockstep engine (the exchange code path unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_digits
from torch import Tensor, nn

from edgestream.compression import AdaptiveTopKState, ResidualMemory, TopKCompressor, build_compressor
from edgestream.runner.lockstep import run_lockstep
from edgestream.sync import Codec, exchange
from edgestream.sync.reduction import reduce_all


def _no_local_requests(rank: int, req: object) -> None:
    raise AssertionError(f"exchange yielded a non-collective request {req!r}")


def _digits() -> tuple[Tensor, Tensor]:
    d = load_digits()
    return torch.tensor(d.data / 16.0, dtype=torch.float64), torch.tensor(d.target)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, 10)).double()


def _mean_loss_grads(model: nn.Module, x: Tensor, y: Tensor) -> list[Tensor]:
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def _run(grads: Sequence[list[Tensor]], weights: Sequence[float], spec: dict | None = None, **kw):
    codecs = [Codec.from_spec(spec) for _ in grads]
    programs = [exchange(g, w, c.compressor, c.memory, adaptive=c.adaptive, **kw)
                for g, w, c in zip(grads, weights, codecs, strict=True)]
    return run_lockstep(programs, _no_local_requests)


@pytest.mark.parametrize("spec", [None, {"name": "topk", "ratio": 1.0}], ids=["dense", "sparse-allgather"])
def test_weighted_aggregation_equals_gradient_of_concatenated_batch(spec: dict | None) -> None:
    """ScaDLES: sum_i b_i g_i / sum_j b_j == grad of the mean loss over all b_i samples (exact oracle)."""
    x, y = _digits()
    model = _model()
    sizes = [5, 17, 40, 3]
    bounds = torch.tensor([0, *sizes]).cumsum(0).tolist()
    grads = [_mean_loss_grads(model, x[a:b], y[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    oracle = _mean_loss_grads(model, x[: bounds[-1]], y[: bounds[-1]])

    results = _run(grads, [float(b) for b in sizes], spec)
    for r in results:
        assert r.total_weight == sum(sizes)
        assert r.compressed == (spec is not None)
        assert not r.stop
        for got, want in zip(r.update, oracle, strict=True):
            assert torch.allclose(got, want, atol=1e-10, rtol=0)
    # a plain mean (weight 1 each) is NOT the concatenated-batch gradient for unequal b_i
    plain = _run(grads, [1.0] * 4)[0]
    assert not torch.allclose(plain.update[0], oracle[0], atol=1e-6)
    assert plain.total_weight == 4


def test_dense_exchange_counts_floats_and_agrees_on_stop() -> None:
    grads = [[torch.ones(3, 4), torch.ones(5)], [3 * torch.ones(3, 4), torch.zeros(5)]]
    a, b = run_lockstep([exchange(grads[0], 1.0, stop=False), exchange(grads[1], 3.0, stop=True)],
                        _no_local_requests)
    assert a.stop and b.stop
    assert torch.allclose(a.update[0], torch.full((3, 4), (1 + 9) / 4))
    assert a.floats == 12 + 5 + 2 and a.nbytes == 4 * 19  # float32 tensors plus [w, stop]


def test_topk_exchange_sends_fewer_floats_and_conserves_mass() -> None:
    """Top-k with error feedback: sent + residual == gradient, per worker; the group gets the mean of sends."""
    torch.manual_seed(1)
    grads = [[torch.randn(10, 10), torch.randn(20)] for _ in range(2)]
    spec = {"name": "topk", "ratio": 0.1}
    codecs = [Codec.from_spec(spec) for _ in grads]
    assert isinstance(codecs[0].memory, ResidualMemory)
    out = run_lockstep([exchange(g, 1.0, c.compressor, c.memory) for g, c in zip(grads, codecs, strict=True)],
                       _no_local_requests)
    dense_floats = 100 + 20
    assert out[0].compressed and out[0].floats == 2 * (10 + 2) + 2  # (values, int32 indices) per layer + meta
    assert out[0].floats < dense_floats
    topk = TopKCompressor(0.1)
    sends = [[topk.decompress(topk.compress(t, str(i))) for i, t in enumerate(g)] for g in grads]
    for layer in range(2):
        want = (sends[0][layer] + sends[1][layer]) / 2
        assert torch.allclose(out[0].update[layer], want)
        for w, c in enumerate(codecs):
            assert torch.allclose(sends[w][layer] + c.memory.residual(str(layer)), grads[w][layer])


def test_lossy_dense_compressor_goes_through_allgather() -> None:
    grads = [[torch.tensor([1.0, 2.0, 3.0])], [torch.tensor([3.0, 2.0, 1.0])]]
    out = _run(grads, [1.0, 3.0], {"name": "fp16"})
    assert out[0].compressed
    assert torch.allclose(out[0].update[0], torch.tensor([2.5, 2.0, 1.5]))
    assert out[0].nbytes == 3 * 2 + 2 * 4  # fp16 payload + float32 meta


def _voter(compress: bool) -> AdaptiveTopKState:
    """A statistic that votes compress (history 0) or dense (history 1) whatever this step's c is."""
    s = AdaptiveTopKState(delta=0.3, beta=0.9)
    s.observe(0.0 if compress else 1.0)
    return s


@pytest.mark.parametrize("votes,expect", [((True, False), True), ((True, False, False), False),
                                         ((True, True, False), True), ((False, False), False)])
def test_adaptive_group_decision_needs_half_the_votes(votes: tuple[bool, ...], expect: bool) -> None:
    torch.manual_seed(2)
    comp = build_compressor({"name": "adaptive-topk", "ratio": 0.2})
    grads = [[torch.randn(50)] for _ in votes]
    programs = [exchange(g, 1.0, comp, ResidualMemory(), adaptive=_voter(v))
                for g, v in zip(grads, votes, strict=True)]
    out = run_lockstep(programs, _no_local_requests)
    assert all(r.compressed == expect for r in out)
    assert all(r.votes == sum(votes) for r in out)
    if not expect:  # dense: the exact mean
        assert torch.allclose(out[0].update[0], sum(g[0] for g in grads) / len(votes))


def test_adaptive_dense_step_folds_residual_in_once() -> None:
    """Compressed step, then dense step: sum of updates == sum of gradients (residual counted once), e == 0."""
    torch.manual_seed(3)
    comp = build_compressor({"name": "adaptive-topk", "ratio": 0.1})
    mems = [ResidualMemory(), ResidualMemory()]
    g1 = [[torch.randn(40)] for _ in range(2)]
    g2 = [[torch.randn(40)] for _ in range(2)]
    step1 = run_lockstep([exchange(g, 1.0, comp, m, adaptive=_voter(True)) for g, m in zip(g1, mems, strict=True)],
                         _no_local_requests)
    assert step1[0].compressed
    assert any(float(m.residual("0").abs().sum()) > 0 for m in mems)
    step2 = run_lockstep([exchange(g, 1.0, comp, m, adaptive=_voter(False)) for g, m in zip(g2, mems, strict=True)],
                         _no_local_requests)
    assert not step2[0].compressed
    total = step1[0].update[0] + step2[0].update[0]
    want = (g1[0][0] + g1[1][0] + g2[0][0] + g2[1][0]) / 2
    assert torch.allclose(total, want, atol=1e-6)
    for m in mems:
        assert torch.count_nonzero(m.residual("0")) == 0


def _drive_one(program, answer):
    """Run one exchange against `answer(request) -> result` (a one-worker engine of the test's making)."""
    req = next(program)
    try:
        program.send(answer(req))
    except StopIteration as stop:
        return req, stop.value
    raise AssertionError("the dense exchange issues one all-reduce")


@settings(max_examples=40, deadline=None)
@given(shapes=st.lists(st.lists(st.integers(0, 5), min_size=0, max_size=3), min_size=1, max_size=6),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]),
       weight=st.sampled_from([1.0, 0.5, 3.0, 17.0]), peers=st.floats(0.5, 100.0))
def test_the_exchange_divides_its_own_result_in_place_and_never_what_it_sent(shapes, dtype, weight, peers) -> None:
    """A result that is the worker's own (the real runtime's bucket buffers: here fresh tensors) is divided
    where it is, bit for bit the out-of-place division; a world of one, whose sum is the worker's own
    inputs (reduce_all of one request), never has them changed: the gradients stay as computed."""
    gen = torch.Generator().manual_seed(len(shapes))
    grads = [torch.randn(tuple(s), generator=gen, dtype=torch.float64).to(dtype) for s in shapes]
    kept = [g.clone() for g in grads]

    # fresh sums (as from peers): the update IS the result, divided in place, equal to the old division
    fresh: list[Tensor] = []

    def own(req):
        sums = [t * 2 for t in req.tensors[:-1]] + [req.tensors[-1] + torch.tensor([peers, 0.0], dtype=dtype)]
        fresh.extend(sums)
        return list(sums)

    _, res = _drive_one(exchange(grads, weight), own)
    total = float(torch.tensor([weight], dtype=dtype)[0]) + float(torch.tensor([peers], dtype=dtype)[0])
    assert res.total_weight == pytest.approx(total, rel=1e-2)
    for got, mine, sent in zip(res.update, fresh[:-1], grads, strict=True):
        assert got.data_ptr() == mine.data_ptr() or got.numel() == 0  # divided where it is
        want = torch._foreach_div([(weight * sent if weight != 1.0 else sent) * 2], res.total_weight)[0]
        assert torch.equal(got, want)
    for g, k in zip(grads, kept, strict=True):
        assert torch.equal(g, k)

    # a world of one: the sum is what was sent; nothing the worker sent is written into
    req, res1 = _drive_one(exchange(grads, weight), lambda r: reduce_all([r]))
    for g, k in zip(grads, kept, strict=True):
        assert torch.equal(g, k)
    assert torch.equal(req.tensors[-1], torch.tensor([weight, 0.0], dtype=dtype))  # the shared [w, stop]
    for got, g in zip(res1.update, grads, strict=True):
        assert torch.equal(got, g if weight == 1.0 else torch._foreach_div([weight * g], weight)[0])


class _NoReadBack(Tensor):
    """A tensor whose values must not be read back to the host (a GPU tensor's read waits for the device)."""

    def tolist(self):
        raise AssertionError("the exchange read the [w, stop] tensor back")


@settings(max_examples=40, deadline=None)
@given(weight=st.floats(0.0, 1e9, allow_nan=False), stop=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]))
def test_a_world_of_one_knows_w_and_stop_without_reading_its_sum_back(weight, stop, dtype) -> None:
    """The sum of one is (a view of) the [w, stop] tensor it sent: W and the stop vote come from the values it
    was built from, as the dtype rounds them (what reading it back gives, bit for bit), with no read-back --
    on a GPU, a wait for the device once per step. A result in other memory is read back as before."""
    grads = [torch.ones(3, dtype=dtype)]

    def one(req):
        out = reduce_all([req])  # the tensors themselves (detached views)
        return out[:-1] + [out[-1].as_subclass(_NoReadBack)]

    req, res = _drive_one(exchange(grads, weight, stop=stop), one)
    want = torch.tensor([weight, 1.0 if stop else 0.0], dtype=dtype).tolist()
    assert res.total_weight == float(want[0]) and res.stop == (want[1] > 0)

    def copied(req):  # same values in fresh memory (a peer's sum of zeros): read back
        return [t.clone() for t in req.tensors]

    _, res2 = _drive_one(exchange(grads, weight, stop=stop), copied)
    assert res2.total_weight == res.total_weight and res2.stop == res.stop


# ---------------------------------------------------------------- the exchange in the simulator, vectorised


from edgestream.compression import payload_nbytes  # noqa: E402
from edgestream.sync.exchange import _scale  # noqa: E402


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64]),
       st.floats(0.0, 1e6, allow_nan=False), st.lists(st.sampled_from([(1,), (3,), (4, 5), (2, 1, 3)]),
                                                      min_size=0, max_size=4), st.integers(0, 2**31 - 1))
def test_scaling_in_one_call_is_w_times_t(dtype: torch.dtype, weight: float, shapes: list, seed: int) -> None:
    """The weights w_i t_i of every tensor in one foreach call: the same dtype and bits as `weight * t`."""
    gen = torch.Generator().manual_seed(seed)
    ts = [torch.randn(s, generator=gen).mul(100).to(dtype) for s in shapes]
    for got, want in zip(_scale(ts, weight), [weight * t for t in ts], strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)


def _through_the_simulator(grads: list[list[Tensor]], weights: list[float], stops: list[bool]) -> list:
    """Every worker's exchange with the simulator's collectives (edgestream.sim.collectives), in SimPy."""
    import simpy

    from edgestream.sim.collectives import Collectives
    from edgestream.sim.costs import NetworkModel

    env = simpy.Environment()

    def schedule(delay, callback):
        env.timeout(delay).callbacks.append(lambda _ev: callback())

    col = Collectives(len(grads), NetworkModel(0.0, 1e9), schedule, env.event)
    progs = [exchange(g, w, stop=s) for g, w, s in zip(grads, weights, stops, strict=True)]
    ops = [col.post(r, next(p), 0.0) for r, p in enumerate(progs)]
    env.run()
    out = []
    for r, (p, op) in enumerate(zip(progs, ops, strict=True)):
        with pytest.raises(StopIteration) as stop:
            p.send(col.result(op, r))
        out.append(stop.value.value)
    return out


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 12), st.lists(st.sampled_from([(2,), (5,), (3, 4), (1, 6)]), min_size=1, max_size=3),
       st.sampled_from([torch.float32, torch.float64]), st.sampled_from(["ones", "batches"]),
       st.sampled_from(["stacked", "separate"]), st.integers(0, 2**31 - 1), st.data())
def test_the_simulated_exchange_is_the_lockstep_one_bit_for_bit(world: int, shapes: list, dtype: torch.dtype,
                                                               weighting: str, layout: str, seed: int, data) -> None:
    """The simulator's exchange (payload bytes counted once per all-reduce, the sum vectorised over the
    workers where their gradients are rows of one stacked tensor, as the batched compute hands them out)
    gives every worker what the lockstep engine's plain all-reduce gives it: the same update bits, total
    weight, stop agreement and bytes sent (its own payload: the gradients and [w, stop])."""
    gen = torch.Generator().manual_seed(seed)
    stacked = [torch.randn((world, *s), generator=gen, dtype=dtype) for s in shapes]
    grads = [list(row) for row in zip(*(t.unbind(0) for t in stacked), strict=True)]
    if layout == "separate":
        grads = [[t.clone() for t in g] for g in grads]
    weights = ([1.0] * world if weighting == "ones"
               else [float(b) for b in data.draw(st.lists(st.integers(1, 1024), min_size=world, max_size=world))])
    stops = data.draw(st.lists(st.booleans(), min_size=world, max_size=world))
    sim = _through_the_simulator(grads, weights, stops)
    ref = run_lockstep([exchange(g, w, stop=s) for g, w, s in zip(grads, weights, stops, strict=True)],
                       _no_local_requests)
    for r, (a, b) in enumerate(zip(sim, ref, strict=True)):
        assert (a.total_weight, a.stop, a.compressed, a.floats, a.nbytes) == \
            (b.total_weight, b.stop, b.compressed, b.floats, b.nbytes)
        assert a.nbytes == payload_nbytes(grads[r]) + 2 * torch.finfo(dtype).bits // 8
        assert a.stop == any(stops)
        for u, v in zip(a.update, b.update, strict=True):
            assert u.dtype == v.dtype and torch.equal(u, v) and torch.equal(torch.signbit(u), torch.signbit(v))
