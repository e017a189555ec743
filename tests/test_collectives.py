"""The real torch.distributed collectives (`DistCollectives`, gloo) in spawned processes: nothing mocked.

One process group per world size (1, 2, 3) runs every case in turn; each rank saves what it got, and the
parent checks that all ranks got bit-for-bit the same tensors, and the same as `reduce_all` computed here
from every rank's inputs (AllReduce), or every rank's exact payload (AllGather). Inputs are seeded per
(case, rank), so the parent rebuilds them. Odd element counts in 2-byte and 4-byte dtypes are the cases a
weight carried inside the data buffer by a reinterpreting view cannot take.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp

import pytest
import torch

from edgestream.sync.reduction import reduce_all
from edgestream.sync.requests import AllGather, AllReduce

WORLDS = (1, 2, 3)
WEIGHTS = (0.1, 1 / 3, 2.5)  # per rank, for weighted_mean (0.1 and 1/3 are not exact in binary)
SHAPES = {  # with each list's total element count (odd counts break a float64 view of a 2- or 4-byte buffer tail)
    "vec3+5x7": [(3,), (5, 7)],  # 38
    "vec3+5x7+1": [(3,), (5, 7), (1,)],  # 39
    "1x6x6": [(1, 6, 6)],  # 36
    "1x3x3": [(1, 3, 3)],  # 9
    "4x4+2": [(4, 4), (2,)],  # 18
    "5+2": [(5,), (2,)],  # 7
    "scalar": [()],  # 1
}
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
MIXED = {  # (shape, dtype) per tensor
    "mixed-f32-first": [((3,), torch.float32), ((5, 7), torch.float64), ((1,), torch.float32)],
    "mixed-f64-first": [((2,), torch.float64), ((3, 3), torch.float32)],
    "mixed-f16-first": [((5,), torch.float16), ((2,), torch.float64), ((3,), torch.bfloat16)],
}
OPS = ("sum", "mean", "weighted_mean")  # mean: weighted_mean with every weight 1.0
MODES = ("run", "start")


def _reduce_cases() -> list[tuple[str, list[tuple[tuple[int, ...], torch.dtype]], str, str]]:
    specs = {f"{s}/{d}": [(shape, dt) for shape in shapes] for s, shapes in SHAPES.items()
             for d, dt in DTYPES.items()}
    specs.update(MIXED)
    cases = [(name, spec, op) for name, spec in specs.items() for op in OPS]
    # run and start alternate: each tensor list meets both, each op meets both (3 ops per list)
    return [(f"{name}/{op}/{MODES[k % 2]}", spec, op, MODES[k % 2]) for k, (name, spec, op) in enumerate(cases)]


REDUCE_CASES = _reduce_cases()
GATHER_SIZES = {  # top-k size per rank (rank 0, 1, 2); empty payloads included
    "topk": (5, 0, 3),
    "topk-all-empty": (0, 0, 0),
    "topk-one": (1, 4, 2),
}


def _seed(i: int, rank: int) -> torch.Generator:
    return torch.Generator().manual_seed(7919 * i + 104729 * rank + 1)


def _reduce_request(i: int, rank: int) -> AllReduce:
    _, spec, op, _ = REDUCE_CASES[i]
    g = _seed(i, rank)
    tensors = [torch.randn(shape, generator=g, dtype=torch.float64).to(dt) for shape, dt in spec]
    if op == "sum":
        return AllReduce(tensors, op="sum")
    return AllReduce(tensors, weight=WEIGHTS[rank] if op == "weighted_mean" else 1.0, op="weighted_mean")


def _gather_payload(i: int, name: str, rank: int) -> list[torch.Tensor]:
    k = GATHER_SIZES[name][rank]
    g = _seed(1000 + i, rank)
    indices = torch.randperm(50, generator=g)[:k].to(torch.int64)
    values = torch.randn(k, generator=g, dtype=torch.float32)
    block = torch.randn((k, 2), generator=g, dtype=torch.float64).to(torch.float16)  # 2-D, 2-byte dtype
    return [indices, values, block]


def _rank_main(rank: int, world: int, store: str, out: str) -> None:
    """One rank: every case in order (the same order on every rank), results saved to `out`."""
    import torch.distributed as dist

    from edgestream.trainer.collectives import DistCollectives

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    coll = DistCollectives(rank, world)
    results: dict[str, object] = {}

    def record(name: str, call) -> None:
        try:
            results[name] = call()
        except Exception as e:  # noqa: BLE001 - reported by the parent, per case
            results[name] = f"{type(e).__name__}: {e}"

    try:
        for i, (name, _, _, mode) in enumerate(REDUCE_CASES):
            req = _reduce_request(i, rank)
            record(name, (lambda r=req: coll.run(r)) if mode == "run" else (lambda r=req: coll.start(r).get()))
        for i, name in enumerate(GATHER_SIZES):
            req = AllGather(_gather_payload(i, name, rank))
            record(f"gather/{name}/run", lambda r=req: coll.run(r))
            record(f"gather/{name}/start", lambda r=req: coll.start(r).get())
        # two collectives in flight at once, completed in the reverse order
        ar, ag = _reduce_request(1, rank), AllGather(_gather_payload(0, "topk", rank))
        first, second = coll.start(ar), coll.start(ag)
        record("overlap/gather", second.get)
        record("overlap/reduce", first.get)
    finally:
        torch.save(results, out)
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> dict[int, list[dict] | str]:
    """Runs one process group per world size over every case, all groups at once (starting a rank,
    mostly importing torch, is what costs). Returns per world its ranks' results, or what went wrong."""
    tmp = tmp_path_factory.mktemp("collectives")
    ctx = mp.get_context("spawn")
    procs: dict[int, list] = {}
    with pytest.MonkeyPatch.context() as mpatch:
        mpatch.setenv("OMP_NUM_THREADS", "1")  # inherited by the spawned ranks
        for world in WORLDS:
            procs[world] = [ctx.Process(target=_rank_main, args=(r, world, str(tmp / f"store{world}"),
                                                                 str(tmp / f"world{world}-rank{r}.pt")))
                            for r in range(world)]
            for p in procs[world]:
                p.start()
    out: dict[int, list[dict] | str] = {}
    for world, ps in procs.items():
        for p in ps:
            p.join(180)
            if p.is_alive():
                p.kill()
                p.join()
        codes = [p.exitcode for p in ps]
        out[world] = ([torch.load(tmp / f"world{world}-rank{r}.pt", weights_only=True) for r in range(world)]
                      if codes == [0] * world else f"rank exit codes {codes}")
    return out


def _results(groups: dict, world: int) -> list[dict]:
    results = groups[world]
    assert not isinstance(results, str), f"world {world}: {results}"
    return results


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
                                    for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("world", WORLDS)
def test_all_reduce_equals_reduce_all_on_every_rank(groups, world: int) -> None:
    results = _results(groups, world)
    cases = [(name, i) for i, (name, *_) in enumerate(REDUCE_CASES)] + [("overlap/reduce", 1)]
    bad = []
    for name, i in cases:
        got = [res[name] for res in results]
        if errors := [g for g in got if isinstance(g, str)]:
            bad.append(f"{name}: {errors[0]}")
            continue
        want = reduce_all([_reduce_request(i, r) for r in range(world)])
        if not all(_same(g, want) for g in got):
            bad.append(f"{name}: differs from reduce_all")
    assert not bad, f"{len(bad)} of {len(cases)} all-reduce cases failed (world {world}):\n" + "\n".join(bad)


@pytest.mark.parametrize("world", WORLDS)
def test_all_gather_returns_every_ranks_exact_payload(groups, world: int) -> None:
    results = _results(groups, world)
    cases = [(f"gather/{n}/{m}", i, n) for i, n in enumerate(GATHER_SIZES) for m in MODES]
    bad = []
    for name, i, size_name in cases + [("overlap/gather", 0, "topk")]:
        want = [_gather_payload(i, size_name, r) for r in range(world)]
        for rank, res in enumerate(results):
            got = res[name]
            if isinstance(got, str):
                bad.append(f"{name} rank {rank}: {got}")
            elif len(got) != world or not all(_same(g, w) for g, w in zip(got, want, strict=True)):
                bad.append(f"{name} rank {rank}: payloads differ")
    assert not bad, f"all-gather (world {world}):\n" + "\n".join(bad)
