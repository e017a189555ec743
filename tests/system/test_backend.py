"""Every rank uses the same torch.distributed backend, agreed at the rendezvous (edgestream.trainer.backend);
a conflict is one line on every rank, not a hang."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgestream.trainer.backend import BackendError, check_requested, choose

announcement = st.fixed_dictionaries({"cuda": st.booleans(), "requested": st.sampled_from(["", "gloo", "nccl"])})


@given(st.lists(announcement, min_size=1, max_size=9))
def test_choose_is_one_backend_or_one_line(anns):
    told = {a["requested"] for a in anns if a["requested"]}
    all_cuda = all(a["cuda"] for a in anns)
    try:
        backend = choose(anns)
    except BackendError as exc:
        line = str(exc)
        assert "\n" not in line
        assert len(told) > 1 or (told == {"nccl"} and not all_cuda)
        for name in told:
            assert name in line
        return
    assert backend in ("gloo", "nccl")
    if told:
        assert told == {backend}
    else:
        assert backend == ("nccl" if all_cuda else "gloo")
    assert backend != "nccl" or all_cuda


@pytest.mark.parametrize("anns,expected", [
    ([{"cuda": True, "requested": ""}, {"cuda": False, "requested": ""}, {"cuda": True, "requested": ""}], "gloo"),
    ([{"cuda": True, "requested": ""}] * 4, "nccl"),
    ([{"cuda": True, "requested": "gloo"}, {"cuda": True, "requested": ""}], "gloo"),
])
def test_mixed_clusters_agree(anns, expected):
    assert choose(anns) == expected


def test_conflicts_name_the_ranks():
    with pytest.raises(BackendError, match=r"rank 0: gloo; ranks 1, 2: nccl"):
        choose([{"cuda": True, "requested": "gloo"}, {"cuda": True, "requested": "nccl"},
                {"cuda": True, "requested": "nccl"}])
    with pytest.raises(BackendError, match=r"EDGESTREAM_BACKEND=nccl \(rank 1\) but ranks 0, 2 have no CUDA"):
        choose([{"cuda": False, "requested": ""}, {"cuda": True, "requested": "nccl"}, {"cuda": False, "requested": ""}])


@pytest.mark.parametrize("value,expected", [(None, ""), ("", ""), (" GLOO ", "gloo"), ("nccl", "nccl")])
def test_requested_values(value, expected):
    assert check_requested(value) == expected


def test_an_unknown_backend_is_named():
    with pytest.raises(BackendError, match="EDGESTREAM_BACKEND='mpi' is not allowed"):
        check_requested("mpi")


# ---------------------------------------------------------------- real trainers (real broker, gloo)
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from factories import free_port  # noqa: E402
from support.trainers import _config, _finish, _produce, _start  # noqa: E402


def _run(tmp_path, bootstrap, name, told: list[str], *, max_steps: int = 4, device: str = "", reduction="allreduce"):
    """Ranks told `told` backends, on `device` (EDGESTREAM_DEVICE; "" = the rank-to-GPU rule: a GPU where
    there is one, and every rank on the same one: local rank r, runtime.gpus [0]), one host."""
    cfg_path = _config(tmp_path, name, len(told), {"name": "ddl", "batch": {"policy": "fixed", "size": 8}},
                       stop={"max_steps": max_steps, "max_time_s": 120, "target_accuracy": None},
                       runtime={"gpus": [0], "reduction": reduction})
    run_id = f"{os.getpid()}{int(time.time() * 1000) % 10**8}"
    _produce(cfg_path, bootstrap, run_id, 0.5)
    out, port = tmp_path / "runs", free_port()
    procs = [_start(cfg_path, bootstrap, run_id, out, [r], len(told), port, EDGESTREAM_BACKEND=b, LOCAL_RANK=r,
                    EDGESTREAM_DEVICE=device, EDGESTREAM_RENDEZVOUS_TIMEOUT_S=60)[0] for r, b in enumerate(told)]
    return _finish(procs, timeout=200)


@pytest.mark.parametrize("told", [["gloo", "nccl"], ["nccl", "", "gloo"]])
def test_trainers_told_different_backends_stop_with_one_line_not_a_hang(bootstrap, tmp_path, told):
    results = _run(tmp_path, bootstrap, "mixed", told)
    lines = []
    for rank, (code, _, err) in enumerate(results):
        assert code != 0, f"rank {rank} should have refused"
        assert err.strip().count("\n") == 0 and "Traceback" not in err, err
        assert f"device {rank}:" in err and "told different backends" in err
        lines.append(err.strip().split(f"device {rank}: ", 1)[1])
    assert len(set(lines)) == 1  # every rank says the same thing


def test_nccl_told_on_ranks_without_cuda_is_one_line(bootstrap, tmp_path):
    results = _run(tmp_path, bootstrap, "nocuda", ["", "nccl"], device="cpu")  # CPU ranks also on a GPU host
    for rank, (code, _, err) in enumerate(results):
        assert code != 0 and err.strip().count("\n") == 0 and f"device {rank}:" in err
        assert "EDGESTREAM_BACKEND=nccl (rank 1) but ranks 0, 1 have no CUDA device" in err


@pytest.mark.parametrize("told", [["gloo", ""], ["", "", ""]])
def test_trainers_agree_and_train(bootstrap, tmp_path, told):
    results = _run(tmp_path, bootstrap, "agree", told)
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, f"rank {rank}: {err[-2000:]}"
        assert json.loads(out.strip().splitlines()[-1])["backend"] == "gloo"


# ---------------------------------------------------------------- ranks sharing one device
def test_two_ranks_on_one_device_train_with_gloo_and_say_so(bootstrap, tmp_path):
    """Local ranks 0 and 1 by the rank-to-GPU rule with runtime.gpus [0]: both on cuda:0 where there is a
    GPU (the issue's one-GPU host: rank 1 used to ask for cuda:1), both on the CPU here; they agree on gloo,
    and the rank log, the rank file and the live status line say where each computes and why gloo. (The
    exact reduction all-gathers, which gloo does only from host memory: on a GPU the trainer stages it.)"""
    from edgestream.launch.view import LiveState

    results = _run(tmp_path, bootstrap, "shared", ["", ""], reduction="exact")  # gloo all-gathers: via the host
    cuda = torch.cuda.is_available()
    on = "cuda:0" if cuda else "cpu"
    run_dir = next((tmp_path / "runs").iterdir())
    state = LiveState(run_dir.name, 2)
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, f"rank {rank}: {err[-2000:]}"
        summary = json.loads(out.strip().splitlines()[-1])
        assert (summary["backend"], summary["device"], summary["steps"]) == ("gloo", on, 4)
        log = (run_dir / "ranks" / f"{rank}.log").read_text()
        why = f", GPU-.*: runtime.gpus \\[0\\]\\[local rank {rank} % 1\\]" if cuda else "no CUDA device \\(runtime.gpus ignored\\)"
        assert re.search(f"rank {rank}/2 run {run_dir.name} device {on} \\(.*{why}\\) backend automatic ", log), log
        records = [json.loads(x) for x in (run_dir / "ranks" / f"{rank}.jsonl").read_text().splitlines()]
        placement = [r for r in records if r["kind"] == "placement"]
        assert len(placement) == 1 and (placement[0]["on"], placement[0]["backend"]) == (on, "gloo")
        note = placement[0]["note"]
        assert f"{note} (" in log
        if cuda:  # one GPU's UUID announced by both ranks
            assert note.startswith("backend gloo agreed by 2 ranks: ranks 0, 1 share GPU GPU-") and \
                note.endswith(": gloo for the collectives (NCCL needs a GPU of its own per rank)")
        else:
            assert note == "backend gloo agreed by 2 ranks: every rank on the CPU"
        state.add([(rank, r) for r in records])
    assert f"on {on} x2 | {note}" in state.line()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (NCCL)")
def test_nccl_told_on_ranks_sharing_a_gpu_is_one_line(bootstrap, tmp_path):
    results = _run(tmp_path, bootstrap, "sharednccl", ["nccl", ""])
    lines = []
    for rank, (code, _, err) in enumerate(results):
        assert code != 0 and err.strip().count("\n") == 0 and "Traceback" not in err, err
        assert f"device {rank}: EDGESTREAM_BACKEND=nccl (rank 0) but ranks 0, 1 share GPU GPU-" in err
        lines.append(err.strip().split(f"device {rank}: ", 1)[1])
    assert len(set(lines)) == 1
