"""The shared-memory all-reduce of co-located ranks (`edgestream.trainer.shm_reduce`) in spawned processes over
a real gloo group: growing payloads, ranks that do not share memory, a size one rank cannot hold, a peer that
never posts, a peer that dies, and the files left behind. Its results against the exact mode, over dtypes,
shapes, ops and worlds 2-4, are in tests/unit/test_collectives.py."""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
from pathlib import Path

import pytest
import torch

from edgestream.trainer import shm_reduce
from edgestream.trainer.shm_reduce import ShmReducer

SIZES = (10, 300_000, 2_000, 1_000_000, 0, 17)  # float32 elements: 40 B .. 4 MB, back down, empty


def _payload(n: int, rank: int, k: int) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(1000 * k + rank), dtype=torch.float32)


def _rank(rank: int, store: str, root: str, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    res: dict[str, object] = {}
    base = Path(root)
    try:
        # growing and shrinking payloads: a file per capacity, made when first needed
        red = ShmReducer.join(rank, 2, root=base, timeout_s=30)
        res["joined"] = red is not None
        assert red is not None
        folder = red.folder
        for k, n in enumerate(SIZES):
            cap = red.ready_for(4 * n)
            res[f"cap{k}"] = cap
            work = red.start([_payload(n, rank, k)], cap)
            work.wait()
            res[f"sum{k}"] = work.result.clone()
        dist.barrier()  # both ranks done with the sizes, neither at the next one yet
        res["files"] = sorted(p.name for p in folder.iterdir()) if folder.exists() else None
        dist.barrier()
        # a size this rank cannot hold (its file is already there): the backend for that size, on both ranks
        cap = shm_reduce._capacity(8 * 2**20)
        if rank == 1:
            folder.mkdir(exist_ok=True)
            (folder / f"r1-{cap}.seg").write_bytes(b"")
        res["refused"] = red.ready_for(8 * 2**20)
        if rank == 1:
            (folder / f"r1-{cap}.seg").unlink()
        res["after-refusal"] = red.ready_for(400)  # a size both can hold still goes through memory
        dist.barrier()
        red.close()
        dist.barrier()
        res["closed"] = not folder.exists()
        # ranks that do not share memory (each its own folder, as containers with their own /dev/shm): None on both
        res["apart"] = ShmReducer.join(rank, 2, root=base / f"own{rank}") is None
        # ranks computing with different torch thread counts keep weighted means on the backend, on every rank
        torch.set_num_threads(1 + rank)
        red = ShmReducer.join(rank, 2, root=base)
        apart = red.uniform_threads
        red.close()
        torch.set_num_threads(1)
        red = ShmReducer.join(rank, 2, root=base)
        res["threads"] = (apart, red.uniform_threads)
        red.close()
        # a peer that never posts: the waiting rank gives up after the timeout, naming the peer
        red = ShmReducer.join(rank, 2, root=base, timeout_s=1.0)
        assert red is not None
        if rank == 0:
            work = red.start([_payload(5, 0, 0)], red.ready_for(20))
            try:
                work.wait()
            except RuntimeError as exc:
                res["silent"] = str(exc)
            try:  # nothing more is posted: the peer may not have read this rank's slots
                red.start([_payload(5, 0, 1)], red.ready_for(20))
            except RuntimeError as exc:
                res["after-silent"] = str(exc)
        else:
            red.ready_for(20)
        dist.barrier()
        red.close()
        # a peer that dies: the waiting rank learns it from the peer's lock, long before the timeout
        red = ShmReducer.join(rank, 2, root=base, timeout_s=600)
        assert red is not None
        cap = red.ready_for(20)
        res["folder"] = str(red.folder)
        torch.save(res, out)
        dist.barrier()
        if rank == 1:
            os._exit(0)  # no close: its files stay, its lock goes with the process
        work = red.start([_payload(5, 0, 0)], cap)
        try:
            work.wait()
        except RuntimeError as exc:
            res["dead"] = str(exc)
        res["left"] = red.folder.exists()  # rank 1 was killed, rank 0 did not close: nothing of theirs is left
    finally:
        torch.save(res, out)
    os._exit(0)  # the group's peer is gone: no destroy_process_group


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("shm")
    root = tmp / "shm"
    root.mkdir()
    ctx = mp.get_context("spawn")
    with pytest.MonkeyPatch.context() as mpatch:
        mpatch.setenv("OMP_NUM_THREADS", "1")
        procs = [ctx.Process(target=_rank, args=(r, str(tmp / "store"), str(root), str(tmp / f"r{r}.pt")))
                 for r in range(2)]
        for p in procs:
            p.start()
    for p in procs:
        p.join(120)
        if p.is_alive():
            p.kill()
            p.join()
    return [torch.load(tmp / f"r{r}.pt", weights_only=True) for r in range(2)]


def test_payloads_of_any_size_sum_in_rank_order(ranks) -> None:
    for k, n in enumerate(SIZES):
        want = _payload(n, 0, k) + _payload(n, 1, k)
        for r in range(2):
            assert torch.equal(ranks[r][f"sum{k}"], want), (r, n)
    caps = [ranks[0][f"cap{k}"] for k in range(len(SIZES))]
    assert caps == [2**16, 2**21, 2**16, 2**22, 2**16, 2**16]
    # every file's name goes once every rank has it open, and the folder with them: a rank killed now leaves
    # nothing behind
    assert ranks[0]["files"] is None and ranks[1]["files"] is None


def test_a_size_one_rank_cannot_hold_stays_on_the_backend_for_every_rank(ranks) -> None:
    assert [r["refused"] for r in ranks] == [None, None]
    assert [r["after-refusal"] for r in ranks] == [2**16, 2**16]


def test_close_removes_the_files_and_ranks_apart_keep_the_backend(ranks) -> None:
    assert [r["closed"] for r in ranks] == [True, True]
    assert [r["apart"] for r in ranks] == [True, True]


def test_a_silent_peer_is_named_after_the_timeout_and_ends_the_later_collectives(ranks) -> None:
    assert "peer rank 1 did not post collective 1 within 1 s" in ranks[0]["silent"]
    assert ranks[0]["after-silent"] == ranks[0]["silent"]


def test_ranks_with_different_thread_counts_keep_weighted_means_on_the_backend(ranks) -> None:
    assert [r["threads"] for r in ranks] == [(False, True), (False, True)]


def test_a_dead_peer_is_named_without_waiting_for_the_timeout(ranks) -> None:
    # (the timeout, 600 s, would have named no death: "did not post ... within 600 s")
    assert "peer rank 1 ended while rank 0 waited for it" in ranks[0]["dead"], ranks[0]
    assert ranks[0]["left"] is False


def test_sweep_keeps_a_live_group_and_a_new_one(tmp_path) -> None:
    import fcntl

    live, new, dead = tmp_path / "edgestream-1", tmp_path / "edgestream-2", tmp_path / "edgestream-3"
    for folder in (live, new, dead):
        folder.mkdir()
        (folder / "r0.lock").touch()
    fd = os.open(live / "r0.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        for folder in (live, dead):  # old: the folder and what is in it (a fresh file keeps a folder)
            for path in (*folder.iterdir(), folder):
                os.utime(path, (0, 0))
        assert shm_reduce.sweep(tmp_path) == [dead]
        assert live.exists() and new.exists() and not dead.exists()
    finally:
        os.close(fd)
