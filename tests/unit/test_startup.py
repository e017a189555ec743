"""While a local run starts, its status line says what the trainers are doing (ranks/<rank>.phase)."""

from __future__ import annotations

from edgestream.launch.view import LiveState
from edgestream.runner.rundir import starting_phase, write_phase


def test_the_starting_phase_groups_the_trainers_by_what_they_do(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    assert starting_phase(ranks, 3) == "importing x3"  # no phase file yet: still importing
    write_phase(ranks, 0, "rendezvous of 3")
    write_phase(ranks, 2, "rendezvous of 3")
    assert starting_phase(ranks, 3) == "rendezvous of 3 x2, importing x1"
    write_phase(ranks, 1, "building the optimizer")
    (ranks / "0.ready").touch()
    write_phase(ranks, 0, None)
    assert not (ranks / "0.phase").exists()
    assert starting_phase(ranks, 3) == "building the optimizer x1, rendezvous of 3 x1"
    for r in (1, 2):
        (ranks / f"{r}.ready").touch()
    assert starting_phase(ranks, 3) == "waiting for the first batch"
    write_phase(tmp_path / "missing", 0, "x")  # best effort: a status line never fails a run


def test_the_status_line_shows_the_phase_only_while_starting():
    state = LiveState("r", 2)
    state.phase = "rendezvous of 2 x2"
    assert "] starting (rendezvous of 2 x2) | steps -" in state.line()
    assert state.headline().endswith("| starting (rendezvous of 2 x2)")
    state.status = "training"
    assert "rendezvous" not in state.line() and state.headline().endswith("| training")
