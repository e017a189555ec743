"""elastic-bsp(R): the coordinator on hand-driven push times (prediction, ZipLine placement, barriers,
stop, state), then one short simulated run at speed ratio 1:1:3."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch

from edgestream.config import validate_dict
from edgestream.metrics import EventLog
from edgestream.sim.engine import SimEngine
from edgestream.sync import ALGORITHMS
from edgestream.sync.coordinator import ServerContext
from edgestream.sync.elastic_bsp import ElasticBSPCoordinator, predict_matrix, predict_pushes
from edgestream.sync.requests import Push
from edgestream.sync.zipline import zipline_opt_bs

GRAD = [torch.ones(3)]


def make(n: int, r: int = 15, **kw) -> ElasticBSPCoordinator:
    return ElasticBSPCoordinator(ServerContext(world_size=n, params={"R": r}, lr=0.1), [torch.zeros(3)], **kw)


def push(coord: ElasticBSPCoordinator, p: int, t: float, stop: bool = False) -> None:
    coord.push(p, Push([g.clone() for g in GRAD], version=coord.version, lr=0.1, stop=stop), t)


def drive(coord: ElasticBSPCoordinator, intervals, until: float, offsets=None):
    """A discrete-event PS loop as the simulator runs it: worker p pushes every intervals[p] seconds
    after its last pull returned, pulls right after pushing, and waits while `ready` says no. Returns
    the pull log [(worker, time, version, blocked seconds)]."""
    n = len(intervals)
    nxt = [(offsets[p] if offsets else 0.0) + intervals[p] for p in range(n)]
    blocked: set[int] = set()
    pulls: list[tuple[int, float, int, float]] = []
    since = [0.0] * n
    while True:
        p = min((q for q in range(n) if q not in blocked), key=lambda q: (nxt[q], q), default=None)
        assert p is not None, "every worker is blocked: deadlock"
        t = nxt[p]
        if t > until:
            return pulls
        push(coord, p, t)
        for q in sorted(blocked):  # the node re-checks pending pulls after each push
            if coord.ready(q, t):
                reply = coord.pull(q, t)
                pulls.append((q, t, reply.version, t - since[q]))
                blocked.discard(q)
                nxt[q] = t + intervals[q]
        if coord.ready(p, t):
            reply = coord.pull(p, t)
            pulls.append((p, t, reply.version, 0.0))
            nxt[p] = t + intervals[p]
        else:
            blocked.add(p)
            since[p] = t
            nxt[p] = math.inf


def test_prediction_is_linear_extrapolation_of_the_last_two_pushes():
    assert predict_pushes(1.0, 1.5, 4) == [2.0, 2.5, 3.0, 3.5]
    assert predict_pushes(2.0, 2.0, 2)[1] > predict_pushes(2.0, 2.0, 2)[0]  # zero interval floored
    m = predict_matrix([0.0, 1.0], [2.0, 1.5], 3)
    np.testing.assert_allclose(m, [[4.0, 6.0, 8.0], [2.0, 2.5, 3.0]])
    # the coordinator predicts from each worker's latest two pushes (a fast worker has pushed more)
    c = make(2, r=3)
    for p, t in [(0, 1.0), (0, 2.0), (1, 3.0), (0, 3.5)]:
        push(c, p, t)
    assert c.phase == "monitor"  # worker 1 has one push only
    push(c, 1, 6.0)
    np.testing.assert_allclose(c.predicted(), [[5.0, 6.5, 8.0], [9.0, 12.0, 15.0]])


@pytest.mark.parametrize("seed", range(4))
def test_barrier_placement_is_zipline_opt_bs_on_the_predicted_times(seed):
    rng = np.random.default_rng(seed)
    n, r = 6, 15
    iv = rng.uniform(1.0, 1.5, n) * rng.choice([1, 1, 3], n)
    off = rng.uniform(0.01, 0.05, n)
    events = sorted((off[p] + k * iv[p], p) for p in range(n) for k in range(1, 8))
    c = make(n, r)
    seen: dict[int, list[float]] = {p: [] for p in range(n)}
    for t, p in events:
        push(c, p, t)
        seen[p].append(t)
        if c.phase == "barrier":
            break
    assert c.phase == "barrier"
    assert min(len(v) for v in seen.values()) == 2  # placed as soon as every worker pushed twice
    want_m = np.array([[s[-1] + k * (s[-1] - s[-2]) for k in range(1, r + 1)] for s in seen.values()])
    np.testing.assert_allclose(c.predicted(), want_m)
    want = zipline_opt_bs(want_m)
    assert c.t_sync == pytest.approx(want.t_sync) and tuple(c.picks) == want.picks
    assert c.target == [len(seen[p]) + want.picks[p] + 1 for p in range(n)]
    # the barrier is max(Z*): the slowest chosen push, and ZipLine's d_Z* is no worse than BSP's next push
    assert c.t_sync == pytest.approx(max(want_m[p, k] for p, k in enumerate(want.picks)))
    assert c.d_pred <= want_m[:, 0].max() - want_m[:, 0].min() + 1e-12


def test_variant_is_selectable_and_checked():
    for v in ("zipline", "zipline_opt", "full_grid_scan", "grid_scan"):
        assert make(2, variant=v).variant == v
    with pytest.raises(ValueError, match="variant"):
        make(2, variant="nope")
    # from the config: algorithm.params.variant (registry-resolved), checked with the allowed names
    spec = ALGORITHMS["elastic-bsp"]
    ctx = ServerContext(world_size=2, params=spec.resolve({"variant": "grid_scan"}), lr=0.1)
    assert spec.coordinator(ctx, [torch.zeros(3)]).variant == "grid_scan"
    assert spec.coordinator(ServerContext(world_size=2, params=spec.resolve({})), [torch.zeros(3)]).variant \
        == "zipline_opt_bs"
    assert spec.validate({"variant": "fast"}) == [
        "algorithm.params.variant: 'fast' is not allowed; must be one of 'zipline', 'zipline_opt', "
        "'zipline_opt_bs', 'grid_scan', 'full_grid_scan'"]


def test_every_worker_is_released_at_each_barrier_and_waits_as_predicted():
    """Fixed speeds 1:1:3 (and odd ones): predictions are exact, so each barrier's longest wait is
    ZipLine's d_Z*; every barrier releases all blocked workers at one instant with one model version."""
    for intervals in ([1.0, 1.0, 3.0], [0.7, 1.1, 2.3, 0.45]):
        c = make(len(intervals))
        pulls = drive(c, intervals, until=200.0)
        n = len(intervals)
        assert c.barriers >= 5
        assert c.barrier_wait_max_s == pytest.approx(c.predicted_wait_s, abs=1e-6)
        # group the pulls at each barrier: the completing worker's pull and the blocked ones
        released = [x for x in pulls if x[3] > 0]
        assert sum(x[3] for x in pulls) == pytest.approx(c.barrier_wait_s, abs=1e-9)  # pulls wait only there
        times = sorted({x[1] for x in released})
        for t in times:
            at = [x for x in pulls if x[1] == t]
            assert {x[2] for x in at} == {at[0][2]}           # same model version for all
            assert len({x[0] for x in at}) == n                 # every worker pulls at the barrier
        # everyone kept training: no worker starved (its push count near time / interval)
        for p, iv in enumerate(intervals):
            assert c.pushes[p] >= 0.8 * 200.0 / iv
        # a worker is blocked at most once per barrier; 1:1:3 lines up exactly (no wait), the odd speeds do not
        assert len(released) <= c.barriers * (n - 1)
        assert (len(released) > 0) == (intervals != [1.0, 1.0, 3.0])
    # sum of per-worker waits is the barrier total
    assert sum(c.barrier_wait_worker) == pytest.approx(c.barrier_wait_s)


def test_a_worker_slower_than_predicted_reaches_the_barrier_at_t_sync():
    c = make(2, r=5)
    for p, t in [(0, 1.0), (1, 1.5), (1, 2.5), (1, 3.5), (0, 4.0)]:  # worker 0 every 3 s, worker 1 every 1 s
        push(c, p, t)
    assert c.phase == "barrier"
    # rows [7, 10, ...] and [4.5, 5.5, 6.5, 7.5, ...]: d = 0.5 at 7.0 (with 6.5) or 7.5; the earliest wins
    assert (c.t_sync, c.picks, c.target) == (7.0, [0, 2], [3, 6])
    push(c, 1, 5.0)
    push(c, 1, 7.2)            # worker 1 slowed down: its 5th push comes after t_sync, before its target
    assert c.reached == [None, 7.2] and c.count[1] < c.target[1]
    assert not c.ready(1, 7.2) and c.ready(0, 7.2)
    push(c, 0, 7.5)            # worker 0 reaches its chosen push: the barrier completes
    assert c.barriers == 1 and c.phase == "monitor" and c.ready(0, 7.5) and c.ready(1, 7.5)
    assert c.barrier_wait_s == pytest.approx(0.3) and c.barrier_wait_max_s == pytest.approx(0.3)
    assert c.barrier_wait_worker == pytest.approx([0.0, 0.3]) and c.predicted_wait_s == pytest.approx(0.5)


def test_stopping_releases_workers_blocked_at_a_barrier():
    c = make(3)
    for p, t in [(0, 1.0), (1, 1.0), (2, 3.0), (0, 2.0), (1, 2.0), (2, 6.0)]:
        push(c, p, t)
    t = 6.0
    while c.reached[0] is None:
        t += 1.0
        push(c, 0, t)
    assert not c.ready(0, t)
    reached, before = c.reached[0], c.barrier_wait_s
    push(c, 1, t + 0.5, stop=True)
    assert all(c.ready(p, t + 0.5) for p in range(3))
    # the wait the stop cut short counts (once), as the engine's blocked time does
    assert c.barrier_wait_s == pytest.approx(before + (t + 0.5 - reached))
    push(c, 2, t + 0.7)
    assert c.barrier_wait_s == pytest.approx(before + (t + 0.5 - reached))
    assert c.pull(0, t + 0.5).stop
    c2 = make(3)
    for p, tt in [(0, 1.0), (1, 1.0), (2, 3.0), (0, 2.0), (1, 2.0), (2, 6.0), (0, 9.0)]:
        push(c2, p, tt)
    assert not c2.ready(0, 9.0)
    c2.stop()  # the engine's hard limit
    assert all(c2.ready(p, 9.0) for p in range(3))


def test_state_dict_round_trip_mid_barrier():
    a = make(3, r=7)
    drive(a, [1.0, 1.3, 3.1], until=18.5)  # workers 0 and 1 wait at the 2nd barrier
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = make(3, r=7)
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert b.extra_state() == a.extra_state()
    # both continue identically from here: same pushes give the same decisions and model
    rng = np.random.default_rng(0)
    t = 18.5
    assert a.phase == "barrier" and any(x is not None for x in a.reached)
    for _ in range(60):
        t += float(rng.uniform(0.1, 0.5))
        free = [q for q in range(3) if a.ready(q, t)]  # blocked workers do not push
        p = free[int(rng.integers(len(free)))]
        for c in (a, b):
            push(c, p, t)
        assert [a.ready(q, t) for q in range(3)] == [b.ready(q, t) for q in range(3)]
    assert a.barriers >= 1 and a.summary() == b.summary()
    assert torch.equal(a.model()[0], b.model()[0])


def test_registered_with_params():
    spec = ALGORITHMS["elastic-bsp"]
    assert spec.family == "ps" and spec.defaults["R"] == 15
    assert spec.validate({"R": 0}) and not spec.validate({"R": 30})


def test_simulated_run_at_speed_ratio_1_1_3_learns_and_passes_barriers():
    cfg = validate_dict({
        "name": "ebsp", "seed": 1, "data": {"dataset": "digits"}, "model": {"name": "mlp"},
        "devices": {"count": 3, "rates": {"distribution": "constant", "rate": 5000},
                    "compute": {"base_s": 0.01, "per_sample_s": 0.0005, "static": [1, 1, 3], "dynamic": 0.2},
                    "network": {"latency_ms": 1, "bandwidth_mbps": 100}},
        "algorithm": {"name": "elastic-bsp", "params": {"R": 15}},
        "optim": {"lr": 0.05, "momentum": 0.0},
        "stop": {"target_accuracy": None, "max_steps": None, "max_time_s": 4.0},
        "eval": {"every_s": 2.0},
    })
    log = EventLog(None, keep=True)
    engine = SimEngine(cfg, log)
    engine.run()
    log.close()
    assert log.records is not None
    ps = engine.ps.summary()
    steps = [e for e in log.records if e["kind"] == "step" and e.get("loss") is not None]
    evals = [e for e in log.records if e["kind"] == "eval"]
    first = sum(e["loss"] for e in steps[:10]) / 10
    late = sum(e["loss"] for e in steps[-10:]) / 10
    assert late < 0.7 * first, (first, late)
    assert evals[-1]["accuracy"] > 0.5, evals[-1]
    assert ps["barriers"] >= 1 and ps["barrier_wait_s"] > 0
    # the slow worker (static 3) does about a third of the fast ones' steps: no lock-step
    assert ps["pushes"][2] < 0.6 * min(ps["pushes"][:2])
    # the coordinator's barrier waits are exactly the node's blocked pull time (pulls wait only there)
    assert ps["barrier_wait_s"] == pytest.approx(ps["blocked_s_total"], abs=1e-5)


@pytest.mark.parametrize("intervals", [[0.7, 1.1, 2.3], [1.0, 0.45, 0.8, 3.1]])
def test_the_barrier_synchronises_without_averaging(intervals):
    """The reading in docs/ps.md (paper 003: ASP-like within a superstep, a weight synchronisation at the
    barrier): every push is applied on arrival, W -= lr g_p, and a barrier only holds the replies, so
    every worker leaves it with the same W, which is W0 minus the sum of every gradient applied so far
    (averaging the superstep's gradients instead would give a different W)."""
    n = len(intervals)
    c = make(n)
    grads = {p: [torch.full((3,), float(p + 1))] for p in range(n)}
    applied = torch.zeros(3)
    nxt, blocked, released = list(intervals), set(), 0
    while min(nxt) < 60.0:
        p = min((q for q in range(n) if q not in blocked), key=lambda q: (nxt[q], q))
        t = nxt[p]
        c.push(p, Push([g.clone() for g in grads[p]], version=c.version, lr=0.1), t)
        applied -= 0.1 * grads[p][0]
        assert torch.allclose(c.model()[0], applied, atol=1e-5)       # applied on arrival
        waiting = sorted(blocked | {p})
        ready = [q for q in waiting if c.ready(q, t)]
        replies = {q: c.pull(q, t) for q in ready}
        if len(replies) > 1:                                          # a barrier released them together
            released += 1
            first = next(iter(replies.values()))
            for r in replies.values():
                assert r.version == first.version and torch.equal(r.params[0], first.params[0])
                assert torch.allclose(r.params[0], applied, atol=1e-5)
        for q in ready:
            blocked.discard(q)
            nxt[q] = t + intervals[q]
        if p not in ready:
            blocked.add(p)
            nxt[p] = math.inf
    assert released >= 3 and c.barriers >= 3
