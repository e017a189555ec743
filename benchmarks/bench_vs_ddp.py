"""edgestream's real runtime side by side with plain PyTorch DistributedDataParallel (issue 18 item 3).

Both sides train the same model from the same initial weights with the same SGD (the run plan's
`build_optimizer`: lr, momentum, weight decay, foreach), the same per-rank batch, the same world size
and backend (gloo), one process per rank, torch threads set equally (OMP_NUM_THREADS and
torch.set_num_threads; default 1 per rank, since world x threads would otherwise exceed this machine's
cores):

* **DDP**: `torch.nn.parallel.DistributedDataParallel` (defaults: 25 MiB buckets), the rank's shard of the
  dataset already in memory as normalised float32 tensors, batches sliced from it; per step
  `zero_grad / forward / backward / step / loss.item()`.
* **edgestream**: `edgestream train` processes (ddl, dense, fixed batch, persist buffer,
  `runtime.reduction: allreduce`, no parameter digests), reading streams that were produced to Kafka
  before the trainers started, so data is always there (compute-bound; the step lines' `wait_s` says
  how much of a step still waited for the stream). The ranks share this host, so their all-reduce goes
  through shared memory (`runtime.shared_memory`, the default; edgestream.trainer.shm_reduce) while the
  process group is gloo; --no-shared-memory puts it on gloo, as DDP's is.

**Interleaved, so both sides see the same load.** Both process groups are started together; each runs
its first --warmup steps (start-up, first steps) and is then paused (SIGSTOP to its processes). Then
the sides take turns, --repeats rounds (the side going first alternates): a side is resumed (SIGCONT),
runs --steps / --repeats steps and is paused again. Each side is timed on its own per-step timestamps
(edgestream: the step lines' `time`; DDP: monotonic time after each step): within a turn, from the end of
the first step that finished after the resume to the end of the last one, so no paused time and no
start-up is counted on either side. Rate = steps / seconds summed over the turns, of the slowest rank;
ratio = edgestream / DDP. The turns are found afterwards from the step times alone (`Side.segment`: a
gap longer than half the other side's shortest turn is a pause), since edgestream's step lines reach the
file up to 0.25 s after the step (a live EventLog's flusher); the per-round ratios printed while running
count the lines on file at each pause and read low where lines were still buffered. The table's spread:
the slowest and fastest timed run of turns of the slowest rank.

    python benchmarks/bench_vs_ddp.py [--worlds 1,2,3,4] [--steps N] [--model cnn-small[,resnet20]]
                                      [--repeats R] [--warmup K] [--threads T] [--profile] [--request-cpu] [--plot PNG]
                                      [--live-rate R]

End to end (--live-rate R): only the warm-up's samples are produced ahead; an `edgestream produce` process
streams every device at R samples/s from before the warm-up to the end, through both sides' turns (both pay
its CPU; DDP still reads memory), so edgestream trains on data as it arrives (its `wait_s` says how long
a step waited for it; R must exceed what a rank consumes, steps/s x 64).

Models: cnn-small on digits (1x8x8); resnet20 (and any other zoo model) on synthetic 3x32x32 data.
--profile runs the edgestream trainers' loop under cProfile (and times forward + backward, wall and
thread CPU, on both sides); it slows the trainers, so its ratios are not the benchmark's.
--request-cpu splits each side's main-thread CPU per rank-step by what it did, from thread clocks read
around each part (a few reads a step, so its ratios stand): edgestream's request kinds (Compute, the
AllReduce, Apply, TakeBatch, ...), the algorithm's own code between them, the step line and the driver;
DDP's forward + backward (its all-reduce inside), optimizer step and the rest; and the rest of each
process's CPU (its other threads: gloo's, and edgestream's prefetch, Kafka client and line writer).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
from bench_runtime_cost import _free_port  # noqa: E402
from common import bench_broker, record  # noqa: E402

BATCH = 64
RATE = 20000  # samples/s per device while producing ahead (the producer goes as fast as it can)
LR, MOMENTUM = 0.05, 0.9
TURN_TIMEOUT_S = 6.0  # a turn ends after this long even if its steps are not done (Kafka sessions: 10 s)


# ---------------------------------------------------------------------------------------------- config
def _data(model: str) -> dict:
    if model == "cnn-small":
        return {"dataset": "digits"}
    return {"dataset": "synthetic", "shape": [3, 32, 32], "num_classes": 10, "n_train": 2048, "n_test": 64}


def _config(path: Path, model: str, world: int, steps: int, rate: float = RATE, shared_memory: bool = True) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({
        "name": path.stem, "seed": 0, "data": _data(model),
        "devices": {"count": world, "rates": {"distribution": "constant", "rate": rate}},
        "model": {"name": model}, "optim": {"lr": LR, "momentum": MOMENTUM},
        "algorithm": {"name": "ddl", "buffer": "persist", "batch": {"policy": "fixed", "size": BATCH}},
        "stop": {"max_steps": steps, "max_time_s": 3600, "target_accuracy": None}, "eval": {"every_s": 100000},
        "runtime": {"reduction": "allreduce", "shared_memory": shared_memory},
    }))
    return path


def _env(rank: int, world: int, port: int, threads: int) -> dict:
    env = os.environ.copy()
    env.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               LOCAL_RANK="0", OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               EDGESTREAM_DEVICE="cpu", EDGESTREAM_BACKEND="gloo")
    return env


# ---------------------------------------------------------------------------------------------- --request-cpu
class CpuTally:
    """Main-thread CPU seconds per category of a rank's steps (thread CPU: what waiting for a peer, a pause
    or a core does not add), written to `path` as JSON every 20 steps (the bench kills the ranks)."""

    def __init__(self, path: str) -> None:
        self.path, self.totals, self.steps = path, {}, 0

    def add(self, parts: dict[str, float]) -> None:
        for k, v in parts.items():
            self.totals[k] = self.totals.get(k, 0.0) + v
        self.steps += 1
        if self.steps % 20 == 0:
            Path(self.path).write_text(json.dumps({"steps": self.steps, "totals": self.totals}))


# ---------------------------------------------------------------------------------------------- DDP side
def ddp_worker(cfg_path: str, progress: str, steps: int, threads: int, profile: bool, request_cpu: bool = False,
               warmup: int = 0) -> None:
    """One DDP rank (a subprocess with torchrun's environment); appends each step's end time to `progress`.
    request_cpu: the main thread's CPU per phase of a step after `warmup` steps, in `progress`.cpu.json."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from edgestream.config import load_config
    from edgestream.runner.plan import RunPlan

    torch.set_num_threads(threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    plan = RunPlan.resolve(load_config(cfg_path))
    ds = plan.dataset
    idx = plan.shards[rank]
    x = ds.normalize(torch.from_numpy(ds.x_train[idx])).float().contiguous()
    y = torch.from_numpy(ds.y_train[idx]).long()
    while len(x) < 2 * BATCH:  # a shard shorter than a batch: repeat it
        x, y = torch.cat([x, x]), torch.cat([y, y])
    n = len(x)
    x, y = torch.cat([x, x[:BATCH]]), torch.cat([y, y[:BATCH]])  # batches are views, wrapping around
    model = plan.build_model().train()  # the same initial weights as the trainers'
    optimizer = plan.build_optimizer(model)  # the same SGD (lr, momentum, weight decay, foreach)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    ddp = DDP(model)
    compute: list[tuple[float, float]] = []
    pos = 0
    cpu = CpuTally(progress + ".cpu.json")
    with open(progress, "w", buffering=1) as out:
        for step in range(steps):
            xb, yb = x[pos:pos + BATCH], y[pos:pos + BATCH]
            pos = (pos + BATCH) % n
            t0, c0 = time.perf_counter(), time.thread_time()
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(xb), yb)
            loss.backward()  # DDP's bucketed all-reduce runs in gloo's threads meanwhile and is waited for here
            c1 = time.thread_time()
            if profile:
                compute.append((time.perf_counter() - t0, c1 - c0))
            optimizer.step()
            c2 = time.thread_time()
            loss.item()
            out.write(f"{time.monotonic()}\n")
            if request_cpu and step >= warmup:
                cpu.add({"zero_grad + forward + backward + all-reduce": c1 - c0, "optimizer step": c2 - c1,
                         "loss.item + progress line": time.thread_time() - c2})
            if profile and len(compute) % 10 == 0:  # the bench kills the ranks at the end: write as we go
                Path(progress + ".compute.json").write_text(json.dumps(compute))
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------- a side
class Side:
    """One side's process group and its per-rank step-end times, read from files as they grow."""

    def __init__(self, name: str, procs: list[subprocess.Popen], files: list[Path], parse) -> None:
        self.name, self.procs, self.files, self.parse = name, procs, files, parse
        self.times: list[list[float]] = [[] for _ in files]
        self.lines: list[list[dict]] = [[] for _ in files]
        self._pos = [0] * len(files)
        self._tail = [b""] * len(files)
        self.turns: list[list[tuple[int, int]]] = [[] for _ in files]  # per rank and turn: steps k0..k1 timed
        self.cpu_s = self.broker_cpu_s = 0.0  # CPU seconds its processes (and the broker) used in its turns
        self.turn_steps = 0                   # steps all ranks ran in its turns (partial ones included)
        self.turn_walls: list[float] = []     # wall seconds of each of its turns (resume to pause)

    def refresh(self) -> int:
        """Read what the ranks wrote since the last call; the completed steps of the slowest rank."""
        for r, path in enumerate(self.files):
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(self._pos[r])
                data = f.read()
            self._pos[r] += len(data)
            *complete, self._tail[r] = (self._tail[r] + data).split(b"\n")
            for raw in complete:
                if raw:
                    t, line = self.parse(raw)
                    if t is not None:
                        self.times[r].append(t)
                        if line is not None:
                            self.lines[r].append(line)
        return min(len(t) for t in self.times)

    def check(self) -> None:
        for p in self.procs:
            if p.poll() not in (None, 0):
                raise SystemExit(f"{self.name} process failed (exit {p.returncode}): {p.stderr.read()[-3000:]}")

    def signal(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, sig)
        if sig == signal.SIGSTOP:  # wait until every process is really stopped before reading its files
            deadline = time.monotonic() + 2.0
            for p in self.procs:
                while p.poll() is None and _state(p.pid) not in ("T", "t", "Z", "X") and time.monotonic() < deadline:
                    time.sleep(0.001)

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
        for p in self.procs:
            p.wait()

    def rate(self) -> tuple[float, int]:
        """(steps/s, timed steps) over all turns, of the slowest rank: the steps that ended after k0's end up
        to k1's end, over the seconds between those two ends, summed over the turns."""
        per_rank = [(sum(k1 - k0 for k0, k1 in tr) / sum(t[k1] - t[k0] for k0, k1 in tr), sum(k1 - k0 for k0, k1 in tr))
                    for t, tr in zip(self.times, self.turns, strict=True)]
        return min(per_rank)

    def spread(self) -> tuple[float, float]:
        """(min, max) steps/s of one timed run of turns (a segment), over the segments of the slowest rank."""
        rates = [[(k1 - k0) / (t[k1] - t[k0]) for k0, k1 in tr if k1 - k0 >= 5]
                 for t, tr in zip(self.times, self.turns, strict=True)]
        slowest = min((r for r in rates if r), key=lambda r: sum(r) / len(r), default=[float("nan")])
        return min(slowest), max(slowest)

    def segment(self, pause_s: float, warmup: int) -> None:
        """Re-derive the timed steps from the step times alone, once every line is read: a turn's steps are a
        run of steps whose gaps are shorter than `pause_s` (half the other side's shortest turn: the shortest
        time this side was paused between two turns), timed from the end of its first step (the one that
        straddles the pause) to its last; nothing before the end of warm-up step `warmup` is timed.
        Needed because edgestream's step lines reach the file up to LIVE_FLUSH_S (0.25 s) late: counting
        lines at a pause undercounts the steps done, and a turn timed from such a count includes the pause."""
        for r, t in enumerate(self.times):
            cuts = [k for k in range(1, len(t)) if t[k] - t[k - 1] >= pause_s]
            bounds = [warmup] + [k for k in cuts if k > warmup] + [len(t)]
            self.turns[r] = [(k0, k1 - 1) for k0, k1 in zip(bounds, bounds[1:], strict=False) if k1 - 1 > k0]

    def timed_lines(self) -> list[dict]:
        """The step lines of the timed steps (edgestream), all ranks."""
        return [lines[k] for lines, tr in zip(self.lines, self.turns, strict=True) for k0, k1 in tr
                for k in range(k0 + 1, k1 + 1)]


_LAST_TICKS: dict[int, int] = {}  # each process's CPU ticks when last read (an exited one keeps its last figure)


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds used so far by the processes `pids` (all their threads); a process that has
    exited counts what it had used when last read, so a turn it ended in never goes negative."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            _LAST_TICKS[pid] = int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
        total += _LAST_TICKS.get(pid, 0)
    return total / os.sysconf("SC_CLK_TCK")


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def _ddp_line(raw: bytes) -> tuple[float, None]:
    return float(raw), None


def _es_line(raw: bytes) -> tuple[float | None, dict | None]:
    e = json.loads(raw)
    return (e["time"], e) if e.get("kind") == "step" else (None, None)


def start_ddp(cfg_path: Path, world: int, steps: int, threads: int, work: Path, profile: bool,
              request_cpu: bool = False, warmup: int = 0) -> Side:
    port = _free_port()
    files = [work / f"ddp-{cfg_path.stem}-{r}.txt" for r in range(world)]
    procs = [subprocess.Popen([sys.executable, __file__, "--ddp-worker", str(cfg_path), str(files[r]), str(steps),
                               str(threads)] + (["--profile"] if profile else [])
                              + (["--request-cpu", "--warmup", str(warmup)] if request_cpu else []),
                              env=_env(r, world, port, threads), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    return Side("DDP", procs, files, _ddp_line)


def produce_ahead(bootstrap: str, cfg_path: Path, world: int, steps: int, rate: float = RATE) -> str:
    """Produce every sample `steps` steps need on every device, before the trainers start; the run id."""
    return common.produce_ahead(bootstrap, cfg_path, list(range(world)), steps * BATCH + 2 * BATCH, rate, "v")


def start_producer(bootstrap: str, cfg_path: Path, run_id: str, work: Path) -> subprocess.Popen:
    """--live: `edgestream produce` streaming every device at the config's rate, for the whole comparison
    (never paused: both sides' turns run beside it, so both pay its CPU); it continues where the topics end."""
    return subprocess.Popen([sys.executable, "-m", "edgestream.cli", "produce", str(cfg_path), "--run-id", run_id,
                             "--bootstrap", bootstrap, "--report-every", "0"],
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=open(work / f"producer-{run_id}.log", "w"))


def start_edgestream(bootstrap: str, cfg_path: Path, run_id: str, world: int, threads: int, work: Path,
                     profile: bool, request_cpu: bool = False, warmup: int = 0) -> Side:
    port = _free_port()
    procs = []
    for r in range(world):
        pre = ([sys.executable, __file__, "--profiled-trainer", str(work / f"prof-{run_id}-{r}.pstats")] if profile
               else [sys.executable, __file__, "--request-cpu-trainer", str(work / f"cpu-{run_id}-{r}.json"),
                     str(warmup)] if request_cpu
               else [sys.executable, "-m", "edgestream.cli"])
        procs.append(subprocess.Popen(pre + ["train", str(cfg_path), "--run-id", run_id, "--bootstrap", bootstrap,
                                             "--out", str(work / "runs"), "--no-digest"],
                                      env=_env(r, world, port, threads), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    ranks = work / "runs" / _run_name(cfg_path, run_id) / "ranks"
    return Side("edgestream", procs, [ranks / f"{r}.jsonl" for r in range(world)], _es_line)


def _run_name(cfg_path: Path, run_id: str) -> str:
    """The trainers' run name (their directory and topics): the plan's `<name>-<algorithm>-<run id>`."""
    from edgestream.config import load_config
    from edgestream.runner.plan import RunPlan

    return RunPlan.resolve(load_config(cfg_path)).run_name(run_id)


# ---------------------------------------------------------------------------------------------- the turns
def _until(side: Side, steps: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while side.refresh() < steps and time.monotonic() < deadline:
        side.check()
        if all(p.poll() is not None for p in side.procs):
            return
        time.sleep(0.003)


def turn(side: Side, steps: int, broker_pid: int | None) -> float:
    """Resume `side`, let it run `steps` more steps, pause it; note each rank's steps and seconds that lie
    wholly inside the turn (from the end of its first step finished after the resume to its last), and
    the CPU its processes and the broker used."""
    before = [len(t) for t in side.times]
    pids = [p.pid for p in side.procs]
    cpu0, broker0 = _cpu_s(pids), _cpu_s([broker_pid] if broker_pid else [])
    side.signal(signal.SIGCONT)
    t_resume = time.monotonic()
    _until(side, min(before) + steps + 1, TURN_TIMEOUT_S)
    side.signal(signal.SIGSTOP)
    side.turn_walls.append(time.monotonic() - t_resume)
    side.cpu_s += _cpu_s(pids) - cpu0
    side.broker_cpu_s += _cpu_s([broker_pid] if broker_pid else []) - broker0
    side.refresh()
    side.turn_steps += sum(len(t) - b for t, b in zip(side.times, before, strict=True))
    rates = []
    for r, t in enumerate(side.times):
        k0, k1 = before[r], len(t) - 1  # the end of step k0 is the first one after the resume
        if k1 > k0:
            side.turns[r].append((k0, k1))
            rates.append((k1 - k0) / (t[k1] - t[k0]))
    return min(rates) if len(rates) == len(side.times) else 0.0  # this turn's rate, of the slowest rank


def compare(bootstrap: str, broker_pid: int | None, model: str, world: int, args: argparse.Namespace,
            work: Path) -> dict:
    chunk = max(2, -(-args.steps // args.repeats))
    # what either side could run at most: a turn ends once `chunk` more steps are on file, and edgestream's step
    # lines reach the file up to 0.25 s after their steps (~60 more steps a turn at 250 steps/s)
    cap = args.warmup + args.repeats * (2 * chunk + 120) + 50
    live = args.live_rate is not None
    cfg_path = _config(work / f"vsddp{world}{model.replace('-', '')}{'live' if live else ''}.yaml", model, world, cap,
                       args.live_rate if live else RATE, shared_memory=not args.no_shared_memory)
    # before anything is started or timed: every sample (--live: the warm-up's, the producer streams the rest)
    run_id = produce_ahead(bootstrap, cfg_path, world, args.warmup + 4 if live else cap,
                           args.live_rate if live else RATE)
    producer = start_producer(bootstrap, cfg_path, run_id, work) if live else None
    sides = {"ddp": start_ddp(cfg_path, world, cap, args.threads, work, args.profile, args.request_cpu, args.warmup),
             "es": start_edgestream(bootstrap, cfg_path, run_id, world, args.threads, work, args.profile,
                                    args.request_cpu, args.warmup)}
    rounds = []
    t0 = time.monotonic()
    try:
        # start-up and warm-up, both groups at once; each is paused once it has done --warmup steps
        waiting = dict(sides)
        deadline = time.monotonic() + 300
        while waiting and time.monotonic() < deadline:
            for key, side in list(waiting.items()):
                side.check()
                if side.refresh() >= args.warmup:
                    side.signal(signal.SIGSTOP)
                    del waiting[key]
            time.sleep(0.01)
        if waiting:
            raise SystemExit(f"{', '.join(s.name for s in waiting.values())} did not reach {args.warmup} steps "
                             "in 300 s")
        for s in sides.values():
            s.refresh()
        t_warm = time.monotonic() - t0
        for i in range(args.repeats):
            rates = {}
            for key in (("ddp", "es") if i % 2 == 0 else ("es", "ddp")):
                rates[key] = turn(sides[key], chunk, broker_pid)
            rounds.append(rates["es"] / rates["ddp"] if rates["ddp"] else float("nan"))
            print(f"  {model} world {world} round {i}: DDP {rates['ddp']:.1f} steps/s, edgestream "
                  f"{rates['es']:.1f} steps/s, ratio {rounds[-1]:.3f} (online: lines on file at the pauses)", flush=True)
    finally:
        for s in sides.values():
            s.kill()
        if producer is not None:
            producer.kill()
            producer.wait()
    t_turns = time.monotonic() - t0 - t_warm
    for s in sides.values():
        s.refresh()  # the lines written since the last pause (edgestream's buffered ones)
    sides["ddp"].segment(0.5 * min(sides["es"].turn_walls), args.warmup)
    sides["es"].segment(0.5 * min(sides["ddp"].turn_walls), args.warmup)
    ddp, ddp_steps = sides["ddp"].rate()
    es, es_steps = sides["es"].rate()
    timed = sides["es"].timed_lines()
    split = {k: round(sum(e[k] for e in timed) / len(timed) * es, 3) for k in ("wait_s", "compute_s", "comm_s")}
    cpu_split = None
    if args.request_cpu:
        cpu_ms = {k: 1000 * s.cpu_s / max(1, s.turn_steps) for k, s in sides.items()}
        files = {"DDP": [Path(str(f) + ".cpu.json") for f in sides["ddp"].files],
                 "edgestream": [work / f"cpu-{run_id}-{r}.json" for r in range(world)]}
        _print_request_cpu(files, {"DDP": cpu_ms["ddp"], "edgestream": cpu_ms["es"]})
        cpu_split = {side: [json.loads(p.read_text()) for p in paths if p.exists()] for side, paths in files.items()}
    if args.profile:
        _print_compute("DDP", [json.loads(Path(str(f) + ".compute.json").read_text())[args.warmup:]
                               for f in sides["ddp"].files if Path(str(f) + ".compute.json").exists()])
        _print_profile(work, run_id, world, args.warmup)
    return {"world": world, "model": model, "batch": BATCH, "live_rate": args.live_rate, "ddp_steps_per_s": round(ddp, 2),
            "edgestream_steps_per_s": round(es, 2), "ratio": round(es / ddp, 3),
            "round_ratios_online": [round(r, 3) for r in rounds],
            "segment_rates": {k: [round(x, 1) for x in s.spread()] for k, s in sides.items()}, "timed_steps": {"ddp": ddp_steps, "edgestream": es_steps},
            "edgestream_split": split,
            # CPU per step of one rank (the group's CPU in its turns / steps all ranks ran), and the broker's
            "cpu_ms_per_rank_step": {k: round(1000 * s.cpu_s / max(1, s.turn_steps), 2) for k, s in sides.items()},
            "broker_cpu_ms_per_step": {k: round(1000 * s.broker_cpu_s / max(1, s.turn_steps / world), 2)
                                       for k, s in sides.items()},
            "startup_warmup_s": round(t_warm, 1), "turns_s": round(t_turns, 1), "request_cpu": cpu_split}


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="1,2,3,4")
    ap.add_argument("--steps", type=int, default=240, help="timed steps per side (split over the rounds)")
    ap.add_argument("--warmup", type=int, default=20, help="steps each side runs before the timed turns")
    ap.add_argument("--model", default="cnn-small", help="comma list: cnn-small (digits), resnet20 (synthetic)")
    ap.add_argument("--repeats", type=int, default=8, help="rounds: one DDP turn and one edgestream turn each")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank, both sides")
    ap.add_argument("--live-rate", type=float, default=None, metavar="SAMPLES_PER_S",
                    help="end to end: edgestream's streams are produced while the sides run (an `edgestream "
                         "produce` process at this rate per device, running through both sides' turns) instead of "
                         "ahead")
    ap.add_argument("--no-shared-memory", action="store_true",
                    help="edgestream's all-reduce through gloo like DDP's (runtime.shared_memory: false) instead of "
                         "through shared memory (the default for ranks on one host)")
    ap.add_argument("--profile", action="store_true", help="cProfile the edgestream trainers (slows them)")
    ap.add_argument("--request-cpu", action="store_true",
                    help="also split each side's main-thread CPU per step by what it did (request kinds, the "
                         "algorithm's own code, the step line; DDP's phases); a few thread-clock reads a step")
    ap.add_argument("--plot", metavar="PNG", help="also plot step time vs world size, both sides, per model")
    ap.add_argument("--ddp-worker", nargs=4, metavar=("CONFIG", "PROGRESS", "STEPS", "THREADS"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--profiled-trainer", metavar="OUT", help=argparse.SUPPRESS)
    ap.add_argument("--request-cpu-trainer", nargs=2, metavar=("OUT", "WARMUP"), help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.profiled_trainer:
        profiled_trainer(args.profiled_trainer, rest)
        return
    if args.request_cpu_trainer:
        request_cpu_trainer(args.request_cpu_trainer[0], int(args.request_cpu_trainer[1]), rest)
        return
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.ddp_worker:
        cfg, progress, steps, threads = args.ddp_worker
        ddp_worker(cfg, progress, int(steps), int(threads), args.profile, args.request_cpu, args.warmup)
        return

    rows = []
    t_bench = time.monotonic()
    with bench_broker() as (bootstrap, broker), tempfile.TemporaryDirectory() as tmp:
        broker_pid = getattr(broker, "pid", None)  # our managed broker's (None: EDGESTREAM_BOOTSTRAP's)
        for model in args.model.split(","):
            for world in (int(w) for w in args.worlds.split(",")):
                rows.append(compare(bootstrap, broker_pid, model, world, args, Path(tmp)))
                r = rows[-1]
                print(f"  -> ratio {r['ratio']}; CPU ms per rank-step DDP / edgestream "
                      f"{r['cpu_ms_per_rank_step']['ddp']} / {r['cpu_ms_per_rank_step']['es']}, broker CPU ms per "
                      f"step in DDP / edgestream turns {r['broker_cpu_ms_per_step']['ddp']} / "
                      f"{r['broker_cpu_ms_per_step']['es']}; start-up + warm-up {r['startup_warmup_s']} s, turns "
                      f"{r['turns_s']} s", flush=True)
    wall = time.monotonic() - t_bench
    print(f"\n`{' '.join(['python', 'benchmarks/bench_vs_ddp.py'] + sys.argv[1:])}`: {args.repeats} rounds of "
          f"alternating turns of ~{max(2, -(-args.steps // args.repeats))} steps per side after {args.warmup} "
          f"warm-up steps; {args.threads} torch thread(s) per rank; gloo; "
          f"{f'producer running at {args.live_rate:g} samples/s per device; ' if args.live_rate else ''}"
          f"edgestream's all-reduce through {'gloo' if args.no_shared_memory else 'shared memory'}; "
          f"wall {wall:.0f} s\n")
    print("| world | model | batch | DDP steps/s | edgestream steps/s | ratio (target >= 1.0) | turn rates min-max DDP / edgestream "
          "| timed steps DDP / edgestream | CPU ms per rank-step DDP / edgestream (+ broker) | "
          "edgestream wait / compute / comm |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s, sr = r["edgestream_split"], r["segment_rates"]
        print(f"| {r['world']} | {r['model']} | {r['batch']} | {r['ddp_steps_per_s']} | {r['edgestream_steps_per_s']} "
              f"| **{r['ratio']}** | {sr['ddp'][0]:.0f}-{sr['ddp'][1]:.0f} / {sr['es'][0]:.0f}-{sr['es'][1]:.0f} | {r['timed_steps']['ddp']} / "
              f"{r['timed_steps']['edgestream']} | {r['cpu_ms_per_rank_step']['ddp']} / "
              f"{r['cpu_ms_per_rank_step']['es']} (+ {r['broker_cpu_ms_per_step']['es'] / r['world']:.2f}) | "
              f"{s['wait_s']:.0%} / {s['compute_s']:.0%} / {s['comm_s']:.0%} |")
    if args.plot:
        plot(rows, args.plot)
    record("vs_ddp", {"rows": rows, "steps": args.steps, "warmup_steps": args.warmup, "rounds": args.repeats,
                      "threads_per_rank": args.threads, "backend": "gloo", "lr": LR, "momentum": MOMENTUM,
                      "profile": args.profile, "wall_s": round(wall, 1), "command": " ".join(sys.argv),
                      "shared_memory": not args.no_shared_memory,
                      "target": ">= 1.0 (edgestream steps/s over DDP steps/s, dense DDL)"})


def plot(rows: list[dict], path: str) -> None:
    """Step time (ms, slowest rank) vs world size of both sides, one panel per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        mine = sorted((r for r in rows if r["model"] == model), key=lambda r: r["world"])
        worlds = [r["world"] for r in mine]
        for key, label, style in (("ddp_steps_per_s", "PyTorch DDP (data in memory)", "o-"),
                                  ("edgestream_steps_per_s", "edgestream (Kafka streams)", "s-")):
            ax.plot(worlds, [1000.0 / r[key] for r in mine], style, label=label)
        for r in mine:
            ax.annotate(f"{r['ratio']:.2f}", (r["world"], 1000.0 / r["edgestream_steps_per_s"]),
                        textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8)
        ax.set_xticks(worlds)
        ax.set_xlabel("world size (trainer processes, gloo)")
        ax.set_ylabel("step time, slowest rank (ms)")
        ax.set_title(f"{model}, batch {mine[0]['batch']} per rank (labels: edgestream / DDP)")
        top = max(1000.0 / min(r["ddp_steps_per_s"], r["edgestream_steps_per_s"]) for r in mine)
        ax.set_ylim(0, top * 1.15)  # room for the ratio labels
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


# ---------------------------------------------------------------------------------------------- --profile
def profiled_trainer(out: str, argv: list[str]) -> None:
    """`edgestream train ARGV` with cProfile on around the worker's loop only (not imports or start-up), and
    each Compute's wall and thread-CPU seconds noted."""
    import cProfile

    from edgestream.cli import main as cli_main
    from edgestream.runner.session import WorkerSession
    from edgestream.trainer.performer import TrainerPerformer

    run_blocking, compute = WorkerSession.run_blocking, TrainerPerformer.do_compute
    timings: list[tuple[float, float]] = []
    prof = cProfile.Profile(time.thread_time)  # CPU time of the main thread: what load on the machine does not change

    def timed_compute(self: TrainerPerformer, rank: int, req: object) -> object:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return compute(self, rank, req)
        finally:
            timings.append((time.perf_counter() - t0, time.thread_time() - c0))
            if len(timings) % 10 == 0:  # the bench kills the trainers: write as we go
                prof.dump_stats(out)  # (which disables the profiler)
                prof.enable()
                Path(out + ".compute.json").write_text(json.dumps(timings))

    def profiled(self: WorkerSession) -> object:
        prof.enable()
        try:
            return run_blocking(self)
        finally:
            prof.disable()

    WorkerSession.run_blocking = profiled  # type: ignore[method-assign]
    TrainerPerformer.do_compute = timed_compute  # type: ignore[method-assign]
    cli_main(argv)


def request_cpu_trainer(out: str, warmup: int, argv: list[str]) -> None:
    """`edgestream train ARGV` with its main thread's CPU per step split by what it did: each request kind
    the worker yields (performed by the trainer), the worker's own code between requests (the algorithm,
    sync/), the step line (built and handed to the event log), the hooks at each Log; after `warmup` steps."""
    from edgestream.cli import main as cli_main
    from edgestream.runner import session as session_mod
    from edgestream.sync.requests import Log
    from edgestream.trainer.performer import TrainerPerformer

    tally, clock = CpuTally(out), time.thread_time
    step: dict[str, float] = {}
    state = {"steps": 0, "start": None}
    perform, sink, drive = TrainerPerformer.perform, session_mod.WorkerSession.sink, session_mod.drive

    def note(key: str, dt: float) -> None:
        step[key] = step.get(key, 0.0) + dt

    def timed_perform(self: TrainerPerformer, rank: int, req: object) -> object:
        c0 = clock()
        try:
            return perform(self, rank, req)
        finally:
            note(type(req).__name__, clock() - c0)

    def timed_sink(self: object, line: dict) -> None:
        c0 = clock()
        sink(self, line)
        now = clock()
        note("step line", now - c0)
        if state["start"] is not None and state["steps"] >= warmup:
            total = now - state["start"]
            tally.add({**step, "other (driver)": total - sum(step.values()), "step": total})
        state["steps"] += 1
        state["start"] = now
        step.clear()

    class Timed:  # the worker's own code: the time inside its generator's send
        def __init__(self, program: object) -> None:
            self.program = program

        def send(self, value: object) -> object:
            c0 = clock()
            try:
                return self.program.send(value)
            finally:
                note("algorithm (sync/)", clock() - c0)

    def timed_drive(rank, program, performer, sink, meters=None, on_request=None, profile=None):  # noqa: ANN001, ANN202
        def hooks(r: int, req: object) -> None:
            c0 = clock()
            on_request(r, req)
            note("Log hooks" if isinstance(req, Log) else "request hooks", clock() - c0)

        return drive(rank, Timed(program), performer, sink, meters,
                     on_request=hooks if on_request is not None else None, profile=profile)

    TrainerPerformer.perform = timed_perform  # type: ignore[method-assign]
    session_mod.WorkerSession.sink = timed_sink  # type: ignore[method-assign]
    session_mod.drive = timed_drive
    cli_main(argv)


def _print_request_cpu(files: dict[str, list[Path]], total_ms: dict[str, float]) -> None:
    """Per rank-step main-thread CPU by category, both sides (mean over ranks), and the other threads'."""
    for side, paths in files.items():
        tallies = [json.loads(p.read_text()) for p in paths if p.exists()]
        if not tallies:
            continue
        keys = sorted({k for t in tallies for k in t["totals"]}, key=lambda k: -sum(t["totals"].get(k, 0) for t in tallies))
        per = {k: 1000 * statistics.mean(t["totals"].get(k, 0.0) / t["steps"] for t in tallies) for k in keys}
        main_ms = per.pop("step", None) or sum(per.values())
        print(f"  {side}: main-thread CPU per rank-step {main_ms:.3f} ms (steps counted: "
              f"{', '.join(str(t['steps']) for t in tallies)}); the process's other threads "
              f"{total_ms[side] - main_ms:.3f} ms")
        for k, v in per.items():
            print(f"    {k:45s} {v:.3f} ms")


def _print_compute(side: str, per_rank: list[list[list[float]]]) -> None:
    """Median wall and thread-CPU milliseconds of a step's forward + backward, per rank."""
    for r, c in enumerate(per_rank):
        if c:
            wall, cpu = statistics.median(x[0] for x in c), statistics.median(x[1] for x in c)
            print(f"  {side} rank {r}: forward+backward median wall {1000 * wall:.2f} ms, thread CPU "
                  f"{1000 * cpu:.2f} ms")


def _print_profile(work: Path, run_id: str, world: int, warmup: int) -> None:
    import pstats

    _print_compute("edgestream", [json.loads((work / f"prof-{run_id}-{r}.pstats.compute.json").read_text())[warmup:]
                                  for r in range(world) if (work / f"prof-{run_id}-{r}.pstats.compute.json").exists()])
    for r in range(world):
        path = work / f"prof-{run_id}-{r}.pstats"
        if path.exists():
            print(f"--- cProfile rank {r}: the worker loop's main-thread CPU seconds (warm-up included)")
            stats = pstats.Stats(str(path))
            stats.sort_stats("tottime").print_stats(15)
            stats.sort_stats("cumulative").print_stats("performer|driver|events|collectives|exchange", 25)


if __name__ == "__main__":
    main()
