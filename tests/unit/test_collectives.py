"""The real torch.distributed collectives (`DistCollectives`, gloo) in spawned processes: nothing mocked.

Four ranks are spawned once (world 4); worlds 2 and 3 are subgroups of ranks [0, 1] and [0, 1, 2], and
world 1 runs on rank 0 alone (no transfer), so four processes cover worlds 1 to 4. Each world runs
every all-reduce case in three collectives: `runtime.reduction: exact`, the default bucketed
`allreduce` (25 MiB buckets: one per dtype run here) and `allreduce` with 100-byte buckets (many
buckets per request, tensors crossing bucket boundaries). Each rank saves what it got; the parent
checks that

* exact: every rank got bit-for-bit `reduce_all` of every rank's inputs (rebuilt here: inputs are
  seeded per (case, rank));
* allreduce: every rank got bit-for-bit the same tensors as every other rank (an all-reduce's result
  is the same everywhere), of the dtypes and shapes `reduce_all` gives, allclose to it (rtol 1e-5 for
  float32; the absolute tolerance is a rounding bound on the terms summed), equal for integers, and
  bitwise `reduce_all` at world 1;
* no collective changed its inputs; AllGather returned every rank's exact payload.

Cases: odd element counts (a weight carried inside a 2- or 4-byte data buffer by a reinterpreting view
cannot take them), 0-d and 0-element tensors, an empty list, non-contiguous tensors (transposed, strided),
mixed dtypes, integers, many small tensors, seeded random lists; ops sum, mean (weighted_mean with
weight 1) and weighted_mean with per-rank weights (one with a zero weight, one with all zero: an error).
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import random

import pytest
import torch

from edgestream.config import ConfigError, validate_dict
from edgestream.sync.reduction import reduce_all
from edgestream.sync.requests import AllGather, AllReduce
from edgestream.trainer.collectives import DistCollectives, _buckets

WORLDS = (1, 2, 3, 4)
NPROCS = max(WORLDS)
WEIGHTS = (0.1, 1 / 3, 2.5, 1.7)  # per rank, for weighted_mean (0.1 and 1/3 are not exact in binary)
ZERO_FIRST = (0.0, 0.7, 1 / 3, 2.0)  # rank 0 contributes nothing (an empty batch)
TINY_BUCKET_MB = 64 / 2**20  # 64 bytes: 16 float32, 8 float64, 32 float16 per bucket
REDUCERS = {"exact": {"reduction": "exact"}, "allreduce": {}, "allreduce-tiny": {"bucket_mb": TINY_BUCKET_MB},
            "shared-memory": {"shared_memory": True}}

f32, f64, f16, bf16, i64 = torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64
SHAPES = {  # with each list's total element count (odd counts break a float64 view of a 2- or 4-byte buffer tail)
    "vec3+5x7": [(3,), (5, 7)],  # 38
    "vec3+5x7+1": [(3,), (5, 7), (1,)],  # 39
    "1x6x6": [(1, 6, 6)],  # 36
    "1x3x3": [(1, 3, 3)],  # 9
    "4x4+2": [(4, 4), (2,)],  # 18
    "5+2": [(5,), (2,)],  # 7
    "scalar": [()],  # 1
}
DTYPES = {"f32": f32, "f64": f64, "f16": f16, "bf16": bf16}
SMALL = [(1,), (2,), (3,), (5,), (7,), (2, 2), ()]
MIXED = {  # (shape, dtype[, layout]) per tensor; layout "t": a transposed view, "s": every other element
    "mixed-f32-first": [((3,), f32), ((5, 7), f64), ((1,), f32)],
    "mixed-f64-first": [((2,), f64), ((3, 3), f32)],
    "mixed-f16-first": [((5,), f16), ((2,), f64), ((3,), bf16)],
    "noncontig-f32": [((4, 6), f32, "t"), ((7,), f32, "s"), ((3, 5), f32, "s"), ((), f32)],
    "noncontig-mixed": [((2, 3, 5), f64, "t"), ((5,), bf16, "s"), ((3, 3), f16, "t"), ((9,), f32, "s")],
    "zero-numel": [((0,), f32), ((3, 0), f32), ((2,), f32), ((0, 4), f64)],
    "only-zero-numel": [((0,), f32)],
    "no-tensors": [],
    "many-small-f32": [(SMALL[k % len(SMALL)], f32) for k in range(40)],
    "many-small-mixed": [(SMALL[k % len(SMALL)], (f32, f32, f64, bf16, f32)[k // 3 % 5]) for k in range(30)],
    "large+small": [((3000,), f32), ((3,), f32), ((1001,), f64)],
    "int64": [((5,), i64), ((3, 3), i64)],
    "int64+f32": [((3,), f32), ((4,), i64), ((2,), f32)],
}


def _random_specs(n: int, seed: int = 20240611) -> dict[str, list[tuple]]:
    """Seeded random tensor lists (the same in the parent and in every rank)."""
    rng = random.Random(seed)
    specs = {}
    for k in range(n):
        spec = []
        for _ in range(rng.randint(1, 12)):
            shape = tuple(rng.randint(0 if rng.random() < 0.1 else 1, 9) for _ in range(rng.randint(0, 3)))
            dt = rng.choice((f32, f32, f64, f16, bf16))
            layout = rng.choice(("c", "t")) if len(shape) >= 2 else rng.choice(("c", "s")) if shape else "c"
            spec.append((shape, dt, layout))
        specs[f"random{k}"] = spec
    return specs


OPS = ("sum", "mean", "weighted_mean")  # mean: weighted_mean with every weight 1.0
MODES = ("run", "start")


def _reduce_cases() -> list[tuple[str, list[tuple], str, str]]:
    specs = {f"{s}/{d}": [(shape, dt) for shape in shapes] for s, shapes in SHAPES.items()
             for d, dt in DTYPES.items()}
    specs.update(MIXED)
    specs.update(_random_specs(8))
    cases = [(name, spec, op) for name, spec in specs.items() for op in OPS]
    cases += [(name, specs[name], op) for name in ("vec3+5x7+1/f32", "many-small-mixed", "noncontig-mixed")
              for op in ("zero-first", "all-zero")]
    # run and start alternate: each tensor list meets both, each op meets both (3 ops per list)
    return [(f"{name}/{op}/{MODES[k % 2]}", spec, op, MODES[k % 2]) for k, (name, spec, op) in enumerate(cases)]


REDUCE_CASES = _reduce_cases()
GATHER_SIZES = {  # top-k size per rank (rank 0, 1, 2, 3); empty payloads included
    "topk": (5, 0, 3, 2),
    "topk-all-empty": (0, 0, 0, 0),
    "topk-one": (1, 4, 2, 0),
}


def _seed(i: int, rank: int) -> torch.Generator:
    return torch.Generator().manual_seed(7919 * i + 104729 * rank + 1)


def _tensor(shape: tuple[int, ...], dt: torch.dtype, layout: str, g: torch.Generator) -> torch.Tensor:
    """A tensor of `shape`: contiguous ("c"), a transposed view ("t") or every other element ("s")."""
    assert layout == "c" or len(shape) >= (2 if layout == "t" else 1), (shape, layout)
    if layout == "t":
        base_shape = (*shape[:-2], shape[-1], shape[-2])
    elif layout == "s":
        base_shape = (*shape[:-1], 2 * shape[-1])
    else:
        base_shape = shape
    if dt.is_floating_point:
        base = torch.randn(base_shape, generator=g, dtype=torch.float64).to(dt)
    else:
        base = torch.randint(-50, 50, base_shape, generator=g, dtype=dt)
    t = base.transpose(-1, -2) if layout == "t" else base[..., ::2] if layout == "s" else base
    assert t.shape == shape
    return t


def _reduce_request(i: int, rank: int) -> AllReduce:
    _, spec, op, _ = REDUCE_CASES[i]
    g = _seed(i, rank)
    tensors = [_tensor(s[0], s[1], s[2] if len(s) > 2 else "c", g) for s in spec]
    if op == "sum":
        return AllReduce(tensors, op="sum")
    weight = {"mean": 1.0, "weighted_mean": WEIGHTS[rank], "zero-first": ZERO_FIRST[rank], "all-zero": 0.0}[op]
    return AllReduce(tensors, weight=weight, op="weighted_mean")


def _gather_payload(i: int, name: str, rank: int) -> list[torch.Tensor]:
    k = GATHER_SIZES[name][rank]
    g = _seed(1000 + i, rank)
    indices = torch.randperm(50, generator=g)[:k].to(torch.int64)
    values = torch.randn(k, generator=g, dtype=torch.float32)
    block = torch.randn((k, 2), generator=g, dtype=torch.float64).to(torch.float16)  # 2-D, 2-byte dtype
    return [indices, values, block]


def _runs(reducer: str, i: int) -> bool:
    """Whether case i runs in `reducer`: "allreduce-tiny" only where its buckets differ from the default's
    (elsewhere it would send the very same collectives)."""
    if reducer != "allreduce-tiny":
        return True
    ts = _reduce_request(i, 0).tensors
    return _buckets(ts, int(TINY_BUCKET_MB * 2**20)) != _buckets(ts, 25 * 2**20)


def _run_world(rank: int, world: int, group, results: dict[str, object]) -> None:
    """Every case of one world on this rank, in the same order on every rank of the group."""
    colls = {name: DistCollectives(rank, world, group, **kw) for name, kw in REDUCERS.items()}

    def record(name: str, call) -> None:
        try:
            results[name] = call()
        except Exception as e:  # noqa: BLE001 - reported by the parent, per case
            results[name] = f"{type(e).__name__}: {e}"

    for i, (name, _, _, mode) in enumerate(REDUCE_CASES):
        for red, coll in colls.items():
            if not _runs(red, i):
                continue
            req = _reduce_request(i, rank)
            record(f"{red}/{name}", (lambda c=coll, r=req: c.run(r)) if mode == "run"
                   else (lambda c=coll, r=req: c.start(r).get()))
            fresh = _reduce_request(i, rank).tensors
            results[f"{red}/{name}/inputs-kept"] = all(  # the collective left its inputs as they were
                a.stride() == b.stride() and torch.equal(a, b) for a, b in zip(req.tensors, fresh, strict=True))
    exact = colls["exact"]
    for i, name in enumerate(GATHER_SIZES):
        req = AllGather(_gather_payload(i, name, rank))
        record(f"gather/{name}/run", lambda r=req: exact.run(r))
        record(f"gather/{name}/start", lambda r=req: exact.start(r).get())
    # collectives in flight at once, completed in the reverse order
    for red, coll in colls.items():
        ar, ag = _reduce_request(1, rank), AllGather(_gather_payload(0, "topk", rank))
        first, second = coll.start(ar), coll.start(ag)
        record(f"{red}/overlap/gather", second.get)
        record(f"{red}/overlap/reduce", first.get)
        many = [coll.start(_reduce_request(i, rank)) for i in (0, 2, 4)]
        for i, pending in reversed(list(zip((0, 2, 4), many, strict=True))):
            record(f"{red}/overlap/reduce{i}", pending.get)
    results["shared-memory/transport"] = colls["shared-memory"].transport()
    if torch.cuda.is_available() and world > 1:  # ranks sharing one GPU over gloo: CUDA tensors through memory
        shm = colls["shared-memory"]
        for i, (name, _, _, _) in enumerate(REDUCE_CASES):
            if _one_float_dtype(i):
                req = _reduce_request(i, rank)
                on_gpu = AllReduce([t.to("cuda:0") for t in req.tensors], weight=req.weight, op=req.op)
                record(f"shared-memory-cuda/{name}", lambda r=on_gpu: [t.cpu() for t in shm.run(r)])
    colls["shared-memory"].close()


def _rank_main(rank: int, store: str, out: str) -> None:
    """One rank of the world-4 group: worlds 1 (rank 0 only), 2 and 3 (subgroups) and 4, results to `out`."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=NPROCS,
                            timeout=datetime.timedelta(seconds=60))
    # every rank creates every subgroup, in the same order (torch.distributed's rule)
    groups = {w: dist.new_group(list(range(w))) if w < NPROCS else None for w in WORLDS if w > 1}
    results: dict[int, dict[str, object]] = {}
    try:
        for world in WORLDS:
            if rank < world:
                results[world] = {}
                _run_world(rank, world, groups.get(world), results[world])
    finally:
        torch.save(results, out)
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> dict[int, list[dict] | str]:
    """Runs the four ranks (starting a rank, mostly importing torch, is what costs). Returns per world
    its ranks' results, or what went wrong."""
    tmp = tmp_path_factory.mktemp("collectives")
    ctx = mp.get_context("spawn")
    with pytest.MonkeyPatch.context() as mpatch:
        mpatch.setenv("OMP_NUM_THREADS", "1")  # inherited by the spawned ranks
        procs = [ctx.Process(target=_rank_main, args=(r, str(tmp / "store"), str(tmp / f"rank{r}.pt")))
                 for r in range(NPROCS)]
        for p in procs:
            p.start()
    for p in procs:
        p.join(240)
        if p.is_alive():
            p.kill()
            p.join()
    codes = [p.exitcode for p in procs]
    if codes != [0] * NPROCS:
        return {w: f"rank exit codes {codes}" for w in WORLDS}
    per_rank = [torch.load(tmp / f"rank{r}.pt", weights_only=True) for r in range(NPROCS)]
    return {w: [per_rank[r][w] for r in range(w)] for w in WORLDS}


def _results(groups: dict, world: int) -> list[dict]:
    results = groups[world]
    assert not isinstance(results, str), f"world {world}: {results}"
    return results


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
                                    for x, y in zip(a, b, strict=True))


def _close(got: list[torch.Tensor], want: list[torch.Tensor], reqs: list[AllReduce]) -> str | None:
    """Why `got` is not close to `want` (None: it is). rtol 1e-5 for float32 (1e-12 float64, 1e-2 float16,
    2e-2 bfloat16); the absolute tolerance bounds the rounding of both sums: world (world + 2) eps times
    the largest term |w_i t_i| (/ sum_i w_i for weighted_mean). Integer sums must be equal."""
    if len(got) != len(want):
        return f"{len(got)} tensors, want {len(want)}"
    world = len(reqs)
    weighted = reqs[0].op == "weighted_mean"
    total = sum(r.weight for r in reqs) if weighted else 1.0
    for j, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"tensor {j}: {g.dtype} {tuple(g.shape)}, want {w.dtype} {tuple(w.shape)}"
        if not g.is_floating_point():
            if not torch.equal(g, w):
                return f"tensor {j}: integers differ"
            continue
        terms = [r.tensors[j].double().abs() * (r.weight if weighted else 1.0) for r in reqs]
        scale = max((float(t.max()) for t in terms if t.numel()), default=0.0) / total
        rtol = {f64: 1e-12, f32: 1e-5, f16: 1e-2, bf16: 2e-2}[g.dtype]
        atol = world * (world + 2) * torch.finfo(g.dtype).eps * scale + 1e-300
        if not torch.allclose(g.double(), w.double(), rtol=rtol, atol=atol):
            err = float((g.double() - w.double()).abs().max())
            return f"tensor {j} ({g.dtype}): max |diff| {err:.3g} (rtol {rtol}, atol {atol:.3g})"
    return None


def _reduce_names(reducer: str) -> list[tuple[str, int]]:
    """The all-reduce results a reducer saved: (name, case index)."""
    return ([(name, i) for i, (name, *_) in enumerate(REDUCE_CASES) if _runs(reducer, i)]
            + [("overlap/reduce", 1)] + [(f"overlap/reduce{i}", i) for i in (0, 2, 4)])


def _want(reqs: list[AllReduce]) -> list[torch.Tensor]:
    """reduce_all of the ranks' tensors as the exact path receives them, contiguous (reduce_all's own
    rounding depends on its inputs' layout, e.g. for float16 and bfloat16). An empty list: empty."""
    contiguous = [AllReduce([t.contiguous() for t in r.tensors], weight=r.weight, op=r.op) for r in reqs]
    return reduce_all(contiguous) if reqs[0].tensors else []


def _wants_error(i: int, world: int) -> bool:
    """Whether case i must fail: a weighted_mean whose weights add up to 0 in this world."""
    reqs = [_reduce_request(i, r) for r in range(world)]
    return bool(reqs[0].tensors) and reqs[0].op == "weighted_mean" and sum(r.weight for r in reqs) <= 0


def _check_errors(name: str, got: list, want_error: bool, bad: list[str]) -> bool:
    """Records a problem if the ranks' errors are not as expected; True when the case is settled."""
    errors = [g for g in got if isinstance(g, str)]
    if want_error:
        if len(errors) != len(got) or not all("total weight <= 0" in e for e in errors):
            bad.append(f"{name}: want the total-weight error on every rank, got {got if errors else 'results'}")
        return True
    if errors:
        bad.append(f"{name}: {errors[0]}")
        return True
    return False


def _not_reduce_all(results: list[dict], reducer: str, cases: list[tuple[str, int]], world: int) -> list[str]:
    """The cases where some rank's result of `reducer` is not bit for bit `reduce_all` (or not the error)."""
    bad: list[str] = []
    for name, i in cases:
        got = [res[f"{reducer}/{name}"] for res in results]
        if _check_errors(name, got, _wants_error(i, world), bad):
            continue
        want = _want([_reduce_request(i, r) for r in range(world)])
        if not all(_same(g, want) for g in got):
            bad.append(f"{name}: differs from reduce_all")
    return bad


@pytest.mark.parametrize("world", WORLDS)
def test_exact_all_reduce_equals_reduce_all_on_every_rank(groups, world: int) -> None:
    results = _results(groups, world)
    cases = _reduce_names("exact")
    bad = _not_reduce_all(results, "exact", cases, world)
    assert not bad, f"{len(bad)} of {len(cases)} exact all-reduce cases failed (world {world}):\n" + "\n".join(bad)


@pytest.mark.parametrize("reducer", ["allreduce", "allreduce-tiny", "shared-memory"])
@pytest.mark.parametrize("world", WORLDS)
def test_all_reduce_is_bitwise_identical_on_every_rank_and_close_to_exact(groups, world: int,
                                                                          reducer: str) -> None:
    results = _results(groups, world)
    cases = _reduce_names(reducer)
    bad: list[str] = []
    for name, i in cases:
        got = [res[f"{reducer}/{name}"] for res in results]
        if _check_errors(name, got, _wants_error(i, world), bad):
            continue
        if not all(_same(g, got[0]) for g in got[1:]):
            bad.append(f"{name}: the ranks' results differ")
            continue
        reqs = [_reduce_request(i, r) for r in range(world)]
        want = _want(reqs)
        if world == 1:  # nothing travels: the same arithmetic as the exact path
            if not _same(got[0], want):
                bad.append(f"{name}: world 1 differs from reduce_all")
        elif (why := _close(got[0], want, reqs)) is not None:
            bad.append(f"{name}: {why}")
    assert not bad, f"{len(bad)} of {len(cases)} {reducer} cases failed (world {world}):\n" + "\n".join(bad)


def _one_float_dtype(i: int) -> bool:
    """Whether case i's tensors are of one floating dtype (what the shared-memory all-reduce takes)."""
    ts = _reduce_request(i, 0).tensors
    return bool(ts) and ts[0].dtype.is_floating_point and all(t.dtype == ts[0].dtype for t in ts)


@pytest.mark.parametrize("world", WORLDS[1:])
def test_shared_memory_all_reduce_is_the_rank_order_sum_bit_for_bit(groups, world: int) -> None:
    """Ranks of one host meet in shared memory (`runtime.shared_memory`), and every request of one floating
    dtype gets bit for bit what `reduce_all` computes in rank order -- the exact mode's result, without its
    all-gather; the other requests (mixed dtypes, integers) went through gloo (the test above)."""
    results = _results(groups, world)
    assert [res["shared-memory/transport"] for res in results] == ["shared memory"] * world
    cases = [(name, i) for name, i in _reduce_names("shared-memory") if _one_float_dtype(i)]
    assert len(cases) > 100
    bad = _not_reduce_all(results, "shared-memory", cases, world)
    assert not bad, f"{len(bad)} of {len(cases)} shared-memory cases failed (world {world}):\n" + "\n".join(bad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("world", WORLDS[1:])
def test_ranks_sharing_a_gpu_reduce_its_tensors_through_shared_memory_bit_for_bit(groups, world: int) -> None:
    """Ranks sharing one GPU over gloo (issue 36): their CUDA tensors are joined on the GPU, cross in one copy, and
    the result is still `reduce_all`'s in rank order, back on the GPU."""
    results = _results(groups, world)
    cases = [(name, i) for i, (name, *_) in enumerate(REDUCE_CASES) if _one_float_dtype(i)]
    assert len(cases) > 100
    bad = _not_reduce_all(results, "shared-memory-cuda", cases, world)
    assert not bad, f"{len(bad)} of {len(cases)} shared-memory CUDA cases failed (world {world}):\n" + "\n".join(bad)


@pytest.mark.parametrize("world", WORLDS)
def test_no_all_reduce_changes_its_inputs(groups, world: int) -> None:
    results = _results(groups, world)
    bad = [f"rank {r}: {key}" for r, res in enumerate(results) for key, kept in res.items()
           if key.endswith("/inputs-kept") and kept is not True]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("world", WORLDS)
def test_all_gather_returns_every_ranks_exact_payload(groups, world: int) -> None:
    results = _results(groups, world)
    cases = [(f"gather/{n}/{m}", i, n) for i, n in enumerate(GATHER_SIZES) for m in MODES]
    cases += [(f"{red}/overlap/gather", 0, "topk") for red in REDUCERS]
    bad = []
    for name, i, size_name in cases:
        want = [_gather_payload(i, size_name, r) for r in range(world)]
        for rank, res in enumerate(results):
            got = res[name]
            if isinstance(got, str):
                bad.append(f"{name} rank {rank}: {got}")
            elif len(got) != world or not all(_same(g, w) for g, w in zip(got, want, strict=True)):
                bad.append(f"{name} rank {rank}: payloads differ")
    assert not bad, f"all-gather (world {world}):\n" + "\n".join(bad)


# ---------------------------------------------------------------------- no processes needed
def test_the_non_contiguous_cases_are_non_contiguous() -> None:
    for i, (name, spec, _, _) in enumerate(REDUCE_CASES):
        if name.startswith("noncontig"):
            ts = _reduce_request(i, 0).tensors
            assert [t.is_contiguous() for t in ts] == [len(s) < 3 for s in spec], name


def test_the_tiny_buckets_split_many_cases() -> None:
    tiny = [name for i, (name, *_) in enumerate(REDUCE_CASES) if _runs("allreduce-tiny", i)]
    assert len(tiny) >= 50 and {"many-small-f32/sum/run", "many-small-mixed/weighted_mean/start",
                                "noncontig-f32/mean/run", "large+small/sum/run"} <= set(tiny)


def test_buckets_are_consecutive_single_dtype_and_at_most_the_cap() -> None:
    ts = [torch.zeros(3), torch.zeros(4), torch.zeros(2), torch.zeros(30), torch.zeros(1),  # float32: 4 bytes
          torch.zeros(2, dtype=f64), torch.zeros(1, dtype=f64), torch.zeros(0), torch.zeros(())]
    assert _buckets(ts, 40) == [[0, 1, 2], [3], [4], [5, 6], [7, 8]]  # 36 B; 120 B alone; dtype runs split
    assert _buckets(ts, 2**30) == [[0, 1, 2, 3, 4], [5, 6], [7, 8]]
    assert _buckets(ts, 1) == [[k] for k in range(9)]
    assert _buckets([], 40) == []


def test_reduction_is_checked_where_the_collectives_are_made() -> None:
    with pytest.raises(ValueError, match="reduction must be one of allreduce, exact"):
        DistCollectives(0, 2, reduction="ring")  # type: ignore[arg-type]
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="bucket_mb must be a finite number > 0"):
            DistCollectives(0, 2, bucket_mb=bad)
    assert DistCollectives(0, 2).bucket_bytes == 25 * 2**20 and DistCollectives(0, 2).reduction == "allreduce"


def test_runtime_reduction_and_bucket_mb_in_the_config() -> None:
    runtime = validate_dict({}).runtime
    assert (runtime.reduction, runtime.bucket_mb) == ("allreduce", 25.0)
    assert runtime.shared_memory is True
    runtime = validate_dict({"runtime": {"reduction": "exact", "bucket_mb": 0.5, "shared_memory": False}}).runtime
    assert (runtime.reduction, runtime.bucket_mb, runtime.shared_memory) == ("exact", 0.5, False)
    for raw, line in [
        ({"shared_memory": "yes"}, "runtime.shared_memory: 'yes' is not allowed; input should be a valid boolean"),
        ({"reduction": "ring"}, "runtime.reduction: ring is not allowed; must be one of 'allreduce' or 'exact'"),
        ({"bucket_mb": 0}, "runtime.bucket_mb: 0 is not allowed; must be > 0"),
        ({"bucket_mb": -2.5}, "runtime.bucket_mb: -2.5 is not allowed; must be > 0"),
        ({"bucket_mb": True}, "runtime.bucket_mb: true is not allowed; must be a number"),
        ({"bucket_mb": float("inf")}, "runtime.bucket_mb: .inf is not allowed"),
    ]:
        with pytest.raises(ConfigError) as info:
            validate_dict({"runtime": raw})
        assert len(info.value.problems) == 1 and info.value.problems[0].startswith(line), info.value.problems
