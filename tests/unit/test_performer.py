"""The performer contract (edgestream.runner.performer): one `do_<kind>` method per request kind, dispatched once,
what an engine performs derived from what its class implements."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from edgestream.runner.performer import Performer, method_name
from edgestream.sync.requests import PS_REQUESTS, REQUESTS, Ack, Compute, Log, Now, Pull, TakeBatch

PACKAGE = Path(__file__).resolve().parents[2] / "edgestream"


def test_every_request_kind_has_its_own_method_name() -> None:
    names = {k: method_name(k) for k in REQUESTS}
    assert len(set(names.values())) == len(REQUESTS)
    assert names[TakeBatch] == "do_take_batch" and names[Ack] == "do_ack"
    assert all(n.startswith("do_") and n == n.lower() for n in names.values())


class _Counter(Performer):
    """A user's engine: takes batches of a counter, computes nothing else."""

    engine = "counter engine"

    def __init__(self) -> None:
        self.t = 0.0

    def now(self, rank: int) -> float:
        return self.t + rank

    def do_take_batch(self, rank: int, req: TakeBatch) -> list[int]:
        return list(range(req.size or 1))


def test_what_an_engine_performs_is_what_it_implements() -> None:
    assert _Counter.performs == {TakeBatch, Now, Log}
    p = _Counter()
    assert p.perform(0, TakeBatch(3)) == [0, 1, 2]
    assert p.perform(2, Now()) == 2.0
    assert p.perform(0, Log()) is None
    with pytest.raises(TypeError, match=r"the counter engine cannot perform Pull \(worker 1\); it performs Log, Now, "
                                        r"TakeBatch"):
        p.perform(1, Pull())


def test_a_subclass_adds_and_overrides() -> None:
    class Both(_Counter):
        def do_compute(self, rank: int, req: Compute) -> str:
            return "computed"

        def do_take_batch(self, rank: int, req: TakeBatch) -> list[int]:
            return [7]

    assert Both.performs == {TakeBatch, Compute, Now, Log} and _Counter.performs == {TakeBatch, Now, Log}
    assert Both().perform(0, TakeBatch(2)) == [7] and Both().perform(0, Compute(None)) == "computed"


def test_the_driver_asks_a_performer_through_its_own_perform() -> None:
    """runner.drive dispatches a Performer's requests to its do_ methods directly, but a performer whose
    perform is its own (a subclass's, or one set on the instance) is asked through it."""
    from edgestream.runner.driver import drive, run_blocking

    def program():
        got = yield TakeBatch(2)
        now = yield Now()
        return got, now

    plain = _Counter()
    assert run_blocking(drive(1, program(), plain, lambda line: None)) == ([0, 1], 1.0)

    class Wrapped(_Counter):
        def perform(self, rank, request):
            out = super().perform(rank, request)
            return ["wrapped", out] if isinstance(request, TakeBatch) else out

    assert run_blocking(drive(0, program(), Wrapped(), lambda line: None)) == (["wrapped", [0, 1]], 0.0)
    patched = _Counter()
    patched.perform = lambda rank, request: "patched"
    assert run_blocking(drive(0, program(), patched, lambda line: None)) == ("patched", "patched")


def test_the_engines_perform_what_they_register() -> None:
    import edgestream.launch  # noqa: F401 - registers "local"
    import edgestream.runner.lockstep_run  # noqa: F401 - registers "lockstep"
    import edgestream.sim  # noqa: F401 - registers "sim"
    from edgestream.runner.engines import engine
    from edgestream.runner.lockstep import Lockstep, LockstepEngine
    from edgestream.sim import SimEngine
    from edgestream.trainer.performer import TrainerPerformer

    assert SimEngine.performs == TrainerPerformer.performs == REQUESTS
    assert engine("sim").performs == REQUESTS and engine("local").performs == REQUESTS
    assert Lockstep.performs | LockstepEngine.performs == engine("lockstep").performs == REQUESTS - PS_REQUESTS
    assert not Lockstep.performs & LockstepEngine.performs  # the host performs the collectives, the engine the rest


def test_dispatch_is_written_once() -> None:
    """No engine writes its own request dispatch: `perform` is defined by the base and by the lockstep host (which
    hands what it does not perform to its local performer), and no module keeps a request-kind -> handler table."""
    defined = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "perform":
                        defined.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert defined == ["runner/lockstep.py:Lockstep", "runner/performer.py:Performer"], defined
