"""The Kafka PS's own state handling, in this process: checkpoints written in the background are
snapshots of the moment they were taken (and a failed write is reported by path), the coordinator hands
its W to a host that serialises it at once without a copy, and the malloc tuning that keeps big message
buffers warm is applied once, sized from the model, and can be switched off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from edgestream.config import validate_dict
from edgestream.ps.server import ParameterServer, PSError, ps_checkpoint_path
from edgestream.runner.plan import RunPlan
from edgestream.sync.requests import Push


def _plan(algorithm: str, world: int, shape: list[int], classes: int, momentum: float) -> RunPlan:
    return RunPlan.resolve(validate_dict({
        "name": "pss", "seed": 5, "data": {"dataset": "synthetic", "shape": shape, "num_classes": classes,
                                          "n_train": 40, "n_test": 20},
        "devices": {"count": world}, "model": {"name": "mlp"},
        "optim": {"lr": 0.3, "momentum": 0.0, "weight_decay": 0.0, "server": {"momentum": momentum}},
        "algorithm": {"name": algorithm}, "stop": {"max_steps": 100, "target_accuracy": None}}))


def _push(server: ParameterServer, worker: int, value: float) -> None:
    update = [torch.full_like(p, value) for p in server.params]
    server.coord.push(worker, Push(update, version=server.coord.version, n=4, lr=0.3), server.now())
    server.last_push[worker] += 1


@pytest.mark.parametrize(("algorithm", "world", "shape", "classes", "momentum"), [
    ("asp", 2, [1, 5, 3], 3, 0.9), ("ssp", 3, [2, 4, 4], 12, 0.5), ("dynsgd", 4, [1, 9, 2], 17, 0.0)])
def test_a_checkpoint_is_the_state_of_the_moment_it_was_taken(bootstrap: str, tmp_path: Path, algorithm: str,
                                                               world: int, shape: list[int], classes: int,
                                                               momentum: float) -> None:
    server = ParameterServer(_plan(algorithm, world, shape, classes, momentum), "pss-run", bootstrap, tmp_path,
                             evaluate=False)
    for w in range(world):
        _push(server, w, 0.01 * (w + 1))
    server.offset = 17
    expected = server.state_dict()
    server.checkpoint()                      # written in the background ...
    for w in range(world):                   # ... while the PS goes on applying pushes in place
        _push(server, w, 1.0)
    server.offset = 99
    server.ckpt_file.join()
    got = torch.load(ps_checkpoint_path(tmp_path), weights_only=True)
    assert got["offset"] == 17 and got["last_push"] == [1] * world
    assert got["coordinator"]["version"] == expected["coordinator"]["version"] == world
    for a, b in zip(got["coordinator"]["w"], expected["coordinator"]["w"], strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(got["coordinator"]["w"][0], server.coord.model()[0])  # W moved on since
    assert json.dumps(got["coordinator"]["pushes"]) == json.dumps(expected["coordinator"]["pushes"])
    # the stop's checkpoint is written before checkpoint(wait=True) returns, and is the newest state
    server.checkpoint(wait=True)
    last = torch.load(ps_checkpoint_path(tmp_path), weights_only=True)
    assert last["offset"] == 99 and last["coordinator"]["version"] == 2 * world


def test_a_checkpoint_that_cannot_be_written_is_named_at_the_next_one(bootstrap: str, tmp_path: Path) -> None:
    server = ParameterServer(_plan("asp", 2, [1, 4, 4], 4, 0.0), "pss-bad", bootstrap, tmp_path, evaluate=False)
    (tmp_path / "checkpoints").write_text("a file where the checkpoint folder should be")
    server.checkpoint()
    with pytest.raises(PSError, match=r"checkpoints/ps\.pt: cannot write the PS checkpoint"):
        server.checkpoint()
    with pytest.raises(PSError, match=r"checkpoints/ps\.pt: cannot write the PS checkpoint"):
        server.checkpoint(wait=True)


@pytest.mark.parametrize("shapes", [[(3,)], [(4, 5), (7,)], [(2, 3, 3, 3), (1,), (6, 1)]])
def test_pull_without_copy_hands_out_w_itself(shapes: list[tuple[int, ...]]) -> None:
    from edgestream.sync.coordinator import Coordinator

    plan = _plan("asp", 2, [1, 4, 4], 4, 0.0)
    model = [torch.randn(s) for s in shapes]
    coord = plan.algorithm.coordinator(plan.server_context(), model)
    assert isinstance(coord, Coordinator)
    copied, shared = coord.pull(0, 0.0), coord.pull(1, 0.0, copy=False)
    assert all(a is b for a, b in zip(shared.params, coord.model(), strict=True))
    assert all(a is not b and torch.equal(a, b) for a, b in zip(copied.params, coord.model(), strict=True))
    assert coord.pulls == [1, 1]


def _malloc(code: str, **env: str) -> list:
    out = subprocess.run([sys.executable, "-c", "import json\nfrom edgestream.ps.malloc import keep_large_buffers "
                          f"as k\nprint(json.dumps({code}))"], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}, timeout=60)
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_large_buffers_stay_in_the_heap_sized_from_the_model() -> None:
    mib = 1024 * 1024
    small, same, bigger, huge = _malloc("[k(10**6), k(10**6), k(45 * 2**20), k(2**40)]")
    assert small == same == 32 * mib                  # at least 32 MiB, idempotent
    assert bigger == 49 * mib                          # a whole 45 MiB body plus meta
    assert huge == 512 * mib                           # capped
    assert _malloc("[k(10**6)]", EDGESTREAM_PS_MALLOC="default") == [None]
