"""The engine-free proof: the lockstep engine (`runner.drive` round robin in one process; no SimPy, no
clock, no Kafka) runs the UNCHANGED sync workers.

Tiny MLP on scikit-learn digits, 3 workers with different stream rates and speeds, a few dozen steps.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import Tensor, nn

from edgestream.models import build_model
from edgestream.runner.lockstep import ArraySource, LockstepEngine
from edgestream.streams import build_batch_policy
from edgestream.sync import ALGORITHMS, Log, WorkerContext

M = 3
RATES = (8.0, 24.0, 60.0)
SPEEDS = (1.0, 2.0, 3.0)
RATE_POLICY = {"policy": "rate", "min": 8, "max": 1024}


def _data() -> tuple[Tensor, Tensor]:
    d = load_digits()
    return torch.tensor(d.data / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8), torch.tensor(d.target)


X, Y = _data()


class SnapshotDriver(LockstepEngine):
    """LockstepEngine that keeps each replica's parameters whenever its worker logs a step."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.snapshots: dict[tuple[str, int], dict[int, list[Tensor]]] = defaultdict(dict)

    def perform(self, rank: int, req: Any) -> Any:
        if isinstance(req, Log):
            key = ("round", req.fields["round"]) if "round" in req.fields else ("step", req.fields["step"])
            self.snapshots[key][rank] = self.params(rank)
        return super().perform(rank, req)


def _driver(model: nn.Module, momentum: float = 0.5, rates: tuple[float, ...] = RATES) -> SnapshotDriver:
    sources = [ArraySource(X[i::M], Y[i::M], rate=r, seed=i) for i, r in enumerate(rates)]
    return SnapshotDriver(model, sources, build_batch_policy(RATE_POLICY), momentum=momentum, speeds=SPEEDS)


def _contexts(name: str, params: dict, lr: float, stop_at: int | list[int | None], **kw: Any) -> list[WorkerContext]:
    """Contexts whose worker asks to stop once `stop_at` steps are completed (per worker with a list)."""
    spec = ALGORITHMS[name]
    ctxs = []
    for i in range(M):
        limit = stop_at[i] if isinstance(stop_at, list) else stop_at
        ctx = WorkerContext(rank=i, world_size=M, seed=7, params=spec.resolve(params), lr=lr,
                            should_stop=lambda completed, n=limit: n is not None and completed >= n, **kw)
        ctxs.append(ctx)
    return ctxs


def _run(name: str, params: dict, lr: float, steps: int, seed: int = 0, **kw: Any) -> SnapshotDriver:
    torch.manual_seed(seed)
    drv = _driver(build_model("mlp", (1, 8, 8), 10))
    drv.run([ALGORITHMS[name].worker(c) for c in _contexts(name, params, lr, steps, **kw)])
    return drv


def _step_losses(drv: LockstepEngine) -> list[float]:
    """Mean loss over workers per step (logs with a loss, in step order)."""
    per: dict[int, list[float]] = defaultdict(list)
    for e in drv.events:
        if "loss" in e:
            per[e["step"]].append(e["loss"])
    return [sum(v) / len(v) for _, v in sorted(per.items())]


CASES = {
    "ddl": ({}, 0.3, {}),
    "ddl+topk": ({"batch": 32}, 0.3, {"compression": {"name": "topk", "ratio": 0.2}}),
    "scadles": ({}, 0.6, {}),
    # the statistic starts near 0.15 and falls below delta = 0.1 mid-run: dense steps, then compressed ones
    "scadles+adaptive-topk": ({}, 0.6, {"compression": {"name": "adaptive-topk", "ratio": 0.3, "delta": 0.1}}),
    "scadles+injection": ({}, 0.6, {"injection": {"alpha": 0.5, "beta": 0.25}}),
    "abs-sgd": ({"ref_batch": 16}, 0.2, {}),
    "dbs-sgd": ({"base_batch": 32, "every": 5}, 0.3, {}),
    "local-sgd": ({"tau": 3}, 0.3, {}),
    "fixed-adacomm": ({"tau": 4}, 0.3, {}),
    "adacomm": ({"tau": 6, "check_every": 2}, 0.3, {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_unchanged_workers_learn_on_the_lockstep_engine(case: str) -> None:
    name = case.split("+")[0]
    params, lr, kw = CASES[case]
    drv = _run(name, params, lr, steps=36, **kw)
    losses = _step_losses(drv)
    assert len(losses) >= 30
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.8 * first, f"{case}: loss {first:.3f} -> {last:.3f}"
    # every sample a worker took was acked (at-least-once: ack after the update) except abs-sgd's last
    # iteration, whose batches were computed but never applied
    if "compression" in kw:
        flags = [e["compressed"] for e in drv.events if "compressed" in e]
        assert any(flags)
        assert all(flags) == (kw["compression"]["name"] != "adaptive-topk")  # adaptive: both kinds of step
        sent = {c: [e["floats_sent"] for e in drv.events if e.get("compressed") is c] for c in (True, False)}
        assert not sent[False] or max(sent[True]) < min(sent[False])
    if name != "abs-sgd":
        assert drv.acked == drv.taken
    else:
        assert all(0 < a < t for a, t in zip(drv.acked, drv.taken, strict=True))


@pytest.mark.parametrize("name", ["ddl", "scadles", "abs-sgd", "dbs-sgd", "local-sgd"])
def test_replicas_identical_after_each_synchronous_step(name: str) -> None:
    params = {"local-sgd": {"tau": 3}, "dbs-sgd": {"every": 3}}.get(name, {})
    kw = {"compression": {"name": "adaptive-topk", "ratio": 0.3, "delta": 0.6}} if name == "scadles" else {}
    drv = _run(name, params, 0.2, steps=9, **kw)
    key_kind = "round" if name == "local-sgd" else "step"
    keys = [k for k in drv.snapshots if k[0] == key_kind]
    assert len(keys) >= 3
    for key in keys:
        snaps = drv.snapshots[key]
        assert sorted(snaps) == list(range(M))
        for rank in range(1, M):
            for a, b in zip(snaps[0], snaps[rank], strict=True):
                assert torch.equal(a, b), f"{name}: replica {rank} differs at {key}"
    if name == "local-sgd":  # between averagings the replicas drift apart
        a, b = drv.snapshots[("step", 0)][0], drv.snapshots[("step", 0)][1]
        assert any(not torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("name", ["ddl", "scadles"])
def test_runs_are_deterministic_for_a_seed(name: str) -> None:
    kw = {"injection": {"alpha": 0.5, "beta": 0.25}} if name == "scadles" else {}
    a, b = _run(name, {}, 0.3, steps=6, **kw), _run(name, {}, 0.3, steps=6, **kw)
    assert [e["loss"] for e in a.events] == [e["loss"] for e in b.events]
    for x, y in zip(a.params(0), b.params(0), strict=True):
        assert torch.equal(x, y)
    c = _run(name, {}, 0.3, steps=6, seed=1, **kw)
    assert [e["loss"] for e in a.events] != [e["loss"] for e in c.events]


def test_scadles_step_is_weighted_gradient_at_scaled_lr() -> None:
    """One ScaDLES step on the driver == w0 - eta * (sum b / B) * grad of the concatenated batch."""
    torch.manual_seed(0)
    model = build_model("mlp", (1, 8, 8), 10)
    w0 = [p.detach().clone() for p in model.parameters()]
    drv = _driver(model, momentum=0.0)
    replay = copy.deepcopy(drv.sources)
    batches = [src.take(int(r)) for src, r in zip(replay, RATES, strict=True)]  # rate policy: b_i = S_i
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    eta, base = 0.2, 16
    eta_t = eta * sum(RATES) / (base * M)
    want = [w - eta_t * p.grad for w, p in zip(w0, model.parameters(), strict=True)]

    ctxs = _contexts("scadles", {"base_batch": base}, eta, stop_at=1)
    drv.run([ALGORITHMS["scadles"].worker(c) for c in ctxs])
    assert [e["batch"] for e in drv.events] == [int(r) for r in RATES]
    assert all(e["lr"] == pytest.approx(eta_t) and e["global_batch"] == sum(RATES) for e in drv.events)
    for rank in range(M):
        for got, exp in zip(drv.params(rank), want, strict=True):
            assert torch.allclose(got, exp, atol=1e-6)


def test_abs_sgd_matches_hand_rolled_delayed_sgd() -> None:
    """Two workers, one reference batch each per iteration (round-robin: the all-reduce is done after one),
    momentum 0: w1 = w0 - eta g(w0; B0); w_{t+1} = w_t - eta DC(g(w_{t-1}; B_t), w_t, w_{t-1})."""
    torch.manual_seed(0)
    model = build_model("mlp", (1, 8, 8), 10)
    ref, lam, eta = 8, 0.5, 0.3
    sources = [ArraySource(X[i::2], Y[i::2], rate=10, seed=i) for i in range(2)]
    replay = copy.deepcopy(sources)
    drv = LockstepEngine(copy.deepcopy(model), sources, momentum=0.0)
    spec = ALGORITHMS["abs-sgd"]
    ctxs = [WorkerContext(rank=i, world_size=2, params=spec.resolve({"ref_batch": ref, "lambda": lam}), lr=eta,
                          should_stop=lambda completed: completed >= 3)
            for i in range(2)]
    drv.run([spec.worker(c) for c in ctxs])
    assert [e["ref_batches"] for e in drv.events] == [1] * 6

    def grad_at(w: list[Tensor]) -> list[Tensor]:
        parts = [src.take(ref) for src in replay]
        with torch.no_grad():
            for p, t in zip(model.parameters(), w, strict=True):
                p.copy_(t)
        model.zero_grad()
        F.cross_entropy(model(torch.cat([p[0] for p in parts])), torch.cat([p[1] for p in parts])).backward()
        return [p.grad.detach().clone() for p in model.parameters()]

    w0 = [p.detach().clone() for p in model.parameters()]
    g0, g1 = grad_at(w0), grad_at(w0)  # iteration 0 and 1 both compute on w0
    w1 = [w - eta * g for w, g in zip(w0, g0, strict=True)]
    g2 = grad_at(w1)
    dc = lambda g, wt, wp: g + lam * g * g * (wt - wp)  # noqa: E731
    w2 = [w - eta * dc(g, a, b) for w, g, a, b in zip(w1, g1, w1, w0, strict=True)]
    w3 = [w - eta * dc(g, a, b) for w, g, a, b in zip(w2, g2, w2, w1, strict=True)]
    for rank in range(2):
        for got, exp in zip(drv.params(rank), w3, strict=True):
            assert torch.allclose(got, exp, atol=1e-6)


def test_one_worker_asking_to_stop_stops_the_group_after_that_step() -> None:
    for name, params in [("ddl", {}), ("local-sgd", {"tau": 2}), ("abs-sgd", {})]:
        torch.manual_seed(0)
        drv = _driver(build_model("mlp", (1, 8, 8), 10))
        ctxs = _contexts(name, params, 0.1, stop_at=[None, 3, None])
        drv.run([ALGORITHMS[name].worker(c) for c in ctxs])  # would deadlock if one worker left early
        assert len({c.step for c in ctxs}) == 1, name
        # local-sgd (tau 2) learns of the stop at its next averaging, after step 4
        assert ctxs[0].step == {"ddl": 3, "local-sgd": 4, "abs-sgd": 3}[name]


def test_scadles_injection_adds_peer_samples_and_counts_them() -> None:
    drv = _run("scadles", {}, 0.1, steps=4, injection={"alpha": 1.0, "beta": 0.5})
    by_step = defaultdict(dict)
    for e in drv.events:
        by_step[e["step"]][e["device"]] = e
    # step 0: own batches only; each worker sends floor(0.5 b_i) samples to both peers
    assert [by_step[0][i]["batch"] for i in range(M)] == [8, 24, 60]
    assert [by_step[0][i]["injected_sent"] for i in range(M)] == [2 * 4, 2 * 12, 2 * 30]
    # step 1: b_i = own S_i + what the two peers injected at step 0 (and it counts in the global batch)
    assert by_step[1][0]["batch"] == 8 + 12 + 30
    assert by_step[1][0]["global_batch"] == sum(by_step[1][i]["batch"] for i in range(M))
    assert drv.acked == drv.taken  # only own stream samples are committed
