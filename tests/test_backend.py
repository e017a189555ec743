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
import time  # noqa: E402

from test_trainer import _config, _finish, _free_port, _produce, _start  # noqa: E402


def _run(tmp_path, bootstrap, name, told: list[str], *, max_steps: int = 4):
    cfg_path = _config(tmp_path, name, len(told), {"name": "ddl", "batch": {"policy": "fixed", "size": 8}},
                       stop={"max_steps": max_steps, "max_time_s": 120, "target_accuracy": None})
    run_id = f"{os.getpid()}{int(time.time() * 1000) % 10**8}"
    _produce(cfg_path, bootstrap, run_id, 0.5)
    out, port = tmp_path / "runs", _free_port()
    procs = [_start(cfg_path, bootstrap, run_id, out, [r], len(told), port, EDGESTREAM_BACKEND=b,
                    EDGESTREAM_RENDEZVOUS_TIMEOUT_S=60)[0] for r, b in enumerate(told)]
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
    results = _run(tmp_path, bootstrap, "nocuda", ["", "nccl"])
    for rank, (code, _, err) in enumerate(results):
        assert code != 0 and err.strip().count("\n") == 0 and f"device {rank}:" in err
        assert "EDGESTREAM_BACKEND=nccl (rank 1) but ranks 0, 1 have no CUDA device" in err


@pytest.mark.parametrize("told", [["gloo", ""], ["", "", ""]])
def test_trainers_agree_and_train(bootstrap, tmp_path, told):
    results = _run(tmp_path, bootstrap, "agree", told)
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, f"rank {rank}: {err[-2000:]}"
        assert json.loads(out.strip().splitlines()[-1])["backend"] == "gloo"
