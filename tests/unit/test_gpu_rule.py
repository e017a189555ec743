"""The rank-to-GPU rule (edgestream.trainer.gpus) and the backend the ranks then agree on
(edgestream.trainer.backend), as pure functions of (ranks, device counts, GPU UUIDs, what each was told):
several ranks on one GPU -- processes on one host, compose containers that each see it as cuda:0 -- train
there with gloo, and a told NCCL that cannot work is one line, never an NCCL traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgestream.config import ConfigError, validate_dict
from edgestream.trainer.backend import BackendError, choose, describe
from edgestream.trainer.gpus import GpuError, check_local, check_told, host_gpu, place, refusal, unusable_gpu

told_device = st.sampled_from(["", "cpu", "cuda"])


@given(st.integers(0, 64), st.integers(0, 8), st.none() | st.lists(st.integers(0, 9), min_size=1, max_size=4),
       told_device)
def test_the_rule(local_rank, count, gpus, told):
    try:
        p = place(local_rank, count, gpus=gpus, told=told, visible="2,3" if count == 2 else None)
    except GpuError as exc:
        line = str(exc)
        assert "\n" not in line
        if told == "cuda" and count == 0:
            assert line.startswith("EDGESTREAM_DEVICE=cuda but this process sees no GPU")
        else:
            assert gpus and told != "cpu" and count > 0 and any(i >= count for i in gpus)
            assert line.startswith(f"runtime.gpus: {gpus} names GPU") and f"sees {count} GPU" in line
            assert count != 2 or "CUDA_VISIBLE_DEVICES='2,3'" in line
        return
    if told == "cpu" or count == 0:
        assert (p.device, p.index, p.cuda) == ("cpu", None, False)
        assert p.why == ("EDGESTREAM_DEVICE=cpu" if told == "cpu" else "no CUDA device" + " (runtime.gpus ignored)"
                         * bool(gpus))
        return
    expected = gpus[local_rank % len(gpus)] if gpus else local_rank % count
    assert (p.device, p.index, p.cuda) == (f"cuda:{expected}", expected, True)
    assert 0 <= p.index < count


def test_rule_examples():
    # the issue's host: one GPU, two ranks of the local engine (LOCAL_RANK 0 and 1): both on cuda:0
    assert [place(r, 1).device for r in range(2)] == ["cuda:0", "cuda:0"]
    assert place(1, 1).text() == "cuda:0 (local rank 1 % 1 GPU)"
    assert [place(r, 4).device for r in range(6)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0", "cuda:1"]
    assert [place(r, 4, gpus=[2, 3]).device for r in range(3)] == ["cuda:2", "cuda:3", "cuda:2"]
    assert place(3, 2, gpus=[1]).why == "runtime.gpus [1][local rank 3 % 1]"
    assert place(0, 0, told="").device == place(0, 4, told="cpu").device == "cpu"
    with pytest.raises(GpuError, match=r"^LOCAL_RANK=-1 is not allowed"):
        place(-1, 1)


@pytest.mark.parametrize("version, cuda, driver, jetson, visible, says", [
    ("2.15.0+cpu", None, "580.159.03", None, None, "an NVIDIA GPU is here (driver 580.159.03), but this torch "
                                                  "(2.15.0+cpu) is a CPU build"),
    ("2.15.0+cu132", "13.2", "535.104.05", None, None, "this torch (2.15.0+cu132, built for CUDA 13.2) cannot use it"),
    ("2.5.0", None, None, "R36 (release)", None, "this is a Jetson (R36 (release)), but this torch (2.5.0) is a CPU"),
    ("2.15.0+cu132", "13.2", "580.1", None, "0", "built for CUDA 13.2"),   # a GPU named, yet none seen
    ("2.15.0+cpu", None, None, None, None, None),                          # no GPU known here: nothing to say
    ("2.15.0+cpu", None, "580.1", None, "", None),                         # CUDA_VISIBLE_DEVICES hides them
    ("2.15.0+cpu", None, "580.1", None, "-1", None),
])
def test_a_gpu_this_torch_cannot_use_is_named_with_the_way_out(version, cuda, driver, jetson, visible, says):
    why = unusable_gpu(version, cuda, driver, jetson, visible)
    if says is None:
        assert why is None
        return
    assert says in why and "make install TORCH=host PYTHON=" in why, why
    placed = place(1, 0, visible=visible, unusable=why)  # the rule falls back to the CPU and says why
    assert placed.device == "cpu" and placed.text().startswith(f"cpu (no CUDA device: {why.split(';')[0]}")
    with pytest.raises(GpuError, match=r"EDGESTREAM_DEVICE=cuda but this process sees no GPU.*TORCH=host"):
        place(0, 0, told="cuda", visible=visible, unusable=why)


def test_the_hosts_driver_and_jetson_release_are_read_from_their_files(tmp_path):
    driver, tegra = tmp_path / "version", tmp_path / "nv_tegra_release"
    assert host_gpu(str(driver), str(tegra)) == (None, None)
    driver.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.03  Release Build  "
                      "(dvs-builder@U22)  Tue Sep 30 2025\nGCC version:  gcc version 12.3.0\n")
    tegra.write_text("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed\n")
    assert host_gpu(str(driver), str(tegra)) == ("580.159.03", "R36 (release)")
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n")
    assert host_gpu(str(driver), str(tegra))[0] == "535.104.05"
    driver.write_text("something else\n")
    assert host_gpu(str(driver), str(tegra))[0] == "of unknown version"


@pytest.mark.parametrize("value,expected", [(None, ""), ("", ""), (" CPU ", "cpu"), ("cuda", "cuda")])
def test_told_device_values(value, expected):
    assert check_told(value) == expected


def test_an_unknown_device_is_named():
    with pytest.raises(GpuError, match=r"^EDGESTREAM_DEVICE='gpu' is not allowed; must be cpu, cuda or empty"):
        check_told("gpu")


@pytest.mark.parametrize("gpus,line", [
    ([], "runtime.gpus: [] is not allowed; must list GPU indices >= 0"),
    ([0, -1], "runtime.gpus: [0, -1] is not allowed; must list GPU indices >= 0"),
    (0, "runtime.gpus: 0 is not allowed"),
])
def test_runtime_gpus_is_checked_in_the_config(gpus, line):
    with pytest.raises(ConfigError) as info:
        validate_dict({"runtime": {"gpus": gpus}})
    problems = str(info.value).splitlines()[1:]  # "config: 1 problem(s)", then one line per problem
    assert len(problems) == 1 and problems[0].startswith(line)
    assert validate_dict({"runtime": {"gpus": [1, 0, 1]}}).runtime.gpus == [1, 0, 1]
    assert validate_dict({}).runtime.gpus is None


# ------------------------------------------------------------- clusters: hosts, ranks, GPUs, backends
#: a host: how many GPUs it has (0: a CPU box) and whether its trainers run as compose containers that
#: each see one GPU of the host as cuda:0 (docker-compose.yml's gpu trainers; GPU_<i> may repeat one)
host = st.fixed_dictionaries({"gpus": st.integers(0, 3), "containers": st.booleans(),
                              "cpu": st.booleans(), "list": st.none() | st.lists(st.integers(0, 2), min_size=1,
                                                                                  max_size=3)})


@st.composite
def clusters(draw):
    hosts = draw(st.lists(host, min_size=1, max_size=3))
    ranks = []  # (host index, local rank, the physical GPU its container sees or None)
    for h, spec in enumerate(hosts):
        for local in range(draw(st.integers(1, 4))):
            pinned = draw(st.integers(0, spec["gpus"] - 1)) if spec["containers"] and spec["gpus"] else None
            ranks.append((h, local, pinned))
    told = draw(st.lists(st.sampled_from(["", "gloo", "nccl"]), min_size=len(ranks), max_size=len(ranks)))
    return hosts, ranks, told


def _announce(hosts, ranks, told):
    """Every rank's announcement as edgestream.trainer.main makes it: the rule, then its GPU's UUID."""
    anns, placed = [], []
    for (h, local, pinned), requested in zip(ranks, told, strict=True):
        spec = hosts[h]
        count = 1 if pinned is not None else spec["gpus"]
        gpus = None if pinned is not None else spec["list"]
        try:
            p = place(0 if pinned is not None else local, count, gpus=gpus, told="cpu" if spec["cpu"] else "")
        except GpuError:
            return None, None  # runtime.gpus names a GPU the host lacks: refused locally, before the rendezvous
        physical = pinned if pinned is not None else p.index
        uuid = f"GPU-host{h}-{physical}" if p.cuda else None
        anns.append({"cuda": p.cuda, "requested": requested, "gpu": uuid})
        placed.append(uuid)
    return anns, placed


@given(clusters())
def test_every_cluster_gets_one_backend_or_one_line(cluster):
    anns, placed = _announce(*cluster)
    if anns is None:
        return
    told = {a["requested"] for a in anns if a["requested"]}
    on_gpu = [u for u in placed if u is not None]
    own_gpus = len(on_gpu) == len(placed) and len(set(on_gpu)) == len(on_gpu)
    try:
        backend = choose(anns)
    except BackendError as exc:
        line = str(exc)
        assert "\n" not in line
        if len(told) > 1:
            assert "told different backends" in line
        else:
            assert told == {"nccl"} and not own_gpus
            assert ("have no CUDA device" in line) == (len(on_gpu) < len(placed))
            if len(on_gpu) == len(placed):
                assert "share GPU" in line and "NCCL needs a GPU of its own per rank" in line
        return
    assert backend == (told.pop() if told else "nccl" if own_gpus else "gloo")
    assert backend != "nccl" or own_gpus  # NCCL only where every rank has a GPU of its own
    note = describe(anns, backend)
    assert "\n" not in note and note.startswith(f"backend {backend} agreed by {len(anns)} rank")
    assert ("share GPU" in note) == (len(set(on_gpu)) < len(on_gpu))


def test_compose_containers_on_one_gpu_are_told_apart_by_uuid():
    # two gpu trainer containers given the same GPU (GPU_0=GPU_1=0): each sees it as cuda:0
    anns = [{"cuda": True, "requested": "", "gpu": "GPU-5c1f"}, {"cuda": True, "requested": "", "gpu": "GPU-5c1f"},
            {"cuda": True, "requested": "", "gpu": "GPU-77aa"}]
    assert choose(anns) == "gloo"
    assert describe(anns, "gloo") == ("backend gloo agreed by 3 ranks: ranks 0, 1 share GPU GPU-5c1f: gloo for the "
                                      "collectives (NCCL needs a GPU of its own per rank)")
    with pytest.raises(BackendError, match=r"^EDGESTREAM_BACKEND=nccl \(ranks 0-2\) but ranks 0, 1 share GPU "
                                           r"GPU-5c1f \(NCCL needs a GPU of its own per rank\); use gloo"):
        choose([dict(a, requested="nccl") for a in anns])
    distinct = [anns[0], anns[2]]
    assert choose(distinct) == "nccl"
    assert describe(distinct, "nccl") == "backend nccl agreed by 2 ranks: every rank on a GPU of its own"
    assert describe([{"cuda": False, "requested": ""}] * 2, "gloo") == \
        "backend gloo agreed by 2 ranks: every rank on the CPU"


# ------------------------------------------------------------- refused before anything starts (local engine)
def test_a_told_nccl_that_cannot_work_on_one_host_is_one_line():
    one_gpu = [place(r, 1) for r in range(3)]
    assert refusal(one_gpu, "nccl") == (
        "EDGESTREAM_BACKEND=nccl but 3 ranks on 1 GPU: ranks 0-2 share cuda:0 (NCCL needs a GPU of its own per "
        "rank); use gloo, give each rank its own GPU (runtime.gpus, CUDA_VISIBLE_DEVICES) or leave it empty")
    assert refusal(one_gpu, "gloo") is refusal(one_gpu, "") is None
    assert refusal([place(r, 2) for r in range(2)], "nccl") is None
    assert refusal([place(0, 2), place(1, 2, told="cpu")], "nccl").startswith(
        "EDGESTREAM_BACKEND=nccl but rank 1 would compute on the CPU (EDGESTREAM_DEVICE=cpu); use gloo")
    assert check_local(2, None, {}) is None  # nothing told: nothing to ask CUDA about
    assert check_local(2, None, {"EDGESTREAM_BACKEND": "nccl", "EDGESTREAM_DEVICE": "cpu"}).startswith(
        "EDGESTREAM_BACKEND=nccl but ranks 0, 1 would compute on the CPU (EDGESTREAM_DEVICE=cpu)")
    assert check_local(2, None, {"EDGESTREAM_BACKEND": "nccl", "EDGESTREAM_DEVICE": "cpu"}, collectives=False) is None
    assert check_local(2, None, {"EDGESTREAM_BACKEND": "mpi"}).startswith("EDGESTREAM_BACKEND='mpi' is not allowed")
    assert check_local(2, None, {"EDGESTREAM_DEVICE": "tpu"}).startswith("EDGESTREAM_DEVICE='tpu' is not allowed")


def test_the_local_engine_refuses_an_nccl_that_cannot_work_before_it_starts(tmp_path):
    cfg = tmp_path / "nccl.yaml"
    cfg.write_text("name: nccl\ndevices: {count: 2}\nruntime: {engine: local, bootstrap: '127.0.0.1:9'}\n")
    env = dict(os.environ, EDGESTREAM_BACKEND="nccl", EDGESTREAM_DEVICE="cpu")
    res = subprocess.run([sys.executable, "-m", "edgestream.cli", "run", str(cfg), "--out", str(tmp_path / "runs")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip() == (
        "error: EDGESTREAM_BACKEND=nccl but ranks 0, 1 would compute on the CPU (EDGESTREAM_DEVICE=cpu); use gloo "
        "(it also reduces CUDA tensors) or leave it empty"), res.stderr
    assert not (tmp_path / "runs").exists()  # nothing started, no broker asked, no run directory


def test_the_status_line_shows_where_the_ranks_compute_and_why_gloo():
    from edgestream.launch.view import LiveState

    note = describe([{"cuda": True, "requested": "", "gpu": "GPU-5c1f"}] * 2, "gloo")
    state = LiveState("r", 2)
    state.add([(r, {"kind": "placement", "time": 0.0, "device": r, "on": "cuda:0", "gpu": "GPU-5c1f",
                    "backend": "gloo", "note": note}) for r in (1, 0)])
    state.add([(0, {"kind": "step", "time": 1.0, "device": 0, "step": 0, "batch": 8})])
    assert state.line().endswith(f" | on cuda:0 x2 | {note}")
    assert state.pop_warnings() == [f"note: {note}"] and state.pop_warnings() == []  # said once
    assert state.devices[0].step == 0 and state.devices[1].step is None  # not counted as a step
    assert state.table().columns[-1].header == "on" and note in state.table().caption
