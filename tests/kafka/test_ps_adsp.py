"""adsp (paper 000): the reward fit, the commit-rate search (Alg. 1), the coordinator's checkpoints and
a short simulated run with heterogeneous workers (1:1:3)."""

from __future__ import annotations

import io
import math

import pytest
import torch

from edgestream.config import validate_dict
from edgestream.metrics import EventLog
from edgestream.sim.engine import SimEngine
from edgestream.sync import ALGORITHMS
from edgestream.sync.adsp import ADSPCoordinator, next_commit_at
from edgestream.sync.adsp_search import CommitRateSearch, fit_loss_curve, reward, smooth, window_reward
from edgestream.sync.coordinator import ServerContext
from edgestream.sync.requests import Push

# ---------------------------------------------------------------- the reward


@pytest.mark.parametrize("a,b,c,t0,width", [(0.3, 2.0, 0.1, 0.0, 60.0), (1.0, 1.0, 0.05, 1000.0, 60.0),
                                            (0.05, 0.5, 0.3, 10.0, 5.0), (2.0, 0.1, 0.0, 100.0, 60.0),
                                            (0.7, 3.0, 1.2, 40.0, 2.0)])
def test_reward_is_the_inverse_time_to_the_target_loss(a, b, c, t0, width):
    ts = [t0 + width * k / 8 for k in range(9)]
    ls = [1 / (a * a * t + b) + c for t in ts]
    a1sq, a2, a3 = fit_loss_curve(ts, ls)
    assert a1sq == pytest.approx(a * a, rel=1e-6) and a3 == pytest.approx(c, abs=1e-7)
    for frac in (0.5, 0.9, 0.99):  # l* below, near and just below the last sample
        target = c + frac * (ls[-1] - c)
        t_star = (1 / (target - c) - b) / (a * a)
        assert reward(ts, ls, target) == pytest.approx(1 / t_star, rel=1e-6)


def test_reward_edge_cases():
    ts = [1.0, 2.0, 3.0, 4.0]
    ls = [1 / (t + 1) + 0.2 for t in ts]
    assert reward(ts, ls, 0.15) == 0.0                # below the asymptote: never reached
    assert reward(ts[:2], ls[:2], 0.3) == -math.inf   # too few samples: no evidence
    assert reward(ts, [1.0, 1.1, 1.2, 1.3], 0.5) == 0.0  # a rising loss never gets there
    # noisy samples still give a finite, deterministic reward
    g = torch.Generator().manual_seed(0)
    noisy = [x + 0.01 * float(torch.randn(1, generator=g)) for x in ls * 3]
    r1, r2 = reward(ts * 3, noisy, 0.3), reward(ts * 3, noisy, 0.3)
    assert r1 == r2 and math.isfinite(r1)


# ---------------------------------------------------------------- the search (Alg. 1)


def test_search_keeps_increasing_while_the_reward_improves():
    s = CommitRateSearch()
    assert s.start() == 1
    assert s.window_done(1.0) == 2      # evaluated C, now C + 1
    assert s.window_done(2.0) == 3      # better: stand on 2, try 3
    assert s.window_done(3.0) == 4
    assert s.searching
    assert s.window_done(2.5) == 3      # worse: settle on 3 for the epoch
    assert not s.searching
    assert s.window_done(100.0) == 3    # settled: no more evaluation
    assert s.trace == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 2.5)]


def test_search_stops_at_once_when_the_next_rate_is_not_better():
    s = CommitRateSearch()
    s.start()
    assert s.window_done(1.0) == 2
    assert s.window_done(1.0) == 1 and not s.searching  # a tie is no improvement
    assert s.start() == 1 and s.searching               # the next epoch searches again


# ---------------------------------------------------------------- the coordinator


def _coord(**params) -> ADSPCoordinator:
    spec = ALGORITHMS["adsp"]
    ctx = ServerContext(world_size=3, params=spec.resolve(params), lr=0.1)
    return spec.coordinator(ctx, [torch.zeros(4)])


def _commit(coord: ADSPCoordinator, worker: int, now: float, trace: list[tuple[float, float]]) -> None:
    """A commit arriving at `now` whose loss trace holds (time, loss) samples."""
    coord.push(worker, Push([torch.zeros(4)], commit=True, loss=trace[-1][1],
                            losses=[(now - t, x) for t, x in trace]), now)


def _curve(a_sq: float):
    return lambda t: 1 / (a_sq * t + 1.0)  # b = 1, c = 0: with l* = 0.1 the reward is a_sq / 9


def test_coordinator_searches_the_commit_rate_and_sets_targets_at_checkpoints():
    coord = _coord(gamma_s=1.0, eval_s=1.0, epoch_s=8.0, target_loss=0.1)
    assert coord.pull(0, 0.0).info["c_target"] == 1
    # windows [0,1) [1,2) [2,3) [3,4): curves with a_sq 1, 2, 3, 2.5 -> D 1 -> 2 -> 3 -> 4 -> settle on 3
    for k, a_sq in enumerate([1.0, 2.0, 3.0, 2.5]):
        f = _curve(a_sq)
        for w in range(3):
            _commit(coord, w, k + 0.9, [(k + 0.1 * j + 0.01 * w, f(k + 0.1 * j + 0.01 * w)) for j in range(1, 9)])
        coord.timer(k + 1.0)
        cp_time, counts, target, d = coord.checkpoints[-1]
        assert cp_time == k + 1.0 and counts == [k + 1] * 3
        assert d == [2, 3, 4, 3][k] and target == max(counts) + d
    assert [d for d, _ in coord.search.trace] == [1, 2, 3, 4]
    # 1/t* = a_sq / 9 (smoothed points: to 1e-3); the fourth window's curve reaches l* at t* = 3.6, before
    # the window ends at 4: its reward is bounded by 1 / 4 (9 / 4 = 2.25), not 2.5 / 9
    assert [r * 9 for _, r in coord.search.trace] == pytest.approx([1.0, 2.0, 3.0, 2.25], rel=1e-3)
    info = coord.pull(1, 4.25).info
    assert info["c_target"] == 7 and info["d"] == 3 and info["period_left"] == pytest.approx(0.75)
    # settled until the epoch ends: then C_target = max_i c_i + 1 (worker 2 is one commit ahead)
    for k in range(4, 8):
        for w in (0, 1, 2):
            _commit(coord, w, k + 0.5, [(k + 0.4, 0.1)])
        if k == 7:
            _commit(coord, 2, k + 0.7, [(k + 0.6, 0.1)])
        coord.timer(k + 1.0)
    assert coord.checkpoints[-2][3] == 3 and coord.searches == 2
    assert coord.checkpoints[-1][1] == [8, 8, 9] and coord.c_target == 10 and coord.d == 1


def test_a_window_fits_only_its_own_loss_samples():
    """The first commit after a checkpoint carries losses trained before it (under the previous D):
    they stay out of the new window's fit and the new period's loss."""
    coord = _coord(gamma_s=1.0, eval_s=1.0, epoch_s=100.0, target_loss=0.1)
    coord.timer(1.0)
    assert coord.window_start == 1.0
    _commit(coord, 0, 1.2, [(0.6, 2.0), (0.8, 2.0), (1.0, 1.0), (1.1, 1.0), (1.2, 1.0)])
    assert sorted(round(t, 6) for t, _ in coord.samples) == [1.0, 1.1, 1.2]
    assert coord.period_loss == [3.0, 3]


def test_a_thirty_percent_loss_rise_restarts_the_search():
    coord = _coord(gamma_s=1.0, eval_s=1.0, epoch_s=100.0, target_loss=0.1)
    coord.search.searching, coord.search.base, coord.search.d, coord.d = False, 3, 3, 3
    for k, loss in enumerate([1.0, 1.25, 1.0, 1.3]):  # +25 %: no; +30 %: re-search
        for w in range(3):
            _commit(coord, w, k + 0.5, [(k + 0.4, loss)])
        coord.timer(k + 1.0)
        assert coord.searches == (1 if k < 3 else 2)
    assert coord.researches == 1 and coord.d == 1 and coord.search.searching
    assert coord.c_target == 4 + 1 and coord.epoch_start == 4.0


def test_late_timer_and_state_round_trip():
    coord = _coord(gamma_s=2.0, eval_s=2.0, target_loss=0.1)
    _commit(coord, 0, 1.0, [(0.5, 1.0)])
    _commit(coord, 1, 5.0, [(4.5, 0.9)])  # arrives after two checkpoints nobody fired: they run first
    assert [cp[0] for cp in coord.checkpoints] == [2.0, 4.0]
    assert coord.checkpoints[0][1] == [1, 0, 0] and coord.checkpoints[1][1] == [1, 0, 0]
    buf = io.BytesIO()
    torch.save(coord.state_dict(), buf)
    buf.seek(0)
    other = _coord(gamma_s=2.0, eval_s=2.0, target_loss=0.1)
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert other.extra_state() == coord.extra_state() and other.pushes == coord.pushes


def test_the_commit_timer_is_the_papers_on_schedule():
    # on schedule (commit j of D ended at k G + (j - 1/2) G / D), the next starts G / D - O later
    gamma, d, o = 60.0, 4, 0.5
    for j in range(1, d):
        now = (j - 0.5) * gamma / d
        at = next_commit_at(now, gamma, c_target=d, commits=j, d=d, gamma=gamma, overhead=o)
        assert at == pytest.approx(now + gamma / d - o)
    # target met: the first commit of the next period, half a slot into it
    assert next_commit_at(55.0, 60.0, 4, 4, 4, 60.0, 0.5) == pytest.approx(60.0 + 7.5 - 0.5)
    # behind: the commits still due are squeezed into what is left
    assert next_commit_at(50.0, 60.0, 6, 4, 4, 60.0, 0.0) == pytest.approx(50.0 + 10.0 / 2.5)


# ---------------------------------------------------------------- a simulated run


def test_simulated_run_learns_and_keeps_commit_counts_within_one():
    cfg = validate_dict({
        "name": "adsp", "seed": 2, "data": {"dataset": "digits"}, "model": {"name": "mlp"},
        "devices": {"count": 3, "rates": {"distribution": "constant", "rate": 5000},
                    "compute": {"base_s": 0.044, "per_sample_s": 0.0005, "static": [1, 1, 3]},
                    "network": {"latency_ms": 1, "bandwidth_mbps": 100}},
        "algorithm": {"name": "adsp", "params": {"gamma_s": 2.0, "epoch_s": 10.0, "eval_s": 2.0},
                      "batch": {"policy": "fixed", "size": 32}},
        "optim": {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0},
        "stop": {"max_time_s": 16.0, "target_accuracy": None}, "eval": {"every_s": 4.0}})
    log = EventLog(None, keep=True)
    engine = SimEngine(cfg, log)
    engine.run()
    evals = [e for e in log.records if e["kind"] == "eval"]
    assert evals[-1]["accuracy"] > 0.5 and evals[-1]["loss"] < 0.5 * evals[0]["loss"]
    coord = engine.ps.coord
    assert len(coord.checkpoints) >= 7
    for _, counts, _, _ in coord.checkpoints:       # the invariant at every checkpoint
        assert max(counts) - min(counts) <= 1, coord.checkpoints
    assert coord.checkpoints[-1][1][0] >= 7           # the commits did happen
    assert coord.searches >= 2 and len(coord.rewards) >= 2  # the search ran (and restarted at 10 s)
    summary = engine.ps.summary()
    assert summary["blocked_s_total"] == 0.0          # nobody ever waited at the PS
    steps = [e for e in log.records if e["kind"] == "step"]
    per_commit = {d: [e["local_steps"] for e in steps if e["device"] == d and e.get("commit")] for d in range(3)}
    fast, slow = sum(per_commit[0]) / len(per_commit[0]), sum(per_commit[2]) / len(per_commit[2])
    assert fast > 2 * slow                             # fast workers do more local steps per commit
    assert abs(len(per_commit[0]) - len(per_commit[2])) <= 1


# ---------------------------------------------------------------- the reward of a window (issue 20.4)
def _known_best_search(seed: int, noise: float, scale: float) -> int:
    """The coordinator's search over windows of a loss curve whose best commit rate is known: the loss
    follows l = 1/(1/(l0 - 0.1) + k(D) t) + 0.1 continued from window to window, k(D) peaks at D = 3; each
    window gives 60 mini-batch losses at random times with multiplicative noise. Returns the D settled on."""
    import random

    k_of = {1: 1.0, 2: 1.6, 3: 2.0, 4: 1.5, 5: 1.0, 6: 0.8, 7: 0.6, 8: 0.5}
    rng = random.Random(seed)
    coord = _coord(gamma_s=60.0, eval_s=60.0, epoch_s=1e6, target_loss=0.3)
    inv, t0 = 1 / (2.3 - 0.1), 0.0
    while coord.search.searching and t0 < 600:
        k = 1e-3 * scale * k_of[coord.d]
        ts = sorted(t0 + 60 * rng.random() for _ in range(60))
        coord.samples = [[t, (1 / (inv + k * (t - t0)) + 0.1) * math.exp(rng.gauss(0, noise))] for t in ts]
        coord._window_done(t0 + 60)
        inv, t0 = inv + k * 60, t0 + 60
    return coord.d


@pytest.mark.parametrize(("noise", "scale", "at_least"), [(0.05, 3.0, 26), (0.05, 1.0, 22), (0.15, 6.0, 15)])
def test_the_search_finds_the_known_best_commit_rate(noise: float, scale: float, at_least: int) -> None:
    picked = [_known_best_search(seed, noise, scale) for seed in range(30)]
    assert sum(d == 3 for d in picked) >= at_least, picked
    assert all(1 <= d <= 5 for d in picked), picked


@pytest.mark.parametrize("points", [3, 5, 8])
def test_smooth_gives_equal_time_bin_means(points: int) -> None:
    ts = [float(x) for x in range(40)]
    ls = [2.0 + (x % 2) for x in range(40)]                # alternating 2, 3: every bin's mean is 2.5
    t, l = smooth(ts, ls, points)
    assert len(t) == points and l == pytest.approx([2.5] * points, abs=0.11)
    assert t == sorted(t) and t[0] < 40 / points and t[-1] > 39 - 40 / points
    assert smooth([], [], points) == ([], [])
    assert smooth([5.0, 5.0], [1.0, 3.0], points) == ([5.0], [2.0])


@pytest.mark.parametrize("t_end", [10.0, 60.0, 300.0])
def test_window_reward_is_bounded_once_the_curve_passed_the_target(t_end: float) -> None:
    ts = [t_end * j / 20 for j in range(20)]
    below = [0.2 / (1 + 0.01 * t) for t in ts]              # already below l* = 0.3 everywhere
    assert window_reward(ts, below, 0.3, t_end) == pytest.approx(1 / t_end)
    falling = [1 / (0.5 + 0.001 * t) for t in ts]            # far above l*: 1/t* < 1/t_end
    r = window_reward(ts, falling, 0.3, t_end)
    assert 0 < r < 1 / t_end and r == pytest.approx(0.001 / (1 / 0.3 - 0.5), rel=0.02)
    assert window_reward(ts[:2], falling[:2], 0.3, t_end) == -math.inf
    assert window_reward(ts, [1.0 + 0.001 * t for t in ts], 0.3, t_end) == 0.0   # rising: never


# ---------------------------------------------------------------- time scales from the workload (issue 17.4)
@pytest.mark.parametrize(("params", "step_s", "expected"), [
    ({}, 0.1, (1.5, 30.0, 1.5, True)),                                         # 15 steps; 1 : 20 : 1
    ({}, 2.0, (30.0, 600.0, 30.0, True)),
    ({"gamma_s": 4.0}, 0.1, (4.0, 80.0, 4.0, False)),                           # explicit Gamma: ratios kept
    ({"gamma_s": 4.0, "epoch_s": 10.0, "eval_s": 8.0}, 0.1, (4.0, 10.0, 8.0, False)),
    ({"eval_s": 3.0}, 0.1, (1.5, 30.0, 3.0, True)),
    ({}, None, (60.0, 1200.0, 60.0, False)),                                    # nothing known: the paper's
])
def test_time_scales_follow_the_step_time_unless_given(params, step_s, expected):
    from edgestream.sync.adsp import time_scales

    got = time_scales({"gamma_s": None, "epoch_s": None, "eval_s": None, **params}, step_s)
    assert got[:3] == pytest.approx(expected[:3]) and got[3] is expected[3]


@pytest.mark.parametrize(("base_s", "per_sample_s", "static", "batch"), [
    (0.01, 0.0005, [1, 1, 3], 32), (0.2, 0.001, [2, 1], 16), (0.004, 0.0001, [1, 1, 1, 5], 64)])
def test_the_simulator_derives_adsps_period_from_its_compute_model(base_s, per_sample_s, static, batch):
    cfg = validate_dict({
        "name": "adsp", "seed": 1, "data": {"dataset": "digits"}, "model": {"name": "mlp"},
        "devices": {"count": len(static), "rates": {"distribution": "constant", "rate": 5000},
                    "compute": {"base_s": base_s, "per_sample_s": per_sample_s, "static": static}},
        "algorithm": {"name": "adsp", "batch": {"policy": "fixed", "size": batch}},
        "optim": {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0}, "stop": {"max_steps": 4}})
    engine = SimEngine(cfg, EventLog(None, keep=True))
    coord = engine.ps.coord
    slowest = (base_s + per_sample_s * batch) * max(static)
    assert coord.gamma_s == pytest.approx(15 * slowest) and coord.epoch_s == pytest.approx(300 * slowest)
    assert coord.window_periods == 1 and coord.scales_derived
    engine.run()
    assert engine.ps.summary()["adsp"]["time_scales"] == "derived from the step time"


def test_the_kafka_ps_derives_adsps_period_from_a_profile_or_by_timing_the_model(bootstrap, tmp_path):
    import yaml

    from edgestream.ps.server import ParameterServer
    from edgestream.runner.plan import RunPlan

    prof = tmp_path / "dev.yaml"
    prof.write_text(yaml.safe_dump({"device": "d", "source": "a test", "models": {"m": {"seconds": {8: 0.05, 32: 0.11}}}}))
    raw = {"name": "adspk", "devices": {"count": 2, "compute": {"profile": str(prof), "static": [1, 2], "dynamic": 0.2}},
           "data": {"dataset": "synthetic", "shape": [1, 6, 6], "num_classes": 5, "n_train": 20, "n_test": 10},
           "model": {"name": "mlp"}, "algorithm": {"name": "adsp", "batch": {"policy": "fixed", "size": 20}}}
    server = ParameterServer(RunPlan.resolve(validate_dict(raw)), "adspk-1", bootstrap, tmp_path / "a", evaluate=False)
    assert server.coord.gamma_s == pytest.approx(15 * 0.08 * 2 * 1.1)       # t(20) = 0.08 on the profile
    before = [p.detach().clone() for p in server.model.parameters()]
    raw["devices"]["compute"] = {"base_s": 0.05, "per_sample_s": 0.001, "static": [1, 2]}  # the simulator's only
    server = ParameterServer(RunPlan.resolve(validate_dict(raw)), "adspk-2", bootstrap, tmp_path / "b", evaluate=False)
    assert server.coord.scales_derived and server.coord.gamma_s == pytest.approx(0.5)  # timed mlp: the 0.5 s floor
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, server.model.parameters(), strict=True))
    raw["algorithm"]["name"] = "ssp"                                          # a coordinator without step times
    plan = RunPlan.resolve(validate_dict(raw))
    from edgestream.ps.server import expected_step_s

    assert expected_step_s(plan, plan.build_model()) is None


def test_a_restored_coordinator_keeps_its_time_scales():
    spec = ALGORITHMS["adsp"]
    ctx = ServerContext(world_size=3, params=spec.resolve({}), lr=0.1, step_s=0.2)
    coord = spec.coordinator(ctx, [torch.zeros(4)])
    assert coord.gamma_s == pytest.approx(3.0) and coord.epoch_s == pytest.approx(60.0)
    state = coord.state_dict()
    other = spec.coordinator(ServerContext(world_size=3, params=spec.resolve({}), lr=0.1, step_s=0.05),
                             [torch.zeros(4)])
    assert other.gamma_s == pytest.approx(0.75)
    other.load_state_dict(state)
    assert (other.gamma_s, other.epoch_s, other.window_periods) == (coord.gamma_s, coord.epoch_s, 1)
    old = {**state, "extra": {k: v for k, v in state["extra"].items()
                              if k not in ("gamma_s", "epoch_s", "window_periods")}}
    other.load_state_dict(old)                                  # saved before the scales were kept: the old 60 s
    assert (other.gamma_s, other.epoch_s, other.window_periods) == (60.0, 1200.0, 1)
