"""A GPU trainer's losses read without a device sync (edgestream.trainer.losses), exercised on the CPU: the
same `LossWatch` with host tensors (no events: every copy is done at once)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.metrics import EventLog
from edgestream.runner.divergence import Diverged
from edgestream.trainer.losses import LazyLoss, LossWatch

FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=60, deadline=None)
@given(st.lists(FLOATS, min_size=1, max_size=40), st.integers(2, 8))
def test_lazy_losses_read_back_the_float32_values_in_order(values: list[float], ring: int) -> None:
    watch = LossWatch(0, torch.device("cpu"), ring=ring, ahead=ring // 2)
    lazies = [watch.lazy(torch.tensor(v, dtype=torch.float32), step) for step, v in enumerate(values)]
    assert len(watch.pending) < ring  # read before a slot comes round again
    watch.check()
    assert not watch.pending
    for lazy, v in zip(lazies, values, strict=True):
        assert float(lazy) == float(torch.tensor(v, dtype=torch.float32))  # the slot was never overwritten
        assert lazy.ready()


def test_a_lazy_loss_behaves_as_its_float_in_arithmetic() -> None:
    lazy = LazyLoss(torch.tensor(2.5), None, 3)
    assert float(lazy) == 2.5 and lazy * 2 == 5.0 and 2 * lazy == 5.0 and lazy + 1 == 3.5 and 1 + lazy == 3.5
    assert lazy / 5 == 0.5 and 5 / lazy == 2.0 and lazy - 1 == 1.5 and 3 - lazy == 0.5 and -lazy == -2.5
    assert lazy > 2 and lazy >= 2.5 and lazy < 3 and lazy <= 2.5 and lazy == 2.5 and round(lazy, 0) == 2.0
    total = 0.0
    total += lazy  # local-sgd's loss_sum += res.loss
    assert total == 2.5 and str(lazy) == "2.5"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_loss_is_diverged_naming_its_step(bad: float) -> None:
    watch = LossWatch(4, torch.device("cpu"), ring=16)
    watch.lazy(torch.tensor(1.0), 10)
    watch.lazy(torch.tensor(bad), 11)
    watch.lazy(torch.tensor(1.0), 12)
    with pytest.raises(Diverged, match=r"device 4: the loss is non-finite .* at step 11"):
        watch.check()


def test_settle_checks_what_is_pending() -> None:
    watch = LossWatch(0, torch.device("cpu"), ring=16)
    watch.lazy(torch.tensor(math.nan), 7)
    with pytest.raises(Diverged, match="at step 7"):
        watch.settle()
    assert not watch.pending


def test_the_oldest_loss_is_checked_before_the_ring_comes_round() -> None:
    watch = LossWatch(0, torch.device("cpu"), ring=4)
    watch.lazy(torch.tensor(math.nan), 0)
    watch.lazy(torch.tensor(1.0), 1)
    with pytest.raises(Diverged, match="at step 0"):  # a third pending one would reach half the ring
        watch.lazy(torch.tensor(1.0), 2)


def test_the_event_log_writes_a_lazy_loss_as_its_float(tmp_path) -> None:
    path = tmp_path / "events.jsonl"
    for live in (False, True):
        log = EventLog(path, live=live)
        watch = LossWatch(0, torch.device("cpu"), ring=8)
        log.step(time=1.0, device=0, step=0, batch=4, loss=watch.lazy(torch.tensor(0.25), 0))
        log.step(time=2.0, device=0, step=1, batch=4, loss=watch.lazy(torch.tensor(math.nan), 1))
        assert log.last_loss is not None and math.isnan(log.last_loss)
        log.close()
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        assert [x["loss"] for x in lines] == [0.25, None]  # the float; a non-finite one null, as a float's


def test_a_parameter_check_raises_its_own_error_in_step_order() -> None:
    watch = LossWatch(1, torch.device("cpu"), ring=16)
    watch.lazy(torch.tensor(0.5), 9)
    watch.lazy_check(torch.tensor(3.0), 9, lambda: Diverged("finite: never raised"))
    watch.lazy_check(torch.tensor(math.inf), 19, lambda: Diverged("device 1: a parameter is non-finite at 19"))
    watch.lazy(torch.tensor(math.nan), 20)
    with pytest.raises(Diverged, match="a parameter is non-finite at 19"):  # the older of the two problems
        watch.check()
    with pytest.raises(Diverged, match="the loss is non-finite .* at step 20"):
        watch.settle()


def _performer(lazy: bool):
    from torch import nn

    from edgestream.trainer.collectives import DistCollectives
    from edgestream.trainer.performer import TrainerPerformer

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    perf = TrainerPerformer(0, model, opt, None, DistCollectives(0, 1), {}, device=torch.device("cpu"),
                            lazy_loss=lazy)
    steps = [0]
    perf.step = lambda: steps[0]
    return perf, steps


def test_lazy_and_eager_losses_train_the_same_model_bit_for_bit() -> None:
    """The trainer's Compute/Apply with lazy losses (a GPU's path, here on the CPU) and with eager ones: the same
    losses, gradients and parameters."""
    from edgestream.sync.requests import Apply, Compute
    from edgestream.trainer.performer import TrainerBatch

    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(5, 8, generator=gen), torch.randint(0, 3, (5,), generator=gen)) for _ in range(12)]
    runs = []
    for lazy in (False, True):
        perf, steps = _performer(lazy)
        losses = []
        for k, (x, y) in enumerate(data):
            steps[0] = k
            res = perf.perform(0, Compute(TrainerBatch(x, y, 5, None)))
            losses.append(res.loss)
            perf.perform(0, Apply(res.grads, 0.1))
        perf.settle()
        assert all(isinstance(v, LazyLoss) for v in losses) == lazy
        runs.append(([float(v) for v in losses], [p.detach().clone() for p in perf.params]))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1], strict=True))


def test_a_lazy_non_finite_loss_ends_the_trainer_naming_its_step() -> None:
    from edgestream.sync.requests import Compute
    from edgestream.trainer.performer import TrainerBatch

    perf, steps = _performer(True)
    x, y = torch.randn(4, 8), torch.zeros(4, dtype=torch.long)
    with pytest.raises(Diverged, match="at step 3"):
        for k in range(6):
            steps[0] = k
            perf.perform(0, Compute(TrainerBatch(x * (math.nan if k == 3 else 1.0), y, 4, None)))
        perf.settle()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.integers(1, 6), min_size=0, max_size=2), min_size=1, max_size=5),
       st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.int64]), st.integers(0, 2**31 - 1))
def test_a_digest_is_the_same_for_the_same_bytes_and_differs_after_a_change(shapes, dtype, seed) -> None:
    """ParamDigest (the step lines' replica check): 16 hex digits, equal for equal parameters (any dtype, as
    taken now: a later change is not in it), different once one element changes."""
    from edgestream.trainer.digest import DigestTaker, ParamDigest

    gen = torch.Generator().manual_seed(seed)
    params = [(torch.randn(tuple(s), generator=gen) * 100).to(dtype) for s in shapes]
    first = DigestTaker(params)()
    same = ParamDigest([p.clone() for p in params])
    params[-1].view(-1)[:1] += 1  # after the snapshot
    assert len(str(first)) == 16 and int(str(first), 16) >= 0
    assert str(first) == str(same)
    if params[-1].numel():
        assert str(ParamDigest(params)) != str(first)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=40))
def test_without_checkpoints_a_commit_never_gets_ahead_of_its_steps_line(plan) -> None:
    """Each step: acknowledge its batch, queue its line; the flusher writes some of the queued lines through
    (drawn), an ack commits (interval 0: whenever it can). Every commit is of a batch whose step line was
    written through by then; at the end, with every line written, the newest batch is committed."""
    from types import SimpleNamespace

    from torch import nn

    from edgestream.sync.requests import Ack
    from edgestream.trainer.collectives import DistCollectives
    from edgestream.trainer.performer import TrainerPerformer

    committed: list[int] = []

    class Dataset:
        def ack(self, batch):
            committed.append(batch.step)

    model = nn.Linear(2, 2)
    perf = TrainerPerformer(0, model, torch.optim.SGD(model.parameters(), lr=0.1), Dataset(), DistCollectives(0, 1),
                            {}, device=torch.device("cpu"), ack_interval_s=0.0)
    queued, written = [0], [0]
    perf.lines_queued, perf.lines_written = (lambda: queued[0]), (lambda: written[0])
    for step, (flush, _) in enumerate(plan):
        batch = SimpleNamespace(own=1, step=step, offsets={"dev": step + 1, "inj": None})
        perf.perform(0, Ack(SimpleNamespace(stream=batch)))
        for got in committed:
            assert got < written[0]  # step `got`'s line is line got + 1: written through
        queued[0] += 1  # this step's line
        written[0] = min(queued[0], written[0] + flush)
    assert committed == sorted(set(committed))  # in order, never twice
    written[0] = queued[0]  # the host flushes the lines, then commit_pending
    perf.commit_pending()
    assert committed and committed[-1] == len(plan) - 1
    assert perf.commit_pending() is None  # nothing left
