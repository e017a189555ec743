"""Feeding a trainer (issue 36 item 4): one `edgestream train` rank reading data already in Kafka vs a plain
PyTorch loop with the same model, batch and optimizer on device-resident data, side by side in one run,
plus where the trainer's remaining per-step time goes.

For each model (cnn-small on digits, resnet20 on synthetic 3x32x32; also mlp on digits, where the step is
almost all overhead) and batch size, the benchmark
produces every sample the run needs to Kafka first (so data is always there), then runs, alternating
which goes first, --rounds times each:

* **edgestream**: the trainer's own code path -- `edgestream.trainer.main.train`, what `edgestream train`
  calls -- in a child process with torchrun's environment for 1 rank (ddl, fixed batch, persist buffer,
  parameter digests on as `edgestream run` has them). The child times every request the worker makes
  (`TrainerPerformer.perform` by request kind), the step line's writing (`WorkerSession.sink`), the
  parameter digest and the evaluation offer at each step, and the dataset's `next_batch` by thread (the
  trainer's own, or the prefetch thread's: off the critical path). Timing adds ~1 us a request.
* **plain**: a child process with the run plan's model and optimizer (same initial weights, lr, momentum,
  weight decay), the training set normalised and resident on the device, batches sliced from it; per
  step `zero_grad / forward / backward / step / loss.item()`.

Both are timed from the end of step --warmup to the end of the last step (CUDA: the plain loop's loss.item()
syncs each step; the trainer reads its losses without waiting, so its device is drained at both marks). Ratio = edgestream steps/s / plain steps/s of a round, the median over the rounds
(target >= 0.9); "best / best" divides each side's best run. The profile table (of the best trainer run) shows
the trainer's per-step milliseconds by part; "driver + algorithm" is the rest of its step (the worker's
generator, the driver's bookkeeping), "step total" the measured wall per step, "plain" the plain loop's.

    python benchmarks/bench_trainer_feed.py [--models cnn-small,resnet20] [--batches 64,256] [--steps 200]
                                            [--warmup 20] [--rounds 2] [--device auto|cpu|cuda] [--threads T]
                                            [--quick]

EDGESTREAM_PREFETCH=0 in the environment turns the trainer's prefetch off (the before figure).
The profile table ends with the CPU each thread spent per timed step (Linux schedstat): the trainer's main
thread, the prefetch thread, the event log's flusher, the rest (librdkafka, torch); the plain loop's process.
EDGESTREAM_BENCH_CPROFILE=N adds the trainer main thread's top N functions under cProfile (us per step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
from bench_runtime_cost import _free_port  # noqa: E402
from common import bench_broker, record  # noqa: E402

RATE = 20000  # samples/s the producer streams ahead at (as fast as it goes)


def _config(path: Path, model: str, batch: int, steps: int) -> Path:
    import yaml

    data = ({"dataset": "digits"} if model in ("cnn-small", "mlp") else
            {"dataset": "synthetic", "shape": [3, 32, 32], "num_classes": 10, "n_train": 4096, "n_test": 64})
    path.write_text(yaml.safe_dump({
        "name": path.stem, "seed": 0, "data": data,
        "devices": {"count": 1, "rates": {"distribution": "constant", "rate": RATE}},
        "model": {"name": model}, "optim": {"lr": 0.05, "momentum": 0.9},
        "algorithm": {"name": "ddl", "buffer": "persist", "batch": {"policy": "fixed", "size": batch}},
        "stop": {"max_steps": steps, "max_time_s": 3600, "target_accuracy": None}, "eval": {"every_s": 100000},
        "runtime": {"reduction": "allreduce"},
    }))
    return path


def produce_ahead(bootstrap: str, cfg_path: Path, need: int) -> str:
    """Produce `need` samples of device 0 before anything starts; the run id."""
    return common.produce_ahead(bootstrap, cfg_path, [0], need, RATE, "f")


def _env(device: str, threads: int) -> dict:
    env = os.environ.copy()
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if device == "cpu":
        env["EDGESTREAM_DEVICE"] = "cpu"
    return env


def _child(args: list[str], env: dict, timeout_s: float) -> dict:
    p = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise SystemExit(f"{args[0]} failed (exit {p.returncode}): {p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- plain side
def plain_child(cfg_path: str, steps: int, warmup: int, device: str, threads: int) -> dict:
    import torch

    from edgestream.config import load_config
    from edgestream.runner.plan import RunPlan

    torch.set_num_threads(threads)
    dev = torch.device(device)
    plan = RunPlan.resolve(load_config(cfg_path))
    batch = plan.nominal_batch()
    ds = plan.dataset
    x = ds.normalize(torch.from_numpy(ds.x_train)).float()
    y = torch.from_numpy(ds.y_train).long()
    while len(x) < 2 * batch:
        x, y = torch.cat([x, x]), torch.cat([y, y])
    n = len(x)
    x, y = torch.cat([x, x[:batch]]).to(dev).contiguous(), torch.cat([y, y[:batch]]).to(dev)
    model = plan.build_model().to(dev).train()
    optimizer = plan.build_optimizer(model)
    task = plan.task
    pos, t_warm, c_warm = 0, 0.0, 0.0
    for k in range(steps):
        xb, yb = x[pos:pos + batch], y[pos:pos + batch]
        pos = (pos + batch) % n
        optimizer.zero_grad(set_to_none=True)
        loss = task.loss(model(xb), yb)
        loss.backward()
        optimizer.step()
        loss.item()
        if k == warmup - 1:
            t_warm, c_warm = time.perf_counter(), time.process_time()
    dt = time.perf_counter() - t_warm
    return {"steps_per_s": (steps - warmup) / dt, "ms_per_step": 1000 * dt / (steps - warmup), "device": str(dev),
            "cpu_ms_per_step": 1000 * (time.process_time() - c_warm) / (steps - warmup)}


# ---------------------------------------------------------------------------------------------- trainer side
def _thread_cpu_s() -> dict[str, float]:
    """CPU seconds of this process's threads by name (Linux schedstat: ns resolution), "process" their sum."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = defaultdict(float)
    for task in Path("/proc/self/task").iterdir():
        try:
            ns = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        tid = int(task.name)
        name = ("trainer main thread" if tid == threading.main_thread().native_id
                else "prefetch thread" if names.get(tid) == "edgestream-prefetch"
                else "event-log flusher" if "flush" in names.get(tid, "")
                else "other threads (librdkafka, torch, evaluation)")
        out[name] += ns / 1e9
        out["process (all threads)"] += ns / 1e9
    return out


def trainer_child(cfg_path: str, run_id: str, bootstrap: str, out: str, warmup: int) -> dict:
    """`train()` as `edgestream train` runs it, with per-part timers installed (see the module doc).
    EDGESTREAM_BENCH_CPROFILE=N: the main thread's timed steps under cProfile instead (its top N functions by
    own time, us per step; the timers are then inflated by the profiler: read it for where, not how much)."""
    import cProfile
    import pstats

    from edgestream.config import load_config
    from edgestream.consumers import KafkaStreamDataset
    from edgestream.runner.evaluate import BackgroundEvaluation
    from edgestream.runner.session import WorkerSession
    from edgestream.trainer import main as trainer_main
    from edgestream.trainer.performer import TrainerPerformer

    spent: dict[str, float] = defaultdict(float)
    marks: list[float] = []
    perf = time.perf_counter
    main_thread = threading.get_ident()

    tcpu = time.thread_time  # the calling thread's own CPU: wall minus it is waiting (GIL, data, device)
    spent_cpu: dict[str, float] = defaultdict(float)

    def timed(name, fn):
        def call(*a, **kw):
            t0, c0 = perf(), tcpu()
            try:
                return fn(*a, **kw)
            finally:
                if len(marks) >= warmup:
                    key = name(a) if callable(name) else name
                    spent[key] += perf() - t0
                    spent_cpu[key] += tcpu() - c0
        return call

    perform = TrainerPerformer.perform
    TrainerPerformer.perform = timed(lambda a: type(a[2]).__name__, perform)
    sink = WorkerSession.sink

    cfg = load_config(cfg_path)
    last = int(cfg.stop.max_steps)
    top = int(os.environ.get("EDGESTREAM_BENCH_CPROFILE", "0") or 0)
    prof = cProfile.Profile() if top else None
    cpu: dict[str, dict[str, float]] = {}

    import torch

    # a GPU trainer does not wait for its steps (lazy losses): the device is drained at the first and the last
    # timed mark, so the timed steps are the device's too (the plain loop waits at every step)
    drain = torch.cuda.synchronize if os.environ.get("EDGESTREAM_DEVICE") != "cpu" and torch.cuda.is_available() \
        else (lambda: None)

    def marked_sink(self, line):
        t0 = perf()
        sink(self, line)
        if len(marks) >= warmup:
            spent["step line (events write)"] += perf() - t0
        if len(marks) + 1 in (warmup, last):
            drain()
        marks.append(perf())
        if len(marks) == warmup:
            cpu["start"] = _thread_cpu_s()
            if prof is not None:
                prof.enable()
        elif len(marks) == last:
            if prof is not None:
                prof.disable()
            cpu["end"] = _thread_cpu_s()
    WorkerSession.sink = marked_sink
    next_batch = KafkaStreamDataset.next_batch
    KafkaStreamDataset.next_batch = timed(
        lambda a: "dataset.next_batch (in TakeBatch)" if threading.get_ident() == main_thread
        else "dataset.next_batch (prefetch thread)", next_batch)
    try:  # the hand-over from the prefetch thread (queue wait, stream wait), inside TakeBatch
        from edgestream.trainer.prefetch import PrefetchDataset
        PrefetchDataset.next_batch = timed("  of TakeBatch: the prefetch hand-over", PrefetchDataset.next_batch)
    except ImportError:
        pass
    if hasattr(trainer_main, "DigestTaker"):  # runs found once; taken at the Log, hashed by the flusher
        from edgestream.trainer.digest import DigestTaker
        DigestTaker.__call__ = timed("parameter digest (at Log)", DigestTaker.__call__)
    elif hasattr(trainer_main, "ParamDigest"):  # taken at the Log, hashed by the event log's flusher
        trainer_main.ParamDigest = timed("parameter digest (at Log)", trainer_main.ParamDigest)
    else:  # before: hashed at the Log
        trainer_main.param_digest = timed("parameter digest (at Log)", trainer_main.param_digest)
    BackgroundEvaluation.offer = timed("evaluation offer (at Log)", BackgroundEvaluation.offer)

    summary = trainer_main.train(cfg, run_id=run_id, bootstrap=bootstrap, out=out)
    timed_steps = len(marks) - warmup
    dt = marks[-1] - marks[warmup - 1]
    cpu_ms = ({k: 1000 * (v - cpu["start"].get(k, 0.0)) / timed_steps for k, v in cpu["end"].items()}
              if "end" in cpu else {})
    hot = []
    if prof is not None:
        stats = pstats.Stats(prof).stats
        rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
        hot = [(f"{Path(f).name}:{line}({fn})", round(1e6 * tt / timed_steps, 1), round(1e6 * ct / timed_steps, 1),
                round(nc / timed_steps, 2)) for (f, line, fn), (cc, nc, tt, ct, _) in rows]
    return {"steps_per_s": timed_steps / dt, "ms_per_step": 1000 * dt / timed_steps, "device": summary["device"],
            "parts_ms": {k: 1000 * v / timed_steps for k, v in spent.items()}, "steps": len(marks),
            "parts_cpu_ms": {k: 1000 * v / timed_steps for k, v in spent_cpu.items()},
            "cpu_ms": cpu_ms, "hot": hot}


# ---------------------------------------------------------------------------------------------- main
def _profile_rows(es: dict, plain_ms: float, plain_cpu: float | None = None) -> list[tuple[str, float]]:
    parts = dict(es["parts_ms"])
    inner = parts.pop("dataset.next_batch (in TakeBatch)", None)
    handover = parts.pop("  of TakeBatch: the prefetch hand-over", None)
    thread = parts.pop("dataset.next_batch (prefetch thread)", None)
    rows = [(k, v) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])]
    known = sum(parts.values())  # disjoint: requests, the Log hooks before the Log, the step line after it
    rows.append(("driver + algorithm (the rest)", es["ms_per_step"] - known))
    rows.append(("step total", es["ms_per_step"]))
    rows.append(("plain loop step", plain_ms))
    if inner is not None:
        rows.append(("  of TakeBatch: dataset.next_batch in the step", inner))
    if handover is not None:
        rows.append(("  of TakeBatch: the prefetch hand-over (queue, stream wait)", handover))
    if thread is not None:
        rows.append(("  off the step: dataset.next_batch in the prefetch thread", thread))
    for k, v in sorted(es.get("cpu_ms", {}).items()):  # CPU per step by thread (schedstat)
        rows.append((f"CPU: {k}", v))
    if plain_cpu is not None:
        rows.append(("CPU: plain loop process", plain_cpu))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="cnn-small,resnet20")
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--steps", type=int, default=200, help="steps per run, warm-up included")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="runs of each side per case (alternating first)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--threads", type=int, default=0, help="torch threads, both sides (default 1)")
    ap.add_argument("--quick", action="store_true", help="100 steps, 1 round (a check, not a figure)")
    ap.add_argument("--plain-child", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--trainer-child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plain_child:
        c, steps, warmup, device, threads = args.plain_child
        print(json.dumps(plain_child(c, int(steps), int(warmup), device, int(threads))))
        return
    if args.trainer_child:
        c, run_id, bootstrap, out, warmup = args.trainer_child
        print(json.dumps(trainer_child(c, run_id, bootstrap, out, int(warmup))))
        return
    if args.quick:
        args.steps, args.rounds = 100, 1
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    threads = args.threads or 1  # a loaded small box: more threads than cores slows both sides
    prefetch = os.environ.get("EDGESTREAM_PREFETCH", "default")
    rows = []
    t_bench = time.monotonic()
    with bench_broker() as (bootstrap, _broker), tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for model in args.models.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                cfg = _config(work / f"feed{model.replace('-', '')}{batch}.yaml", model, batch, args.steps)
                es_runs, plain_runs = [], []
                for r in range(args.rounds):
                    run_id = produce_ahead(bootstrap, cfg, (args.steps + 4) * batch)
                    env = _env(device, threads)
                    sides = [("es", ["--trainer-child", str(cfg), run_id, bootstrap, str(work / "runs"),
                                     str(args.warmup)]),
                             ("plain", ["--plain-child", str(cfg), str(args.steps), str(args.warmup),
                                        "cuda:0" if device == "cuda" else "cpu", str(threads)])]
                    for key, child_args in (sides if r % 2 == 0 else sides[::-1]):
                        (es_runs if key == "es" else plain_runs).append(_child(child_args, env, 900))
                    print(f"  {model} batch {batch} round {r + 1}: edgestream {es_runs[-1]['steps_per_s']:.1f} "
                          f"steps/s, plain {plain_runs[-1]['steps_per_s']:.1f} steps/s, ratio "
                          f"{es_runs[-1]['steps_per_s'] / plain_runs[-1]['steps_per_s']:.3f}", flush=True)
                es = max(es_runs, key=lambda e: e["steps_per_s"])  # the best run of each side
                plain = max(plain_runs, key=lambda e: e["steps_per_s"])
                paired = [e["steps_per_s"] / p["steps_per_s"] for e, p in zip(es_runs, plain_runs, strict=True)]
                rows.append({"model": model, "batch": batch, "device": es["device"],
                             "edgestream_steps_per_s": round(es["steps_per_s"], 2),
                             "plain_steps_per_s": round(plain["steps_per_s"], 2),
                             # the median of the rounds' ratios (each round runs both sides back to back)
                             "ratio": round(statistics.median(paired), 3),
                             "best_ratio": round(es["steps_per_s"] / plain["steps_per_s"], 3),
                             "round_ratios": [round(r, 3) for r in paired],
                             "profile_ms": [(k, round(v, 3)) for k, v in _profile_rows(es, plain["ms_per_step"],
                                                                                       plain.get("cpu_ms_per_step"))],
                             "parts_cpu_ms": {k: round(v, 3) for k, v in es.get("parts_cpu_ms", {}).items()},
                             "hot": es.get("hot", [])})
    wall = time.monotonic() - t_bench
    print(f"\n`python benchmarks/bench_trainer_feed.py {' '.join(sys.argv[1:])}`: device {device}, {args.steps} steps "
          f"per run ({args.warmup} warm-up), best of {args.rounds} round(s) per side, {threads} torch thread(s), "
          f"EDGESTREAM_PREFETCH={prefetch}; wall {wall:.0f} s\n")
    print("| model | batch | device | edgestream steps/s (best) | plain steps/s (best) | ratio, median of rounds "
          "(target >= 0.9) | best / best | per-round ratios |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | {r['device']} | {r['edgestream_steps_per_s']} | "
              f"{r['plain_steps_per_s']} | **{r['ratio']}** | {r['best_ratio']} | "
              f"{', '.join(map(str, r['round_ratios']))} |")
    names = [k for k, _ in rows[0]["profile_ms"]] if rows else []
    print("\nms per step (the trainer's timed steps; where its step goes):\n")
    print("| part | " + " | ".join(f"{r['model']} b{r['batch']}" for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for name in names:
        vals = [dict(r["profile_ms"]).get(name) for r in rows]
        print(f"| {name} | " + " | ".join("-" if v is None else f"{v:.2f}" for v in vals) + " |")
    if rows and rows[0].get("parts_cpu_ms"):
        print("\nCPU of the thread that ran each part, ms per step (the wall above minus this: waiting for the GIL, "
              "data or the device):\n")
        print("| part | " + " | ".join(f"{r['model']} b{r['batch']}" for r in rows) + " |")
        print("|---|" + "---|" * len(rows))
        for name in rows[0]["parts_cpu_ms"]:
            vals = [r["parts_cpu_ms"].get(name) for r in rows]
            print(f"| {name} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in vals) + " |")
    for r in rows:
        if r["hot"]:
            print(f"\n{r['model']} b{r['batch']}: the trainer's main thread under cProfile (us per step: own, "
                  "cumulative, calls; inflated by the profiler)\n")
            for name, own, cum, calls in r["hot"]:
                print(f"  {own:8.1f} {cum:8.1f} {calls:6.2f}  {name}")
    record("trainer_feed", {"rows": rows, "device": device, "steps": args.steps, "warmup": args.warmup,
                            "rounds": args.rounds, "threads": threads, "prefetch": prefetch, "wall_s": round(wall)})


if __name__ == "__main__":
    main()
