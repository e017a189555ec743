"""Pure rules of the sync algorithms, checked on hand-made inputs (no engine)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from edgestream.sync import (
    ALGORITHMS,
    AllReduce,
    Sleep,
    Start,
    TakeBatch,
    WorkerContext,
    adacomm_tau,
    delay_compensate,
    get_algorithm,
    reassign_batches,
    scaled_lr,
)

SYNC_DIR = Path(__file__).resolve().parents[2] / "edgestream" / "sync"


# ---------------------------------------------------------------- ScaDLES linear LR scaling


def test_scaled_lr_is_eta_times_global_batch_over_base() -> None:
    # M = 4, B = 64 * 4 = 256; sum b = 8 + 20 + 40 + 70 = 138
    assert scaled_lr(0.1, 138, 256) == pytest.approx(0.1 * 138 / 256)
    assert scaled_lr(0.1, 256, 256) == pytest.approx(0.1)
    assert scaled_lr(0.2, 512, 256) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        scaled_lr(0.1, 10, 0)


# ---------------------------------------------------------------- ABS-SGD delay compensation


def test_delay_compensation_is_zero_when_weights_did_not_move() -> None:
    g = [torch.tensor([0.5, -2.0, 3.0]), torch.tensor([[1.0, 2.0]])]
    w = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([[4.0, 5.0]])]
    out = delay_compensate(g, w, [t.clone() for t in w], lam=0.5)
    for a, b in zip(out, g, strict=True):
        assert torch.equal(a, b)


def test_delay_compensation_matches_hand_computation() -> None:
    g = [torch.tensor([0.5, -2.0, 3.0])]
    w_t = [torch.tensor([1.0, 1.0, 1.0])]
    w_prev = [torch.tensor([0.0, 2.0, 1.5])]
    # g + 0.5 * g^2 * (w_t - w_prev) = [0.5 + 0.5*0.25*1, -2 + 0.5*4*(-1), 3 + 0.5*9*(-0.5)]
    expected = torch.tensor([0.625, -4.0, 0.75])
    (out,) = delay_compensate(g, w_t, w_prev, lam=0.5)
    assert torch.allclose(out, expected)
    (plain,) = delay_compensate(g, w_t, w_prev, lam=0.0)
    assert torch.equal(plain, g[0])


# ---------------------------------------------------------------- AdaComm tau rule


def test_adacomm_tau_follows_sqrt_of_loss_ratio() -> None:
    # ceil(sqrt(0.25) * 40) = 20 < 40
    assert adacomm_tau(0.5, 2.0, 40, 40) == 20
    # ceil(sqrt(0.1) * 40) = ceil(12.649) = 13
    assert adacomm_tau(0.2, 2.0, 40, 20) == 13
    # F_0 = 0 counts as ratio 0: tau 1
    assert adacomm_tau(1.0, 0.0, 40, 40) == 1


def test_adacomm_tau_halves_when_the_rule_does_not_reduce_it() -> None:
    # ceil(sqrt(0.25) * 40) = 20, not below the current 16: halve to 8
    assert adacomm_tau(0.5, 2.0, 40, 16) == 8
    # loss went up: ceil(sqrt(2) * 40) = 57 >= 40: halve
    assert adacomm_tau(4.0, 2.0, 40, 40) == 20
    # never below 1
    assert adacomm_tau(2.0, 2.0, 40, 1) == 1
    with pytest.raises(ValueError):
        adacomm_tau(1.0, 1.0, 0, 4)


# ---------------------------------------------------------------- DBS batch re-assignment


def test_reassign_batches_is_proportional_to_speed_with_constant_total() -> None:
    assert reassign_batches([1, 2, 3, 4], 100) == [10, 20, 30, 40]
    assert reassign_batches([1, 1, 1], 64) == [22, 21, 21]  # remainder by largest fraction, ties: lower rank
    assert reassign_batches([1, 2], 10) == [3, 7]  # 3.33 -> 3, 6.67 -> 7
    assert reassign_batches([0, 0], 9) == [5, 4]  # no measurement: equal shares


def test_reassign_batches_respects_min_batch() -> None:
    b = reassign_batches([1, 1000, 1000], 60, min_batch=8)
    assert b[0] == 8 and sum(b) == 60 and min(b) >= 8
    assert reassign_batches([0, 5], 20, min_batch=4) == [4, 16]
    with pytest.raises(ValueError):
        reassign_batches([1, 1, 1], 5, min_batch=2)


@pytest.mark.parametrize("speeds,total,lo", [([3.7, 0.2, 9.1, 4.4, 1.0], 257, 1), ([1e-9, 5, 5], 30, 3),
                                            ([2.5] * 7, 7, 1), ([float("nan"), 1.0], 11, 2)])
def test_reassign_batches_invariants(speeds: list[float], total: int, lo: int) -> None:
    b = reassign_batches(speeds, total, lo)
    assert sum(b) == total and min(b) >= lo and len(b) == len(speeds)


# ---------------------------------------------------------------- params, registry, requests


def test_registry_holds_the_synchronous_family_with_defaults() -> None:
    collective = {n for n, s in ALGORITHMS.items() if s.family == "collective"}
    assert collective == {"ddl", "scadles", "abs-sgd", "dbs-sgd", "local-sgd", "fixed-adacomm", "adacomm"}
    assert get_algorithm("abs-sgd").defaults == {"ref_batch": 32, "lambda": 0.5}
    assert get_algorithm("fixed-adacomm").defaults["tau"] == 40
    assert get_algorithm("scadles").resolve({}) == {"base_batch": 64, "epoch_steps": 0}
    with pytest.raises(ValueError, match="is not a built-in algorithm or an installed plugin; built-ins: ddl"):
        get_algorithm("nope")


def test_validate_names_the_field() -> None:
    problems = get_algorithm("local-sgd").validate({"tau": 0, "bogus": 1})
    assert "algorithm.params.tau: 0 is not allowed; must be >= 1" in problems
    assert any(p.startswith("algorithm.params.bogus: unknown field") for p in problems)
    assert get_algorithm("abs-sgd").validate({"lambda": "x"}) == [
        "algorithm.params.lambda: 'x' is not allowed; must be a number"]
    assert get_algorithm("ddl").validate({"batch": 2.5}) == [
        "algorithm.params.batch: 2.5 is not allowed; must be a whole number"]
    assert get_algorithm("ddl").validate({"batch": None}) == []
    with pytest.raises(ValueError, match="tau"):
        get_algorithm("adacomm").resolve({"tau": -1})
    assert get_algorithm("adacomm").resolve({"tau": 6.0})["tau"] == 6


def test_requests_reject_misuse() -> None:
    with pytest.raises(ValueError):
        AllReduce([torch.zeros(1)], weight=2.0, op="sum")
    with pytest.raises(ValueError):
        AllReduce([torch.zeros(1)], op="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        TakeBatch(0)
    for bad in (-0.5, float("nan"), float("inf")):  # timers and sleeps: checked once, for every engine
        with pytest.raises(ValueError, match="Sleep: seconds must be finite"):
            Sleep(bad)
    with pytest.raises(TypeError):
        Start(TakeBatch())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        WorkerContext(rank=3, world_size=3)


def test_context_lr_schedule_counts_steps() -> None:
    ctx = WorkerContext(rank=0, world_size=2, lr=0.1, milestones=(2, 4), gamma=0.5)
    assert ctx.lr_now() == pytest.approx(0.1)
    ctx.step = 2
    assert ctx.lr_now() == pytest.approx(0.05)
    ctx.step = 5
    assert ctx.lr_now() == pytest.approx(0.025)
    assert ctx.names(2) == ["0", "1"]


FORBIDDEN = ("confluent_kafka", "simpy", "torch.distributed", "edgestream.sim", "edgestream.kafka",
             "edgestream.trainer", "edgestream.consumers", "edgestream.producers", "time", "datetime", "socket")


@pytest.mark.parametrize("path", sorted(SYNC_DIR.glob("*.py")), ids=lambda p: p.name)
def test_sync_is_engine_free(path: Path) -> None:
    """No module of edgestream.sync imports an engine, Kafka, or a clock."""
    tree = ast.parse(path.read_text())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    bad = [n for n in names if any(n == f or n.startswith(f + ".") for f in FORBIDDEN)]
    assert not bad, f"{path.name} imports {bad}"
    assert names, "no imports found: the scan is broken"
