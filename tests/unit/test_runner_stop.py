"""stop.max_steps ends every algorithm after exactly max_steps steps, on the simulator and on the
lockstep engine (the stop test gets the number of steps completed when the collective carrying the
stop flag finishes; the local-SGD family ends its last period at the budget). Also the run core's
stop rule and evaluation schedule on their own."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from sklearn.datasets import load_digits

from edgestream.config import validate_dict
from edgestream.metrics import EventLog
from edgestream.models import build_model
from edgestream.runner import Evaluation, StopRule
from edgestream.runner.lockstep import ArraySource, LockstepEngine
from edgestream.sim.engine import SimEngine
from edgestream.streams import build_batch_policy
from edgestream.sync import ALGORITHMS, WorkerContext

MAX_STEPS = 5
# (algorithm, params): every algorithm; the local-SGD family with a tau that divides max_steps and one
# that does not
CASES = [("ddl", {}), ("scadles", {}), ("abs-sgd", {"ref_batch": 8}), ("dbs-sgd", {"every": 2}),
         ("local-sgd", {"tau": 1}), ("local-sgd", {"tau": 2}), ("fixed-adacomm", {"tau": 1}),
         ("fixed-adacomm", {"tau": 3}), ("adacomm", {"tau": 1, "check_every": 1}),
         ("adacomm", {"tau": 2, "check_every": 1})]


def _steps_per_device(lines: list[dict]) -> Counter:
    """Training steps logged per device (averaging rounds log `round`, not a step)."""
    return Counter(e["device"] for e in lines if "round" not in e)


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}{p}" for n, p in CASES])
def test_max_steps_is_exact_in_the_simulator(name, params):
    cfg = validate_dict({
        "name": "stop", "seed": 1, "data": {"dataset": "digits"},
        "devices": {"count": 3, "rates": {"distribution": "constant", "rate": 200},
                    "compute": {"base_s": 0.01, "per_sample_s": 0.001, "static": [1, 2, 3]}},
        "model": {"name": "mlp"}, "optim": {"lr": 0.05},
        "algorithm": {"name": name, "params": params,
                      "batch": {"policy": "rate", "min": 8, "max": 32} if name == "scadles"
                      else {"policy": "fixed", "size": 16}},
        "stop": {"target_accuracy": None, "max_time_s": None, "max_steps": MAX_STEPS},
        "eval": {"every_s": 100.0}})
    log = EventLog(None, keep=True)
    engine = SimEngine(cfg, log)
    engine.run()
    lines = [e for e in log.records if e["kind"] == "step"]
    assert _steps_per_device(lines) == {0: MAX_STEPS, 1: MAX_STEPS, 2: MAX_STEPS}
    assert max(e["step"] for e in lines if "round" not in e) == MAX_STEPS - 1
    assert engine.stop_reason == "max_steps" and all(c.step == MAX_STEPS for c in engine.contexts)


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}{p}" for n, p in CASES])
def test_max_steps_is_exact_on_the_lockstep_engine(name, params):
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(d.target)
    torch.manual_seed(0)
    engine = LockstepEngine(build_model("mlp", (1, 8, 8), 10),
                            [ArraySource(x[i::3], y[i::3], rate=16, seed=i) for i in range(3)],
                            build_batch_policy({"policy": "rate", "min": 8, "max": 32}))
    rule = StopRule(max_steps=MAX_STEPS)
    ctxs = [WorkerContext(rank=r, world_size=3, params=ALGORITHMS[name].resolve(params), max_steps=MAX_STEPS,
                          should_stop=lambda completed, r=r: rule.should_stop(completed, engine.now(r)))
            for r in range(3)]
    engine.run([ALGORITHMS[name].worker(c) for c in ctxs])
    assert _steps_per_device(engine.events) == {0: MAX_STEPS, 1: MAX_STEPS, 2: MAX_STEPS}
    assert rule.reason == "max_steps" and [c.step for c in ctxs] == [MAX_STEPS] * 3


def test_stop_rule_and_evaluation_schedule():
    rule = StopRule(max_steps=3, max_time_s=10.0, target_accuracy=0.9)
    assert not rule.should_stop(2, 9.9)
    assert rule.should_stop(3, 0.0) and rule.reason == "max_steps"
    assert rule.should_stop(0, 0.0)  # sticky: the run is over for every worker
    timed = StopRule(max_time_s=10.0)
    assert not timed.should_stop(100, 9.99) and timed.should_stop(100, 10.0) and timed.reason == "max_time_s"

    log = EventLog(None, keep=True)
    target = StopRule(target_accuracy=0.5)
    scores = iter([0.1, 0.3, 0.6, 0.9])
    clock = {"t": 0.0}
    seen = []
    ev = Evaluation(lambda: (next(scores), 1.0), log, target, every_s=2.0,
                    on_eval=lambda now, step, acc: seen.append((now, acc)))
    schedule = ev.periodic(lambda: clock["t"], lambda: 7, lambda: target.reason is None)
    for wait in schedule:  # the engine waits `wait` seconds of its own time
        assert wait == 2.0
        clock["t"] += wait
    assert seen == [(0.0, 0.1), (2.0, 0.3), (4.0, 0.6)] and target.reason == "target_accuracy"
    ev.final(4.0, 7)  # already evaluated at t = 4
    ev.final(5.0, 8)
    assert [(r["time"], r["step"]) for r in log.records] == [(0.0, 7), (2.0, 7), (4.0, 7), (5.0, 8)]
    with pytest.raises(ValueError):
        Evaluation(lambda: (0.0, 0.0), log, target, every_s=0)


class _Refuses:
    """A performer that records the requests it is asked for and performs none (the test's stand-in engine)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def now(self, rank: int) -> float:
        return 0.0

    def perform(self, rank: int, request: object) -> object:
        self.asked.append(type(request).__name__)
        raise LookupError("performed")


@pytest.mark.parametrize(("name", "params"), [("ddl", {}), ("scadles", {}), ("local-sgd", {"tau": 2})])
def test_a_run_resumed_at_its_last_step_trains_nothing(name: str, params: dict) -> None:
    """A real run killed after its final checkpoint (step = max_steps) and resumed ends at once with reason
    max_steps (it trained one step past the budget before); one checkpoint earlier, it takes a batch."""
    from edgestream.runner.plan import RunPlan
    from edgestream.runner.session import WorkerSession

    plan = RunPlan.resolve(validate_dict({"devices": {"count": 2}, "algorithm": {"name": name, "params": params},
                                          "stop": {"max_steps": MAX_STEPS}}))
    for at, asked in ((MAX_STEPS, []), (MAX_STEPS + 3, []), (MAX_STEPS - 1, ["TakeBatch"])):
        performer = _Refuses()
        session = WorkerSession(plan, 1, performer, stop=plan.stop_rule(), events=None)
        session.resume(at, {})
        if asked:
            with pytest.raises(LookupError):
                session.run_blocking()
            assert session.stop.reason is None and not session.finished
        else:
            assert session.run_blocking() is None
            assert session.stop.reason == "max_steps" and session.finished and session.ctx.step == at
        assert performer.asked == asked, (at, performer.asked)


@pytest.mark.parametrize(("name", "params"), [("ddl", {}), ("scadles", {}), ("local-sgd", {"tau": 2})])
def test_a_rank_signalled_just_after_its_vote_stops_on_its_peers_and_says_signal(name: str, params: dict) -> None:
    """The orchestrator signals every trainer at once, but each has its own stop rule: rank 1 sees its
    SIGTERM before voting at step 3, rank 0 only after its vote for that step went out. Both stop at the same
    step boundary on rank 1's vote, and both say stop_reason "signal" (rank 0 said "finished" before: CI)."""
    from edgestream.runner.lockstep import Lockstep
    from edgestream.runner.plan import RunPlan
    from edgestream.runner.session import WorkerSession

    plan = RunPlan.resolve(validate_dict({"devices": {"count": 2}, "algorithm": {"name": name, "params": params},
                                          "stop": {"max_steps": 40}}))
    engine = LockstepEngine.from_plan(plan)
    lockstep = Lockstep(plan.world, engine.perform, engine.now)
    signalled = [False, False]
    sessions: list[WorkerSession] = []

    def signal_of(rank: int):
        def asked() -> bool:
            if rank == 1 and sessions[1].ctx.step >= 3:
                signalled[1] = True
            return signalled[rank]
        return asked

    events = EventLog(None)
    for r in range(2):
        sessions.append(WorkerSession(plan, r, lockstep, stop=plan.stop_rule(), events=events,
                                      signal=signal_of(r)))
    real = sessions[1].should_stop

    def rank1_votes(completed: int) -> bool:
        vote = real(completed)
        if vote:
            signalled[0] = True  # rank 0's signal arrives now: its own vote for this step is already cast
        return vote

    sessions[1].ctx.should_stop = rank1_votes
    lockstep.schedule([s.drive() for s in sessions])
    summaries = [s.summary() for s in sessions]
    assert sessions[0].stop.reason is None and sessions[1].stop.reason == "signal"  # rank 0 stopped on the vote
    assert [s["stop_reason"] for s in summaries] == ["signal", "signal"]
    assert summaries[0]["steps"] == summaries[1]["steps"] < 40
    # a rank never signalled that stops on a peer's vote still says finished
    signalled[0] = False
    assert sessions[0].summary()["stop_reason"] == "finished"
