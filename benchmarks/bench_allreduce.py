"""The trainers' all-reduce on one host: gloo's ring vs shared memory (`runtime.shared_memory`), side by side.

W processes (one torch thread each) form a gloo group, as trainer ranks on one host do, and run
`DistCollectives` all-reduces of the same gradient lists through three paths, alternating in rounds so all
see the same load: `allreduce` on gloo (DDP's path: `torch.distributed.all_reduce`), `allreduce` through
shared memory (edgestream.trainer.shm_reduce, the default for co-located ranks), and `exact` (gloo
all-gather + rank-order sum). Gradient lists: cnn-small's on digits (9 tensors, 101 KiB), resnet20's (65
tensors, 1.1 MiB), and one 16 MiB tensor. Per path and list: the median time of a blocking all-reduce (rank
0's clock, medians over rounds of `--calls` calls), and shared memory's ratio to gloo. The shared-memory
result is checked bit for bit against the exact one.

    python benchmarks/bench_allreduce.py [--world 2] [--rounds 10] [--calls 100]
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import record  # noqa: E402

PATHS = {"gloo": {}, "shared memory": {"shared_memory": True}, "exact (gloo all-gather)": {"reduction": "exact"}}


def _lists() -> dict[str, list[tuple[int, ...]]]:
    from edgestream.models.registry import build_model

    cnn = build_model("cnn-small", (1, 8, 8), 10)
    resnet = build_model("resnet20", (3, 32, 32), 10)
    return {"cnn-small (101 KiB)": [tuple(p.shape) for p in cnn.parameters()],
            "resnet20 (1.1 MiB)": [tuple(p.shape) for p in resnet.parameters()],
            "one 16 MiB tensor": [(4 * 2**20,)]}


def _rank(rank: int, world: int, store: str, rounds: int, calls: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from edgestream.sync.requests import AllReduce
    from edgestream.trainer.collectives import DistCollectives

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    colls = {name: DistCollectives(rank, world, **kw) for name, kw in PATHS.items()}
    results: dict = {}
    for lname, shapes in _lists().items():
        g = torch.Generator().manual_seed(rank)
        req = AllReduce([torch.randn(s, generator=g) for s in shapes], op="sum")
        got = {name: c.run(req) for name, c in colls.items()}
        same = all(torch.equal(a, b) for a, b in zip(got["shared memory"], got["exact (gloo all-gather)"],
                                                      strict=True))
        n = calls if "16 MiB" not in lname else max(5, calls // 20)
        times: dict[str, list[float]] = {name: [] for name in colls}
        for _ in range(rounds):
            for name, c in colls.items():
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(n):
                    c.run(req)
                times[name].append((time.perf_counter() - t0) / n)
        results[lname] = {"us": {k: round(1e6 * statistics.median(v), 1) for k, v in times.items()},
                          "range_us": {k: [round(1e6 * min(v), 1), round(1e6 * max(v), 1)] for k, v in times.items()},
                          "bitwise_exact": same, "transport": colls["shared memory"].transport()}
    colls["shared memory"].close()
    if rank == 0:
        torch.save(results, out)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=100, help="all-reduces per round (the 16 MiB list: 1/20)")
    args = ap.parse_args()
    import torch

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("spawn")
        out = str(Path(tmp) / "out.pt")
        procs = [ctx.Process(target=_rank, args=(r, args.world, str(Path(tmp) / "store"), args.rounds, args.calls,
                                                 out)) for r in range(args.world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            raise SystemExit(f"a rank failed: exit codes {[p.exitcode for p in procs]}")
        results = torch.load(out, weights_only=True)
    wall = time.monotonic() - t0
    print(f"\n`python benchmarks/bench_allreduce.py --world {args.world} --rounds {args.rounds} --calls {args.calls}`: "
          f"{args.world} processes, gloo group, medians over rounds; wall {wall:.0f} s\n")
    print("| gradients | gloo all_reduce (us) | shared memory (us) | exact: gloo all-gather + sum (us) | "
          "**gloo / shared memory** | shared memory = exact bit for bit |")
    print("|---|---|---|---|---|---|")
    for lname, r in results.items():
        us = r["us"]
        print(f"| {lname} | {us['gloo']} | {us['shared memory']} | {us['exact (gloo all-gather)']} | "
              f"**{us['gloo'] / us['shared memory']:.1f}x** | {r['bitwise_exact']} |")
    record("allreduce", {"world": args.world, "rounds": args.rounds, "calls": args.calls, "wall_s": round(wall, 1),
                         "results": results, "command": " ".join(sys.argv)})


if __name__ == "__main__":
    main()
