"""Checkpoint format 3 (edgestream.trainer.checkpoint) without a broker: round trips of models of many
input shapes and class counts, optimizer state and dtypes; every refusal names the file; step agreement
for several world sizes. The real-run paths (resume, refusal before a resume) are in test_faults_run.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.models import build_model
from edgestream.trainer.checkpoint import (
    CheckpointError,
    agree_checkpoints,
    check_checkpoints,
    checkpoint_path,
    held_steps,
    identity,
    load_checkpoint,
    previous_path,
    save_checkpoint,
    step_disagreement,
)


def _model(name: str, shape: tuple[int, int, int], classes: int, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(classes + sum(shape))
    return build_model(name, shape, classes).to(dtype)


def _save(path: Path, model: torch.nn.Module, shape: tuple[int, int, int], step: int,
          ident: dict) -> torch.optim.Optimizer:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(3, *shape, dtype=next(model.parameters()).dtype)
    model(x).sum().backward()
    opt.step()  # momentum buffers in the optimizer state
    save_checkpoint(path, model=model, optimizer=opt, step=step, state={"codec": {}, "k": [1, 2]},
                    stream={"version": 1, "offsets": {"dev": 17 * step, "inj": None}}, elapsed_s=1.5,
                    samples=40 * step, ident=ident)
    return opt


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(["mlp", "cnn-small"]), channels=st.sampled_from([1, 3]), side=st.sampled_from([8, 12, 16]),
       classes=st.integers(2, 37), dtype=st.sampled_from([torch.float32, torch.float64]), step=st.integers(0, 10**6),
       rank=st.integers(0, 63))
def test_a_checkpoint_round_trips_bit_for_bit(tmp_path_factory, name, channels, side, classes, dtype, step, rank):
    path = tmp_path_factory.mktemp("ck") / f"rank{rank}.pt"
    shape = (channels, side, side)
    model = _model(name, shape, classes, dtype)
    ident = identity("run-a", rank, "pin0")
    opt = _save(path, model, shape, step, ident)
    data = load_checkpoint(path, expect=ident)
    assert data["step"] == step and data["samples"] == 40 * step and data["stream"]["offsets"]["dev"] == 17 * step
    assert data["identity"] == {**ident, "step": step}
    for key, t in model.state_dict().items():
        assert data["model"][key].dtype == dtype and torch.equal(data["model"][key], t), key
    fresh = _model(name, shape, classes, dtype)
    fresh.load_state_dict(data["model"])  # fits a model of the same shape and class count
    o2 = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    o2.load_state_dict(data["optimizer"])
    for a, b in zip(opt.state_dict()["state"].values(), o2.state_dict()["state"].values(), strict=True):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])


@pytest.mark.parametrize("classes", [3, 10, 23])
def test_every_refusal_names_the_file(tmp_path, classes):
    model = _model("mlp", (1, 8, 8), classes, torch.float32)
    path = tmp_path / "rank1.pt"
    ident = identity("run-a", 1, "pin0")
    _save(path, model, (1, 8, 8), 7, ident)
    for expect, words in ((identity("run-b", 1, "pin0"), "not of run run-b"),
                          (identity("run-a", 2, "pin0"), "not rank 2's"),
                          (identity("run-a", 1, "pin1"), "written under another config")):
        with pytest.raises(CheckpointError, match=words) as got:
            load_checkpoint(path, expect=expect)
        assert str(path) in str(got.value) and "\n" not in str(got.value)
    raw = bytearray(path.read_bytes())
    flipped = tmp_path / "flipped.pt"
    raw[len(raw) // 2] ^= 0x40  # inside the body (the payload is most of the file)
    flipped.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"checksum mismatch|not a readable checkpoint") as got:
        load_checkpoint(flipped, expect=ident)
    assert str(flipped) in str(got.value)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty file"):
        load_checkpoint(empty)


@pytest.mark.parametrize("world", [1, 2, 5])
def test_ranks_must_agree_on_the_step(tmp_path, world):
    run = tmp_path / "run"
    for rank in range(world):
        model = _model("mlp", (1, 8, 8), 4 + rank, torch.float32)  # per-rank class counts: not checked here
        _save(checkpoint_path(run, rank), model, (1, 8, 8), 12, identity("r", rank, "p"))
    assert check_checkpoints(run, world, run="r", pin="p") == {r: 12 for r in range(world)}
    if world == 1:
        return
    odd = world - 1
    model = _model("mlp", (1, 8, 8), 5, torch.float32)
    _save(checkpoint_path(run, odd), model, (1, 8, 8), 9, identity("r", odd, "p"))
    with pytest.raises(CheckpointError, match=f"rank {odd} at step 9") as got:
        check_checkpoints(run, world, run="r", pin="p")
    assert "different steps" in str(got.value)
    assert check_checkpoints(run, world, run="r", pin="p", agree=False)[odd] == 9  # the PS family: no lockstep
    assert step_disagreement("x", {r: 3 for r in range(world)}) is None


@settings(max_examples=10, deadline=None)
@given(world=st.integers(2, 5), written=st.data())
def test_a_rank_killed_before_its_checkpoint_resumes_everyone_from_the_newest_common_step(tmp_path_factory, world,
                                                                                         written):
    """Ranks write a step's checkpoint each on its own: a rank killed after the others wrote step 2k leaves it at
    k. The previous file (rank<i>.prev.pt) of each rank ahead is put back, so all resume from k; with no step
    common to every rank the line names the disagreement."""
    run = tmp_path_factory.mktemp("run")
    # each rank wrote checkpoints at steps 4, 8, ... up to its own last one (at least one behind the rest: 1 or 2)
    last = {r: written.draw(st.integers(1, 3), label=f"rank {r} checkpoints") for r in range(world)}
    models = {}
    for r in range(world):
        models[r] = _model("mlp", (1, 8, 8), 3, torch.float32)
        for k in range(1, last[r] + 1):
            _save(checkpoint_path(run, r), models[r], (1, 8, 8), 4 * k, identity("r", r, "p"))
    assert all(held_steps(run, world)[r].keys() == {4 * last[r], 4 * max(1, last[r] - 1)} for r in range(world))
    spread = max(last.values()) - min(last.values())
    if spread > 1:  # a rank two checkpoints behind: its step is in no other rank's two files
        with pytest.raises(CheckpointError, match="different steps"):
            agree_checkpoints(run, world, run="r", pin="p")
        return
    steps, back = agree_checkpoints(run, world, run="r", pin="p")
    step = 4 * min(last.values())
    assert steps == {r: step for r in range(world)}
    assert back == [r for r in range(world) if last[r] > min(last.values())]
    assert check_checkpoints(run, world, run="r", pin="p") == steps  # the files agree now; a second call: no change
    assert agree_checkpoints(run, world, run="r", pin="p") == (steps, [])
    for r in back:
        assert not previous_path(checkpoint_path(run, r)).exists()
        assert load_checkpoint(checkpoint_path(run, r))["stream"]["offsets"]["dev"] == 17 * step


def test_a_checkpoint_keeps_the_one_it_replaced(tmp_path):
    path = checkpoint_path(tmp_path, 0)
    model = _model("mlp", (1, 8, 8), 3, torch.float32)
    _save(path, model, (1, 8, 8), 5, identity("r", 0, "p"))
    assert not previous_path(path).exists()
    _save(path, model, (1, 8, 8), 10, identity("r", 0, "p"))
    _save(path, model, (1, 8, 8), 15, identity("r", 0, "p"))
    assert load_checkpoint(path)["step"] == 15 and load_checkpoint(previous_path(path))["step"] == 10
    assert sorted(p.name for p in path.parent.iterdir()) == ["rank0.prev.pt", "rank0.pt"]
