"""The SSP family on the parameter server (issue 11): dssp, consgd, dynsgd.

Unit tests drive the coordinators directly (pushes with hand-made gradients and times, no engine);
one short simulated run per algorithm (3 workers at speeds 1:1:3, digits) checks that it learns.
"""

from __future__ import annotations

import heapq
import io
import random

import pytest
import torch
from factories import cfg_of, simulate, steps_of  # the simulator tests' config helpers: tests/factories.py

from edgestream.sync.consgd import ConSGDCoordinator
from edgestream.sync.coordinator import ServerContext
from edgestream.sync.dssp import DSSPCoordinator, best_k
from edgestream.sync.dynsgd import DynSGDCoordinator
from edgestream.sync.registry import get_algorithm
from edgestream.sync.requests import Push


def ctx_of(name: str, world: int, lr: float = 0.1, momentum: float = 0.0, weight_decay: float = 0.0,
           **params) -> ServerContext:
    return ServerContext(world_size=world, params=get_algorithm(name).resolve(params), lr=lr,
                         momentum=momentum, weight_decay=weight_decay)


def push(update, version: int = 0, lr: float = 0.1) -> Push:
    return Push([t.clone() for t in update], version=version, n=1, loss=1.0, lr=lr)


def roundtrip(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def drive(coord, step_time, pushes: int, seed: int = 0, on_push=None) -> None:
    """Run `coord` like an engine without network: each worker pushes after `step_time(worker, rng)`
    seconds of compute, then pulls; a blocked pull returns at the first push after which `ready`."""
    rng = random.Random(seed)
    world = coord.world
    zero = [torch.zeros_like(t) for t in coord.model()]
    heap = [(step_time(i, rng), i) for i in range(world)]
    heapq.heapify(heap)
    waiting: set[int] = set()
    for _ in range(pushes):
        t, i = heapq.heappop(heap)
        facts = coord.push(i, push(zero, version=coord.pulled_version[i]), t)
        if on_push is not None:
            on_push(i, t, facts)
        waiting.add(i)
        for j in sorted(waiting):
            if coord.ready(j, t):
                coord.pull(j, t)
                waiting.discard(j)
                heapq.heappush(heap, (t + step_time(j, rng), j))
        assert heap, "every worker is blocked: the pull rule deadlocked"


# ---------------------------------------------------------------------------------------------- consgd
@pytest.mark.parametrize("lam, world, expected", [(None, 4, 0.25), (0.5, 3, 0.5)])
def test_consgd_scales_each_update_by_lambda(lam, world, expected):
    torch.manual_seed(0)
    w0 = [torch.randn(3, 2), torch.randn(2)]
    g = [torch.randn(3, 2), torch.randn(2)]
    coord = ConSGDCoordinator(ctx_of("consgd", world, **({} if lam is None else {"lambda": lam})), w0)
    facts = coord.push(1, push(g, lr=0.1), now=0.5)
    for w, a, b in zip(coord.model(), w0, g, strict=True):
        assert torch.equal(w, torch.add(a, b, alpha=-(expected * 0.1)))   # W - lambda lr g, exactly
    assert facts["staleness"] == 0 and coord.version == 1
    assert coord.pull(1, 0.5).info["lambda"] == expected
    # a second push from the same worker, again scaled (not the SSP sum)
    w1 = [t.clone() for t in coord.model()]
    coord.push(1, push(g, version=1, lr=0.1), now=1.0)
    for w, a, b in zip(coord.model(), w1, g, strict=True):
        assert torch.equal(w, torch.add(a, b, alpha=-(expected * 0.1)))


def test_consgd_pulls_follow_ssp():
    coord = ConSGDCoordinator(ctx_of("consgd", 2, s=1), [torch.zeros(2)])
    g = [torch.ones(2)]
    coord.push(0, push(g), 0.0)
    assert coord.ready(0, 0.0)                 # clock 1, c_min 0: 1 - 0 <= s
    coord.push(0, push(g), 1.0)
    assert not coord.ready(0, 1.0)             # clock 2 > c_min + s
    coord.push(1, push(g), 2.0)
    assert coord.ready(0, 2.0)


# ---------------------------------------------------------------------------------------------- dynsgd
def test_dynsgd_averages_two_updates_of_one_version_exactly():
    # dyadic values: every intermediate is exact in float32, so the average must match bit for bit
    w0 = [torch.tensor([1.0, -2.0, 0.5]), torch.tensor([[4.0]])]
    g1 = [torch.tensor([1.0, 2.0, -4.0]), torch.tensor([[0.5]])]
    g2 = [torch.tensor([3.0, -2.0, 8.0]), torch.tensor([[-1.5]])]
    coord = DynSGDCoordinator(ctx_of("dynsgd", 3, lr=0.5), w0)
    f1 = coord.push(0, push(g1, version=0, lr=0.5), 1.0)
    assert f1["dyn_version"] == 0 and f1["dyn_d"] == 1
    for w, a, b in zip(coord.model(), w0, g1, strict=True):  # the first update of a version: whole
        assert torch.equal(w, a - 0.5 * b)
    f2 = coord.push(1, push(g2, version=0, lr=0.5), 2.0)
    assert f2["dyn_version"] == 0 and f2["dyn_d"] == 2 and f2["staleness"] == 1
    for w, a, b1, b2 in zip(coord.model(), w0, g1, g2, strict=True):
        assert torch.equal(w, a - 0.5 * (b1 + b2) / 2)     # averaged, not summed
        assert not torch.equal(w, a - 0.5 * (b1 + b2))


def test_dynsgd_average_in_float64_and_third_update():
    torch.manual_seed(1)
    w0 = [torch.randn(5, dtype=torch.float64)]
    gs = [[torch.randn(5, dtype=torch.float64)] for _ in range(3)]
    coord = DynSGDCoordinator(ctx_of("dynsgd", 3, lr=0.1), w0)
    for m in range(3):
        coord.push(m, push(gs[m], lr=0.1), float(m))
    mean = (gs[0][0] + gs[1][0] + gs[2][0]) / 3
    torch.testing.assert_close(coord.model()[0], w0[0] - 0.1 * mean, rtol=0, atol=1e-14)
    assert coord.U == {} and coord.S == {}       # every V(.) > 0: version 0 cleared
    assert coord.V == [1, 1, 1]


def test_dynsgd_reduces_to_plain_averaging_when_workers_are_equally_fast():
    torch.manual_seed(2)
    world, rounds, lr = 4, 5, 0.05
    w0 = [torch.randn(6, 3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)]
    grads = [[[torch.randn_like(t) for t in w0] for _ in range(world)] for _ in range(rounds)]
    coord = DynSGDCoordinator(ctx_of("dynsgd", world, lr=lr), w0)
    ref = [t.clone() for t in w0]
    for c in range(rounds):
        for m in range(world):                   # equally fast: round robin, one push per clock each
            coord.push(m, push(grads[c][m], version=coord.pulled_version[m], lr=lr), c + m / 10)
            assert coord.ready(m, c + m / 10)    # SSP never blocks equal speeds
            coord.pull(m, c + m / 10)
        for k in range(len(ref)):                # synchronous SGD on the mean gradient
            ref[k] = ref[k] - lr * sum(grads[c][m][k] for m in range(world)) / world
    for w, r in zip(coord.model(), ref, strict=True):
        torch.testing.assert_close(w, r, rtol=0, atol=1e-12)
    assert coord.version == rounds * world and len(coord.U) == 0


def test_dynsgd_groups_by_worker_clock_in_any_order_and_round_trips():
    """Worker 0 runs two clocks ahead; once every version is complete W is w0 - lr sum_v mean_v, the
    interleaving does not matter; the state saved mid-way resumes to the same W."""
    torch.manual_seed(3)
    lr = 0.2
    w0 = [torch.randn(4, dtype=torch.float64)]
    g = {(m, c): [torch.randn(4, dtype=torch.float64)] for m in range(2) for c in range(3)}
    order = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    coord = DynSGDCoordinator(ctx_of("dynsgd", 2, lr=lr), w0)
    for n, (m, c) in enumerate(order[:4]):
        facts = coord.push(m, push(g[m, c], lr=lr), float(n))
        assert facts["dyn_version"] == c
    assert facts["dyn_d"] == 2 and sorted(coord.U) == [1, 2]   # version 0 complete and cleared
    resumed = DynSGDCoordinator(ctx_of("dynsgd", 2, lr=lr), w0)
    resumed.load_state_dict(roundtrip(coord.state_dict()))
    for c_ in (coord, resumed):
        for n, (m, c) in enumerate(order[4:]):
            c_.push(m, push(g[m, c], lr=lr), 10.0 + n)
    ref = w0[0] - lr * sum((g[0, c][0] + g[1, c][0]) / 2 for c in range(3))
    torch.testing.assert_close(coord.model()[0], ref, rtol=0, atol=1e-12)
    assert torch.equal(resumed.model()[0], coord.model()[0])
    assert resumed.V == [3, 3] and resumed.U == {}


def test_dynsgd_weight_decay_is_averaged_with_the_updates():
    w0 = [torch.tensor([2.0, -1.0], dtype=torch.float64)]
    g1, g2 = [torch.tensor([1.0, 0.0], dtype=torch.float64)], [torch.tensor([0.0, 3.0], dtype=torch.float64)]
    wd, lr = 0.1, 0.5
    coord = DynSGDCoordinator(ctx_of("dynsgd", 2, lr=lr, weight_decay=wd), w0)
    coord.push(0, push(g1, lr=lr), 0.0)
    w1 = w0[0] - lr * (g1[0] + wd * w0[0])
    torch.testing.assert_close(coord.model()[0], w1, rtol=0, atol=1e-15)
    coord.push(1, push(g2, lr=lr), 1.0)
    ref = w0[0] - lr * ((g1[0] + wd * w0[0]) + (g2[0] + wd * w1)) / 2
    torch.testing.assert_close(coord.model()[0], ref, rtol=0, atol=1e-15)


# ------------------------------------------------------------------------------------------------ dssp
def test_best_k_minimises_the_gap_smallest_on_ties_and_stays_in_range():
    assert best_k(6.0, 1.5, 8.0, 12) == 1          # |6 + 1.5k - 8|: 2, 0.5, 1.0, ...
    assert best_k(0.0, 1.0, 2.5, 12) == 2          # gaps 2.5, 1.5, 0.5, 0.5: the smaller k
    assert best_k(0.0, 0.1, 100.0, 5) == 5         # far away: capped at r
    assert best_k(5.0, 1.0, 3.0, 12) == 0          # slowest already due: no extra pushes
    assert best_k(5.0, 0.0, 9.0, 12) == 0          # zero interval: every k ties


def test_dssp_hand_computed_k_star():
    """s_low 2, r 6, two workers: the fast one pushes every 1.5 s, the slow one every 4 s."""
    coord = DSSPCoordinator(ctx_of("dssp", 2, s_low=2, r=6), [torch.zeros(2)])
    z = [torch.zeros(2)]
    for worker, t in [(0, 0.0), (1, 0.0), (0, 1.5), (0, 3.0), (1, 4.0), (0, 4.5)]:
        assert coord.push(worker, push(z), t).get("dssp_k") is None   # lead <= s_low: nothing predicted
        assert coord.bound(0) == 2
    # t = 6: the fast worker reaches lead 3 > s_low. Prediction: t_fast = 6, I_fast = 1.5; the slow
    # worker's next push 4 + 4 = 8. |6 + 1.5k - 8| = 2, 0.5, 1.0, ... -> k* = 1: threshold 3.
    facts = coord.push(0, push(z), 6.0)
    assert facts["dssp_k"] == 1 and facts["dssp_threshold"] == 3
    assert coord.ready(0, 6.0)                      # plain SSP(2) would block here
    # t = 7.5: lead 4, re-evaluated: |7.5 + 1.5k - 8| = 0.5, 1.0 -> k* = 0: the threshold FALLS to
    # s_low + 0 = 2 (it is re-picked at every push past s_low, not floored at the lead reached)
    facts = coord.push(0, push(z), 7.5)
    assert facts["dssp_k"] == 0 and facts["dssp_threshold"] == 2 and coord.bound(0) == 2
    assert not coord.ready(0, 7.5)
    coord.push(1, push(z), 8.0)                     # lead 3 > 2: a worker ahead of a lowered threshold waits
    assert not coord.ready(0, 8.0)
    coord.push(1, push(z), 9.0)                     # lead 2: released
    assert coord.ready(0, 9.0)
    assert coord.pull(0, 9.0).info["threshold"] == 2
    resumed = DSSPCoordinator(ctx_of("dssp", 2, s_low=2, r=6), [torch.zeros(2)])
    resumed.load_state_dict(roundtrip(coord.state_dict()))
    assert (resumed.last, resumed.released, resumed.step, resumed.extra) == \
        (coord.last, coord.released, coord.step, coord.extra)
    assert resumed.released[0] == 9.0 and resumed.step == [1.5, 1.0]


def test_dssp_predicts_from_unblocked_step_times():
    """s_low 2, r 12: the fast worker (1 s steps) is blocked from t = 3 to t = 4; its push-to-push
    interval 3 -> 5 is 2 s, its step time (reply at 4 -> push at 5) 1 s. The slow worker (4 s steps) is
    released at 4 too: next push predicted at 8. |5 + 1 k - 8| -> k* = 3 (with the 2 s interval k*
    would be 1: DSSP collapsing towards SSP(s_low + 1))."""
    coord = DSSPCoordinator(ctx_of("dssp", 2, s_low=2, r=12), [torch.zeros(1)])
    z = [torch.zeros(1)]
    coord.push(1, push(z), 0.0)
    coord.pull(1, 0.0)
    for t in (0.0, 1.0, 2.0):
        coord.push(0, push(z), t)
        coord.pull(0, t)
    coord.push(0, push(z), 3.0)                      # lead 4 - 1 = 3 > 2
    assert not coord.ready(0, 3.0)                   # no step time for the slow worker yet: k* = 0
    coord.push(1, push(z), 4.0)
    coord.pull(1, 4.0)
    assert coord.step[1] == 4.0 and coord.ready(0, 4.0)
    coord.pull(0, 4.0)                               # blocked 3.0 -> 4.0
    facts = coord.push(0, push(z), 5.0)
    assert coord.step[0] == 1.0 and coord.last[0] == 5.0
    assert facts["dssp_k"] == 3 and facts["dssp_threshold"] == 5 and coord.ready(0, 5.0)


@pytest.mark.parametrize(("s_low", "r", "speeds"), [(2, 12, [1.0, 4.0]), (3, 12, [0.5, 0.5, 2.5]),
                                                    (1, 8, [1.0, 3.0, 3.0, 3.0])])
def test_dssp_step_times_are_the_workers_compute_times(s_low, r, speeds):
    """Driven like an engine (a blocked pull returns at a later push), each worker's step time is its
    compute time, however long it waited; the threshold stays within [s_low, s_low + r]."""
    coord = DSSPCoordinator(ctx_of("dssp", len(speeds), s_low=s_low, r=r), [torch.zeros(3)])
    ks: list[int] = []
    drive(coord, lambda i, rng: speeds[i], 400,
          on_push=lambda w, t, f: ks.append(f["dssp_k"]) if f and "dssp_k" in f else None)
    assert coord.step == pytest.approx(speeds)
    assert len(ks) > 20 and max(ks) >= 2 and all(0 <= k <= r for k in ks)


def test_dssp_evaluates_only_the_fastest_worker():
    coord = DSSPCoordinator(ctx_of("dssp", 3, s_low=1, r=6), [torch.zeros(1)])
    z = [torch.zeros(1)]
    for t in (0.0, 1.0, 2.0):
        coord.push(0, push(z), t)
        coord.push(1, push(z), t + 0.5)
    # worker 1 is 2 ahead of worker 2 (lead > s_low) but worker 0 is level with it and pushes next:
    facts = coord.push(1, push(z), 3.0)              # worker 1 is now the fastest: evaluated
    assert "dssp_k" in facts
    assert coord.push(0, push(z), 3.2).get("dssp_k") is not None  # level with 1: also a fastest
    coord.push(1, push(z), 4.0)
    assert coord.push(0, push(z), 4.1).get("dssp_k") is not None
    coord.push(0, push(z), 4.2)
    coord.push(0, push(z), 4.25)                     # 0 leads alone now (7 pushes to 1's 5)
    assert coord.push(1, push(z), 4.3).get("dssp_k") is None      # 1 is past s_low but not the fastest


@pytest.mark.parametrize("speeds", [[1.0, 3.0], [1.0, 1.0, 3.0]])
def test_dssp_threshold_does_not_ratchet_under_a_lasting_speed_gap(speeds):
    """Re-evaluations set s_low + k* (at least lead - 1), never k* on top of the lead: under steady
    speeds the threshold stays near s_low + k* instead of climbing to s_low + r (= SSP(s_low + r))."""
    coord = DSSPCoordinator(ctx_of("dssp", len(speeds), s_low=3, r=12), [torch.zeros(3)])
    bounds: list[int] = []
    drive(coord, lambda i, rng: speeds[i], 600, on_push=lambda w, t, f: bounds.append(coord.bound(w)))
    assert coord.evaluations > 10
    assert max(bounds[100:]) <= 3 + 2


def test_dssp_without_two_push_times_uses_s_low():
    coord = DSSPCoordinator(ctx_of("dssp", 2, s_low=0, r=5), [torch.zeros(1)])
    facts = coord.push(0, push([torch.zeros(1)]), 1.0)  # lead 1 > 0, no intervals known yet
    assert facts["dssp_k"] == 0 and coord.bound(0) == 0
    assert not coord.ready(0, 1.0)


@pytest.mark.parametrize("s_low, r, speeds, jitter", [(3, 12, [1.0, 1.0, 3.0], 0.3), (1, 4, [1.0, 2.5, 1.3], 0.8),
                                                       (0, 3, [1.0, 5.0], 0.0), (2, 0, [1.0, 1.0, 4.0], 0.5)])
def test_dssp_threshold_stays_within_range(s_low, r, speeds, jitter):
    coord = DSSPCoordinator(ctx_of("dssp", len(speeds), s_low=s_low, r=r), [torch.zeros(3)])
    leads, thresholds = [], set()

    def check(worker, t, facts):
        for j in range(coord.world):
            assert s_low <= coord.bound(j) <= s_low + r
            thresholds.add(coord.bound(j))
        leads.append(coord.pushes[worker] - min(coord.pushes))

    drive(coord, lambda i, rng: speeds[i] * (1 + rng.uniform(0, jitter)), 600, on_push=check)
    assert max(leads) <= s_low + r + 1              # a pull returned only within the threshold
    if r > 0:
        assert max(thresholds) > s_low              # the threshold did move above s_low
        assert max(leads) > s_low + 1
    assert coord.evaluations > 0


# ----------------------------------------------------------------------------------------- simulated runs
@pytest.mark.parametrize("name, params", [("dssp", {}), ("consgd", {}), ("dynsgd", {}),
                                          ("consgd", {"lambda": 0.5, "s": 2})])
def test_simulated_run_learns_with_speeds_1_1_3(name, params):
    cfg = cfg_of(
        devices={"count": 3, "rates": {"distribution": "constant", "rate": 5000},
                 "compute": {"base_s": 0.01, "per_sample_s": 0.0005, "static": [1, 1, 3]}},
        algorithm={"name": name, "batch": {"policy": "fixed", "size": 32}, "params": params},
        optim={"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0},
        stop={"max_steps": None, "max_time_s": 6.0}, eval={"every_s": 2.0})
    engine, log = simulate(cfg)
    evals = [e for e in log.records if e["kind"] == "eval"]
    assert evals[-1]["loss"] < 0.8 * evals[0]["loss"]
    assert evals[-1]["accuracy"] > 0.5
    ps = engine.ps.summary()
    assert ps["pushes"][0] > ps["pushes"][2]        # the fast workers pushed more than the slow one
    steps = steps_of(log.records)
    assert max(e["staleness"] for e in steps) == ps["staleness_max"] > 0
    assert ps["version"] == sum(ps["pushes"])       # every push was applied (dynsgd: as its delta)
    if name == "dssp":
        assert max(ps["thresholds"]) > 3 and ps["dssp_evaluations"] > 0
        assert max(ps["pushes"]) - min(ps["pushes"]) <= 3 + 12 + 1
