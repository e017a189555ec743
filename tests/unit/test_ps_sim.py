"""The parameter-server family in the simulator: every registered PS algorithm learns, and the PS core
(coordinator rules, the PS node's traffic and network timing, Start(Pull) / Start(Sleep) handles,
coordinator checkpoints, config and engine checks) does what edgestream.sim.ps and
edgestream.sync.coordinator say.

Small runs only: digits, the mlp, 3 devices at speed ratio 1:1:3, explicit compute times (no
calibration, so runs are exactly repeatable), a few virtual seconds.
"""

from __future__ import annotations

import copy
import io
import itertools
from typing import Any

import pytest
import torch
from factories import PS_SIM_BASE as BASE  # the PS simulator tests' config helpers: tests/factories.py
from factories import merge, steps_of
from factories import ps_cfg_of as cfg_of
from factories import simulate_records as simulate

from edgestream.config import ConfigError, validate_dict
from edgestream.sim.costs import NetworkModel
from edgestream.sim.engine import SimEngine
from edgestream.sync import ALGORITHMS
from edgestream.sync.coordinator import Coordinator, ServerContext
from edgestream.sync.local_sgd import adacomm_tau
from edgestream.sync.registry import AlgorithmSpec
from edgestream.sync.requests import Log, Now, Poll, Pull, Pulled, Push, Sleep, Start, Wait
from edgestream.sync.ssp import SSPCoordinator, ssp_blocks

PS_ALGORITHMS = [n for n, s in ALGORITHMS.items() if s.family == "ps"]

#: algorithm params for the learning run (only those the algorithm's schema names are passed): short
#: periods so that a few virtual seconds hold many commits / checks
LEARN_PARAMS: dict[str, dict[str, Any]] = {
    "fixed-adacomm-ps": {"tau": 8},
    "adacomm-ps": {"tau": 8, "check_every": 2},
    "adsp": {"gamma_s": 1.0, "epoch_s": 3.0, "eval_s": 1.0},
}


def dense_bytes(engine: SimEngine) -> int:
    return sum(t.numel() * t.element_size() for t in engine.ps.coord.model())


def learn_params(name: str) -> dict[str, Any]:
    known = {p.name for p in ALGORITHMS[name].schema}
    return {k: v for k, v in LEARN_PARAMS.get(name, {}).items() if k in known}


# ---------------------------------------------------------------- every PS algorithm learns


@pytest.mark.parametrize("name", PS_ALGORITHMS)
def test_every_ps_algorithm_learns_with_heterogeneous_workers(name: str) -> None:
    engine, events = simulate(cfg_of(name, learn_params(name)))
    assert engine.stop_reason == "max_time_s" and engine.finished == 3    # stopped cleanly, nobody stuck
    trained = [e for e in steps_of(events) if "loss" in e]
    k = max(1, len(trained) // 5)
    first = sum(e["loss"] for e in trained[:k]) / k
    last = sum(e["loss"] for e in trained[-k:]) / k
    assert last < 0.6 * first, (name, first, last)
    assert engine.last_accuracy is not None and engine.last_accuracy > 0.5, (name, engine.last_accuracy)
    ps = engine.ps.summary()
    assert all(p > 0 for p in ps["pushes"]) and all(p > 0 for p in ps["pulls"])
    assert {e["device"] for e in trained} == {0, 1, 2}


# ---------------------------------------------------------------- coordinator rules


def _ctx(world: int = 3, **kw: Any) -> ServerContext:
    return ServerContext(world_size=world, **kw)


def _push(coord: Coordinator, worker: int, update: list[torch.Tensor] | None = None, **kw: Any) -> dict:
    update = update if update is not None else [torch.zeros_like(t) for t in coord.model()]
    return coord.push(worker, Push(update, **kw), 0.0)


@pytest.mark.parametrize("s", [0, 2])
def test_ssp_pull_blocks_exactly_when_the_slowest_clock_is_below_c_minus_s(s: int) -> None:
    for clocks in itertools.product(range(5), repeat=3):
        coord = SSPCoordinator(_ctx(params={"s": s}), [torch.zeros(3)])
        for w, c in enumerate(clocks):
            for _ in range(c):
                _push(coord, w)
        assert coord.pushes == list(clocks)
        for w, c in enumerate(clocks):
            blocked = min(clocks) < c - s
            assert ssp_blocks(c, min(clocks), s) == blocked
            assert coord.ready(w, 0.0) == (not blocked), (clocks, w)
        coord.stop()  # stopping releases every pull, whatever the clocks
        assert all(coord.ready(w, 0.0) for w in range(3))


def test_bsp_applies_the_mean_once_when_all_workers_pushed_and_holds_pulls_until_then() -> None:
    w0 = torch.tensor([1.0, 2.0, 3.0])
    coord = ALGORITHMS["bsp"].coordinator(_ctx(momentum=0.5), [w0])
    grads = [torch.tensor([3.0, 0.0, 0.0]), torch.tensor([0.0, 3.0, 0.0]), torch.tensor([0.0, 0.0, 6.0])]
    for w in range(2):
        assert coord.push(w, Push([grads[w]], lr=0.1), 0.0)["staleness"] == 0
        assert coord.version == 0 and torch.equal(coord.model()[0], w0)   # buffered, not applied
        assert not coord.ready(w, 0.0)                                     # waits for the step
    assert coord.ready(2, 0.0)                                             # has not pushed yet
    coord.push(2, Push([grads[2]], lr=0.1), 0.0)
    assert coord.version == 1
    assert torch.allclose(coord.model()[0], w0 - 0.1 * torch.tensor([1.0, 1.0, 2.0]))
    assert all(coord.ready(w, 0.0) for w in range(3))
    # a barrier-waiting worker is released when another votes stop (it may have left already)
    coord.push(0, Push([grads[0]], version=1, lr=0.1), 0.0)
    assert not coord.ready(0, 0.0)
    coord.push(1, Push([grads[1]], version=1, lr=0.1, stop=True), 0.0)
    assert coord.ready(0, 0.0) and coord.ready(1, 0.0) and coord.pull(0, 0.0).stop
    assert coord.version == 1   # the incomplete step is not applied


def test_ps_local_average_is_the_mean_of_the_workers_models_and_adacomm_shrinks_tau() -> None:
    torch.manual_seed(0)
    w = [torch.randn(4, 3), torch.randn(3)]
    # the run's momentum and weight decay must not touch the model average
    ctx = _ctx(params=ALGORITHMS["adacomm-ps"].resolve({"tau": 8, "check_every": 1}), momentum=0.9,
               weight_decay=0.1)
    coord = ALGORITHMS["adacomm-ps"].coordinator(ctx, w)
    taus = []
    for rnd, loss in enumerate([2.0, 0.5, 0.5, 0.4], start=1):
        start = [t.clone() for t in coord.model()]
        locals_ = [[t + torch.randn_like(t) for t in start] for _ in range(3)]
        for i, wi in enumerate(locals_):
            upd = [a - b for a, b in zip(start, wi, strict=True)]
            coord.push(i, Push(upd, version=rnd - 1, loss=loss, commit=True, lr=0.1), 0.0)
            assert coord.ready(i, 0.0) == (i == 2)       # every pull waits for the round's last commit
        assert coord.version == rnd
        for t, parts in zip(coord.model(), zip(*locals_, strict=True), strict=True):
            assert torch.allclose(t, torch.stack(parts).mean(0), atol=1e-5)
        info = coord.pull(0, 0.0).info
        assert info["group_loss"] == pytest.approx(loss) and info["round"] == rnd
        taus.append(info["tau"])
    # F_0 = 2.0 (round 1); then ceil(sqrt(0.25) 8) = 4; 4 again is no reduction: halved to 2; ceil(sqrt(0.2) 8)
    # = 4 is none either: halved to 1 (local_sgd.adacomm_tau)
    assert taus == [8, 4, 2, 1]
    assert taus[1:] == [adacomm_tau(0.5, 2.0, 8, 8), adacomm_tau(0.5, 2.0, 8, 4), adacomm_tau(0.4, 2.0, 8, 2)]


# ---------------------------------------------------------------- the PS node: traffic, staleness, network time


def test_sim_records_pushes_pulls_blocking_and_staleness() -> None:
    engine, events = simulate(cfg_of("ssp", {"s": 1}, stop={"max_time_s": None, "max_steps": 12}))
    dense = dense_bytes(engine)
    steps = steps_of(events)
    assert len(steps) == sum(engine.ps.coord.pushes)
    for e in steps:
        assert e["pushes"] == 1 and e["pulls"] == 1
        assert e["push_bytes"] == dense and e["pull_bytes"] == dense      # no compression: the dense model
        assert e["blocked_s"] >= 0 and e["staleness"] >= 0
    ps = engine.ps.summary()
    for d in range(3):
        mine = steps_of(events, d)
        assert ps["pushes"][d] == ps["pulls"][d] == len(mine)
        assert ps["push_bytes"][d] == len(mine) * dense == ps["pull_bytes"][d]
        assert ps["blocked_s"][d] == pytest.approx(sum(e["blocked_s"] for e in mine), abs=1e-5)
    # 1:1:3 speeds under s = 1: the fast workers wait for the slow one, which never waits
    assert ps["blocked_s"][0] > 0 and ps["blocked_s"][1] > 0 and ps["blocked_s"][2] == 0
    assert ps["staleness_max"] == max(e["staleness"] for e in steps) > 0
    assert ps["staleness_mean"] > 0
    assert ps["blocked_s_total"] == pytest.approx(sum(ps["blocked_s"]), abs=1e-5)


def test_compressed_pushes_cost_their_real_bytes() -> None:
    over = {"stop": {"max_time_s": None, "max_steps": 5}}
    dense_engine, _ = simulate(cfg_of("asp", **over))
    engine, events = simulate(cfg_of("asp", compression={"name": "topk", "ratio": 0.05}, **over))
    dense = dense_bytes(engine)
    steps = steps_of(events)
    assert all(e["compressed"] and e["push_bytes"] == e["bytes_sent"] for e in steps)
    assert all(0 < e["push_bytes"] < 0.2 * dense for e in steps)    # ~5% of values + their indices
    assert all(e["pull_bytes"] == dense for e in steps)             # the model comes back dense
    ps, ps_dense = engine.ps.summary(), dense_engine.ps.summary()
    assert sum(ps["push_bytes"]) / sum(ps["pushes"]) < 0.2 * sum(ps_dense["push_bytes"]) / sum(ps_dense["pushes"])
    assert sum(ps_dense["push_bytes"]) == sum(ps_dense["pushes"]) * dense


@pytest.mark.parametrize("compression", [None, {"name": "topk", "ratio": 0.05}])
def test_a_push_and_a_pull_cost_latency_plus_bytes_over_bandwidth(compression: dict | None) -> None:
    """ASP never blocks a pull, and each device has its own link: a step's comm_s is exactly one push
    and one pull transfer of the network model, latency + bytes / bandwidth each."""
    over: dict[str, Any] = {"devices": {"network": {"latency_ms": 5, "bandwidth_mbps": 8}},
                            "stop": {"max_time_s": None, "max_steps": 4}}
    if compression:
        over["compression"] = compression
    engine, events = simulate(cfg_of("asp", **over))
    net = NetworkModel(0.005, 1e6)
    dense = dense_bytes(engine)
    for e in steps_of(events):
        assert e["blocked_s"] == 0
        assert e["comm_s"] == pytest.approx(net.transfer(e["push_bytes"]) + net.transfer(e["pull_bytes"]), rel=1e-9)
        assert e["pull_bytes"] == dense
    if compression is None:  # 68,904 bytes of mlp each way at 1 MB/s: 2 x (5 ms + 68.9 ms)
        assert steps_of(events)[0]["comm_s"] == pytest.approx(2 * (0.005 + dense / 1e6))


# ---------------------------------------------------------------- Start(Pull()) / Start(Sleep()) in the simulator


def test_start_pull_poll_and_sleep_timers(monkeypatch) -> None:
    seen: dict[int, dict[str, Any]] = {}

    def worker(ctx):
        r: dict[str, Any] = {}
        t0 = yield Now()
        timer = yield Start(Sleep(0.5))
        r["poll_at_0"] = yield Poll(timer)
        yield Sleep(0.2)
        r["poll_at_0.2"] = yield Poll(timer)
        r["wait"] = yield Wait(timer)
        r["waited"] = (yield Now()) - t0
        short = yield Start(Sleep(0.1))
        yield Sleep(0.15)
        r["poll_short_late"] = yield Poll(short)               # done: (True, None), the handle is spent
        t1 = yield Now()
        pull = yield Start(Pull())
        r["poll_pull_at_once"] = yield Poll(pull)
        polls = 0
        while True:
            done, reply = yield Poll(pull)
            if done:
                break
            polls += 1
            yield Sleep(0.001)
        r["pulled"], r["pull_s"], r["polls"] = reply, (yield Now()) - t1, polls
        seen[ctx.rank] = r
        ctx.step += 1
        yield Log(step=0, batch=0, loss=None)

    spec = AlgorithmSpec("test-ps-timers", worker, (), False, "test only: timers and polled pulls", Coordinator)
    monkeypatch.setitem(ALGORITHMS, spec.name, spec)
    cfg = validate_dict(merge(BASE, {"algorithm": {"name": spec.name}, "devices": {"count": 2},
                                     "stop": {"max_time_s": 10.0, "max_steps": 1}}))
    engine, events = simulate(cfg)
    assert sorted(seen) == [0, 1] and engine.finished == 2
    transfer = engine.network.transfer(dense_bytes(engine))
    for r in seen.values():
        assert r["poll_at_0"] == (False, None) and r["poll_at_0.2"] == (False, None)
        assert r["wait"] is None and r["waited"] == pytest.approx(0.5)
        assert r["poll_short_late"] == (True, None)
        assert r["poll_pull_at_once"] == (False, None)                    # the model is still on the wire
        assert isinstance(r["pulled"], Pulled) and r["pulled"].version == 0 and not r["pulled"].stop
        assert all(torch.equal(a, b) for a, b in zip(r["pulled"].params, engine.ps.coord.model(), strict=True))
        assert r["polls"] > 0 and transfer <= r["pull_s"] <= transfer + 0.0011   # polled every 1 ms
    assert [e["pulls"] for e in steps_of(events)] == [1, 1]
    assert engine.ps.summary()["pulls"] == [1, 1]


# ---------------------------------------------------------------- coordinator checkpoints


def _state_equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_state_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_state_equal(x, y) for x, y in zip(a, b, strict=True)))
    return a == b


@pytest.mark.parametrize("name", ["asp", "ssp", "bsp", "fixed-adacomm-ps", "adacomm-ps"])
def test_coordinator_state_round_trips_through_torch_save(name: str) -> None:
    spec = ALGORITHMS[name]
    params = spec.resolve({"tau": 4, "check_every": 1} if name == "adacomm-ps" else {})
    ctx = _ctx(params=params, lr=0.1, momentum=0.5, weight_decay=0.01)
    torch.manual_seed(1)
    model = [torch.randn(4, 3), torch.randn(3)]
    gen = torch.Generator().manual_seed(2)

    def push(coord: Coordinator, worker: int, now: float) -> None:
        upd = [torch.randn(t.shape, generator=gen) for t in model]
        coord.push(worker, Push(upd, version=coord.pulled_version[worker], loss=1.0 + now, lr=0.1,
                                commit=name.endswith("-ps")), now)
        if coord.ready(worker, now):
            coord.pull(worker, now)

    a = spec.coordinator(ctx, model)
    for k, worker in enumerate([0, 1, 2, 0, 1, 2, 0, 1]):   # ends in mid-round for the barrier algorithms
        push(a, worker, float(k))
    saved = io.BytesIO()
    torch.save(a.state_dict(), saved)
    state = torch.load(io.BytesIO(saved.getvalue()), weights_only=True)
    b = spec.coordinator(ctx, [torch.zeros_like(t) for t in model])
    b.load_state_dict(state)
    assert _state_equal(a.state_dict(), b.state_dict())
    assert a.version > 0 and not _state_equal(a.state_dict()["w"], [t for t in model])
    gen_a = copy.deepcopy(gen)
    for k, worker in enumerate([2, 0, 1, 2, 2]):             # both continue identically
        gen.set_state(gen_a.get_state())
        push(a, worker, 10.0 + k)
        gen.set_state(gen_a.get_state())
        push(b, worker, 10.0 + k)
        gen_a = copy.deepcopy(gen)
        assert all(a.ready(w, 10.0 + k) == b.ready(w, 10.0 + k) for w in range(3))
    assert _state_equal(a.state_dict(), b.state_dict())
    assert _state_equal(a.summary(), b.summary())


# ---------------------------------------------------------------- config and engine checks


def test_the_config_rejects_an_unknown_algorithm_naming_the_allowed_ones() -> None:
    with pytest.raises(ConfigError) as err:
        cfg_of("no-such-ps")
    text = str(err.value)
    assert "algorithm.name" in text and "no-such-ps" in text
    listed = set(text.split("built-ins: ", 1)[1].split(";", 1)[0].split(", "))
    assert set(ALGORITHMS) <= listed, (sorted(ALGORITHMS), text)  # every registered name, the PS family too


def test_every_ps_algorithm_is_accepted_by_the_local_engine() -> None:
    """The local engine runs the PS family through the Kafka parameter server (tests/system/test_ps_real.py runs them)."""
    import edgestream.launch  # noqa: F401  (registers "local")
    from edgestream.runner.engines import check_runs

    for name in PS_ALGORITHMS:
        check_runs("local", ALGORITHMS[name])


# ---------------------------------------------------------------- bsp and the ADACOMM baselines end to end


def test_bsp_workers_step_in_lockstep_on_one_version_per_step() -> None:
    engine, events = simulate(cfg_of("bsp", stop={"max_time_s": None, "max_steps": 7}))
    ps = engine.ps.summary()
    assert ps["version"] == 7 and ps["pushes"] == [7, 7, 7] and ps["staleness_max"] == 0
    for d in range(3):
        mine = steps_of(events, d)
        assert [e["step"] for e in mine] == list(range(7))
        # each pull returned its step's model; the last step's stop vote releases the waiting fast
        # workers before the slow worker's push completes that step (base-class stopping)
        assert [e["version"] for e in mine][:6] == list(range(1, 7)) and mine[-1]["version"] in (6, 7)
    assert steps_of(events, 2)[-1]["version"] == 7
    # the slow worker (x3) sets the pace: the fast ones wait for it at every step, it never waits
    assert ps["blocked_s"][2] == 0 and min(ps["blocked_s"][:2]) > 0


@pytest.mark.parametrize("name", ["fixed-adacomm-ps", "adacomm-ps"])
def test_adacomm_ps_commits_every_tau_steps_and_ends_at_max_steps(name: str) -> None:
    params = {"tau": 4} if name == "fixed-adacomm-ps" else {"tau": 4, "check_every": 1}
    engine, events = simulate(cfg_of(name, params, stop={"max_time_s": None, "max_steps": 10}))
    ps = engine.ps.summary()
    dense = dense_bytes(engine)
    assert engine.finished == 3 and all(c.step == 10 for c in engine.contexts)
    rounds = [e for e in steps_of(events) if "round" in e]
    local = [e for e in steps_of(events) if "round" not in e]
    assert len(local) == 30 and all(e["bytes_sent"] == 0 and "pushes" not in e for e in local)
    assert ps["version"] == ps["rounds"] == len(rounds) // 3 and ps["pushes"] == [ps["rounds"]] * 3
    assert ps["push_bytes"] == [ps["rounds"] * dense] * 3 and ps["staleness_max"] == 0
    for r in range(1, ps["rounds"]):   # every worker of a round got the same model version and tau
        same = [e for e in rounds if e["round"] == r]
        assert len(same) == 3 and {e["version"] for e in same} == {r} and len({e["tau"] for e in same}) == 1
    # the last round: the first stop vote releases the waiting fast workers (base-class stopping); the
    # slow worker's commit completes the round
    last = {e["device"]: e["version"] for e in rounds if e["round"] == ps["rounds"]}
    assert last[2] == ps["rounds"] and set(last.values()) <= {ps["rounds"] - 1, ps["rounds"]}
    if name == "fixed-adacomm-ps":   # periods 4, 4, then 2 to end at the budget
        assert ps["rounds"] == 3 and [e["step"] for e in rounds if e["device"] == 0] == [4, 8, 10]
    assert ps["blocked_s"][2] == 0 and min(ps["blocked_s"][:2]) > 0
    for c in engine.contexts:   # the worker's state (complete at each Log) loads back weights_only
        buf = io.BytesIO()
        torch.save(c.state, buf)
        back = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
        assert set(back) == {"tau", "rounds", "version", "period_steps", "loss_sum", "samples", "w_pulled", "codec"}
        assert back["rounds"] == ps["rounds"] and back["period_steps"] == 0 and len(back["w_pulled"]) == len(engine.ps.coord.model())
    # the slow worker's commit completes every round: it always pulls the round's average
    assert all(torch.equal(a, b) for a, b in zip(engine.replicas.get_params(2), engine.ps.coord.model(), strict=True))


@pytest.mark.parametrize("name", ["adsp", "fixed-adacomm-ps"])
def test_compressed_commits_cost_their_real_bytes(name: str) -> None:
    """Commits (accumulated updates) are compressed like gradients: error feedback, then the compressor."""
    over = {"stop": {"max_time_s": 3.0, "max_steps": None}}
    engine, events = simulate(cfg_of(name, {**learn_params(name), "tau": 4} if name != "adsp" else learn_params(name),
                                     compression={"name": "topk", "ratio": 0.05}, **over))
    dense = dense_bytes(engine)
    commits = [e for e in steps_of(events) if e.get("pushes")]
    assert commits and all(e["compressed"] for e in commits)
    assert all(0 < e["push_bytes"] < 0.2 * dense for e in commits)
    assert all(e["pull_bytes"] == dense for e in commits)
