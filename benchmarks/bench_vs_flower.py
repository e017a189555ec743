"""edgestream's simulator beside Flower's simulation engine (issue 35, item 2): federated averaging where every
client does ONE local SGD step of batch 8 per round on the same MLP, at 256, 1,000 and 10,000 clients.

- edgestream: the virtual-time simulator (`SimEngine`, default compute path `auto`, which batches local-sgd's
  forward/backward over the devices), `local-sgd` with `tau: 1` (one local step, then every replica is replaced by
  the plain average), a fixed batch of 8, persist buffer, `stop.max_steps` = rounds, 1 torch thread, one process.
- Flower: `flwr.simulation.run_simulation` (Flower's Simulation Engine on Ray) with a `ServerApp` running the
  `FedAvg` strategy of the Message API (`flwr.serverapp.strategy.FedAvg`, fraction_train 1.0, no evaluation
  rounds) and a `ClientApp` whose train handler loads the global arrays into the MLP, takes one SGD step on a
  batch of 8 of its partition and replies with its arrays and `num-examples` 8 (so FedAvg's weighted average is
  the plain average, as local-sgd's). Ray gets `num_cpus` 2 and each client 1 CPU: 2 actors, 1 torch thread each.
  It runs in its own venv (.venv-flower, `make bench-flower`; benchmarks/flower-requirements.txt): Flower is not a
  dependency of edgestream.

Both sides: the `mlp` (64 -> 128 -> 64 -> 10, 17,226 parameters; the Flower side builds the same nn.Sequential),
cross-entropy, SGD with lr 0.1, momentum 0 and weight decay 0 (Flower's clients are ephemeral: a client's
momentum buffer would not survive a round without extra state, so both sides use plain SGD and the update is the
same), the same data: the parent process exports edgestream's normalised training inputs and its partition of them
(`RunPlan.shards`) to an .npz file that Flower's clients read; a client's round-r batch is the 8 next samples of
its shard, cycling (edgestream's streams reshuffle the shard each epoch; the Flower side does not -- the same
number of samples either way). Data: digits (1,438 training samples) at 256 and 1,000 clients; at 10,000 clients
digits has too few samples for edgestream's partition (every device needs its own), so BOTH sides use
edgestream's `synthetic` dataset of the same shape (1x8x8, 10 classes, `--synthetic-per-client` samples a client).

Measured, each run in its own fresh process, the two sides alternating (`--repeat` rounds, the order flipped
each round so both see the same machine load):
- device-steps per wall second = clients x rounds (one local step each) / the wall time of the rounds
  (edgestream: `engine.run()`; Flower: from the first round's `configure_train` to the last `aggregate_train`);
  for Flower the headline is its steady rate without the first round (Ray starts, the actors import torch and
  build the model during round 1), the rate over all rounds beside it.
- set-up: edgestream: building the `SimEngine` (dataset, partition, streams, replicas); Flower: Ray and the actor
  pool start in a thread of their own while the ServerApp already configures round 1, so its set-up is the time
  from `run_simulation` to the end of round 1 less the median of the later rounds (with one round: to its end).
- process wall: the child process from spawn to exit, imports included.
- peak memory: edgestream: the process's peak RSS; Flower: the driver's peak RSS and the peak of the summed PSS of
  the driver and every process under it (Ray's GCS, raylet and the actors), sampled every 0.5 s.
- the test accuracy of the final global model (edgestream: its end-of-run evaluation; Flower: the final arrays
  evaluated in the driver after the run), a check that both trained.
- the 1-minute load average at each run's start.

    python benchmarks/bench_vs_flower.py [--clients 256,1000,10000] [--rounds 256:20,1000:10,10000:4]
                                         [--flower-rounds 10000:2] [--repeat 2] [--flower-python .venv-flower/bin/python]
    make bench-flower   # creates .venv-flower from benchmarks/flower-requirements.txt, then runs this

A Flower run that errors, or a round in which any client failed, fails the benchmark (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BATCH = 8
LR = 0.1
HIDDEN = (128, 64)


def _rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _parse_map(text: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in (p.split(":") for p in text.split(",") if p.strip())}


def dataset_of(clients: int, synthetic_from: int) -> str:
    return "synthetic" if clients >= synthetic_from else "digits"


# ---------------------------------------------------------------------------------------------- edgestream side
def es_config(clients: int, rounds: int, dataset: str, per_client: int) -> dict:
    data: dict = {"dataset": "digits"}
    if dataset == "synthetic":
        data = {"dataset": "synthetic", "shape": [1, 8, 8], "num_classes": 10, "n_train": clients * per_client,
                "n_test": 2000, "partition": "iid"}
    return {
        "name": f"vsflower{clients}", "seed": 0, "data": data,
        "devices": {"count": clients, "rates": {"distribution": "uniform", "low": 40, "high": 200},
                    "compute": {"base_s": 0.05, "per_sample_s": 0.002}},
        "model": {"name": "mlp"},
        "optim": {"lr": LR, "momentum": 0.0, "weight_decay": 0.0},
        "algorithm": {"name": "local-sgd", "batch": {"policy": "fixed", "size": BATCH}, "buffer": "persist",
                      "params": {"tau": 1}},
        "stop": {"target_accuracy": None, "max_time_s": None, "max_steps": rounds},
        "eval": {"every_s": 1e6},
    }


def export_data(clients: int, dataset: str, per_client: int, path: Path) -> dict:
    """edgestream's normalised train/test inputs (flattened) and its partition into `path` (.npz) for Flower."""
    import numpy as np

    from edgestream.config import validate_dict
    from edgestream.runner.plan import RunPlan

    plan = RunPlan.resolve(validate_dict(es_config(clients, 1, dataset, per_client)))
    ds = plan.dataset
    shards = plan.shards
    x_train = ds.normalize(ds.x_train).numpy().reshape(len(ds.x_train), -1).astype(np.float32)
    x_test = ds.normalize(ds.x_test).numpy().reshape(len(ds.x_test), -1).astype(np.float32)
    offsets = np.zeros(len(shards) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in shards])
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x_train=x_train, y_train=ds.y_train.astype(np.int64), x_test=x_test,
             y_test=ds.y_test.astype(np.int64), offsets=offsets, indices=np.concatenate(shards).astype(np.int64),
             num_classes=np.int64(ds.num_classes))
    return {"n_train": int(len(x_train)), "features": int(x_train.shape[1]), "num_classes": int(ds.num_classes),
            "shard_min": int(min(len(s) for s in shards)), "shard_max": int(max(len(s) for s in shards))}


def run_edgestream(clients: int, rounds: int, dataset: str, per_client: int) -> dict:
    import torch

    from edgestream.config import validate_dict
    from edgestream.metrics import EventLog
    from edgestream.sim.engine import SimEngine

    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    events = EventLog(None)
    t0 = time.perf_counter()
    engine = SimEngine(validate_dict(es_config(clients, rounds, dataset, per_client)), events)
    setup = time.perf_counter() - t0
    rss_setup = _rss_peak_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    engine.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    prof = engine.profile(wall)
    summary = events.summary(wall_s=wall, engine="sim", **engine.extra_summary(wall))
    n = engine.stats.device_steps
    if n != clients * rounds:
        raise SystemExit(f"edgestream ran {n} device-steps, expected {clients} x {rounds}")
    return {
        "side": "edgestream", "clients": clients, "rounds": rounds, "dataset": dataset, "device_steps": n,
        "compute_path": engine.compute_mode, "compute_reason": engine.compute_reason,
        "setup_s": round(setup, 3), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "load_avg": round(load, 2),
        "device_steps_per_wall_s": round(n / wall, 1), "steady_device_steps_per_wall_s": None,
        "device_steps_per_cpu_s": round(n / cpu, 1),
        "rss_setup_mb": round(rss_setup, 1), "rss_peak_mb": round(_rss_peak_mb(), 1),
        "final_accuracy": summary.get("final_accuracy"),
        "profile_s": {k: round(v, 3) for k, v in prof.items()},
    }


# ------------------------------------------------------------------------------------------------- Flower side
_CACHE: dict = {}


def _mlp(features: int, num_classes: int):
    from torch import nn

    layers: list = [nn.Flatten()]
    width = features
    for h in HIDDEN:
        layers += [nn.Linear(width, h), nn.ReLU(inplace=True)]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def _actor_state(path: str) -> dict:
    """Per Ray actor process: the data (read once) and one model to load each round's arrays into."""
    got = _CACHE.get(path)
    if got is None:
        import numpy as np
        import torch

        torch.set_num_threads(1)
        z = np.load(path)
        x = torch.from_numpy(z["x_train"])
        got = _CACHE[path] = {
            "x": x, "y": torch.from_numpy(z["y_train"]), "offsets": z["offsets"], "indices": z["indices"],
            "model": _mlp(x.shape[1], int(z["num_classes"])),
        }
    return got


def _client_train(msg, context):
    import numpy as np
    import torch
    import torch.nn.functional as F
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    cfg = msg.content["config"]
    st = _actor_state(str(cfg["data"]))
    part = int(context.node_config["partition-id"])
    lo, hi = int(st["offsets"][part]), int(st["offsets"][part + 1])
    pos = (np.arange(BATCH) + (int(cfg["server-round"]) - 1) * BATCH) % (hi - lo)
    idx = torch.from_numpy(st["indices"][lo + pos])
    model = st["model"]
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=float(cfg["lr"]), momentum=0.0, weight_decay=0.0)
    loss = F.cross_entropy(model(st["x"][idx]), st["y"][idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"train_loss": float(loss.item()), "num-examples": BATCH})})
    return Message(content=content, reply_to=msg)


def _client_app():
    from flwr.clientapp import ClientApp

    app = ClientApp()
    app.train()(_client_train)
    return app


def _tree_pids(root: int) -> list[int]:
    """`root` and every process under it (Ray's GCS, raylet, actors), from /proc."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) that `root` and the processes under it have used so far (live ones)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in _tree_pids(root):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / tick


def _pss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


class _TreeMemory(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_mb, self.max_procs, self.pids = 0.0, 0, set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            pids = _tree_pids(os.getpid())
            self.pids.update(p for p in pids if p != os.getpid())
            self.max_procs = max(self.max_procs, len(pids))
            self.peak_mb = max(self.peak_mb, sum(_pss_mb(p) for p in pids))


def run_flower(clients: int, rounds: int, data: str) -> dict:
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ["OMP_NUM_THREADS"] = "1"  # the actors inherit it: 1 torch thread each, as edgestream's 1
    import bench_vs_flower as mod  # the client code by module name: the Ray actors import it (PYTHONPATH)
    import flwr
    import numpy as np
    import ray
    import torch
    from flwr.app import ArrayRecord, ConfigRecord, Context
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    torch.set_num_threads(1)
    z = np.load(data)
    features, num_classes = int(z["x_train"].shape[1]), int(z["num_classes"])
    t: dict = {"starts": [], "ends": [], "ok": [], "failed": [], "cpu": []}

    class TimedFedAvg(FedAvg):
        def configure_train(self, server_round, arrays, config, grid):
            t["starts"].append(time.perf_counter())
            if server_round == 1:
                t["cpu0"] = _tree_cpu_s(os.getpid())
            return super().configure_train(server_round, arrays, config, grid)

        def aggregate_train(self, server_round, replies):
            replies = list(replies)
            ok = sum(1 for r in replies if r.has_content())
            t["ok"].append(ok)
            t["failed"].append(len(replies) - ok)
            errors = [r.error for r in replies if not r.has_content()]
            if errors:
                t.setdefault("errors", [str(e) for e in errors[:3]])
            got = super().aggregate_train(server_round, replies)
            t["ends"].append(time.perf_counter())
            t["cpu"].append(_tree_cpu_s(os.getpid()))
            return got

    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        t["main"] = time.perf_counter()
        strategy = TimedFedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=clients,
                               min_available_nodes=clients)
        t["result"] = strategy.start(grid=grid, initial_arrays=ArrayRecord(_mlp(features, num_classes).state_dict()),
                                     num_rounds=rounds, train_config=ConfigRecord({"lr": LR, "data": data}))

    mem = _TreeMemory()
    mem.start()
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    run_simulation(server_app=server, client_app=mod._client_app(), num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": 2, "num_gpus": 0, "include_dashboard": False,
                                                 "object_store_memory": 1 << 30}})
    total = time.perf_counter() - t0
    mem.stop.set()
    mem.join()
    if ray.is_initialized():
        ray.shutdown()
    left = [p for p in mem.pids if os.path.exists(f"/proc/{p}")]
    for p in left:  # only the processes this run started (its descendants)
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    problems = []
    if len(t["ends"]) != rounds:
        problems.append(f"{len(t['ends'])} of {rounds} rounds finished")
    if any(ok != clients for ok in t["ok"]) or any(t["failed"]):
        problems.append(f"replies per round {t['ok']}, failures {t['failed']}: {t.get('errors')}")
    if problems:
        raise SystemExit("Flower's run failed: " + "; ".join(problems))
    result = t["result"]
    model = _mlp(features, num_classes)
    model.load_state_dict(result.arrays.to_torch_state_dict())
    with torch.no_grad():
        acc = float((model(torch.from_numpy(z["x_test"])).argmax(1) == torch.from_numpy(z["y_test"])).float().mean())
    n = clients * rounds
    wall = t["ends"][-1] - t["starts"][0]
    round_s = [e - s for s, e in zip(t["starts"], t["ends"], strict=True)]
    steady = (clients * (rounds - 1) / (t["ends"][-1] - t["ends"][0])) if rounds > 1 else None
    cpu_steady = t["cpu"][-1] - t["cpu"][0] if rounds > 1 else None
    # Ray and the actor pool start in their own thread while round 1 is already configured: set-up = the time to
    # the end of round 1 less one later round (the median), when there is one
    later = sorted(round_s[1:])
    setup = (t["ends"][0] - t0) - (later[len(later) // 2] if later else 0.0)
    return {
        "side": "flower", "flwr": flwr.__version__, "ray": ray.__version__, "torch": torch.__version__,
        "clients": clients, "rounds": rounds, "device_steps": n,
        "setup_s": round(setup, 3), "wall_s": round(wall, 3), "total_s": round(total, 3),
        "round_s": [round(v, 3) for v in round_s],
        "load_avg": round(load, 2), "device_steps_per_wall_s": round(n / wall, 1),
        "steady_device_steps_per_wall_s": round(steady, 1) if steady else None,
        "cpu_s": round(t["cpu"][-1] - t["cpu0"], 3), "cpu_s_steady": round(cpu_steady, 3) if cpu_steady else None,
        "device_steps_per_cpu_s": round(n / (t["cpu"][-1] - t["cpu0"]), 1),
        "steady_device_steps_per_cpu_s": round(clients * (rounds - 1) / cpu_steady, 1) if cpu_steady else None,
        "rss_peak_mb": round(_rss_peak_mb(), 1), "tree_pss_peak_mb": round(mem.peak_mb, 1),
        "max_processes": mem.max_procs, "killed_leftovers": len(left), "final_accuracy": round(acc, 4),
    }


# ---------------------------------------------------------------------------------------------------- parent
def _leftover_ray() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True, check=False).stdout
    return [line.strip() for line in out.splitlines()
            if any(k in line for k in ("raylet", "gcs_server", "ray::", "default_worker.py"))
            and "ps -eo" not in line]


def run_child(side: str, clients: int, rounds: int, args: argparse.Namespace, data: Path | None) -> dict:
    py = sys.executable if side == "edgestream" else str(args.flower_python)
    cmd = [py, str(Path(__file__).resolve()), "--child", side, "--clients", str(clients), "--rounds", str(rounds),
           "--dataset", dataset_of(clients, args.synthetic_from),
           "--synthetic-per-client", str(args.synthetic_per_client)]
    if data is not None:
        cmd += ["--data", str(data)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + ([str(REPO)] if side == "edgestream" else []))
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, timeout=args.child_timeout)
    except subprocess.TimeoutExpired as e:
        raise SystemExit(f"{side} at {clients} clients ran past {args.child_timeout} s: {' '.join(cmd)}\n"
                         f"{(e.stderr or b'')[-4000:]!r}") from e
    process_wall = time.perf_counter() - t0
    lines = [x for x in out.stdout.strip().splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{side} at {clients} clients failed (exit {out.returncode}): {' '.join(cmd)}\n"
                         f"{out.stderr[-6000:]}\n{out.stdout[-2000:]}")
    r = json.loads(lines[-1])
    r["process_wall_s"] = round(process_wall, 2)
    return r


def _pairs(rows: list[dict], c: int) -> list[tuple[dict, dict]]:
    """(edgestream, Flower) runs of `c` clients in the order they ran, paired: run i of one side with run i of the
    other (back to back, so under about the same load)."""
    es = [r for r in rows if r["clients"] == c and r["side"] == "edgestream"]
    fl = [r for r in rows if r["clients"] == c and r["side"] == "flower"]
    return list(zip(es, fl, strict=False))


def _flower_rate(r: dict, per: str = "wall") -> float:
    """Flower's steady rate (without round 1) where it ran more than one round, else over its one round."""
    return r[f"steady_device_steps_per_{per}_s"] or r[f"device_steps_per_{per}_s"]


def table(rows: list[dict]) -> str:
    """One row per client count: each side's fastest run (edgestream over all its rounds; Flower without round 1),
    the ratio of those, the range of the ratios of the back-to-back pairs, the same per CPU second."""
    head = ["clients", "data", "rounds (ours / Flower)", "edgestream device-steps/s (wall / CPU)",
            "Flower device-steps/s without round 1 (wall / CPU); all rounds (wall)",
            "ratio, fastest runs (wall / CPU)", "ratio per back-to-back pair (wall)", "set-up s (ours / Flower)",
            "process wall s (ours / Flower)", "peak memory MB (ours RSS / Flower driver RSS, process tree PSS)",
            "final test accuracy (ours / Flower)", "load (1 min)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in sorted({r["clients"] for r in rows}):
        pairs = _pairs(rows, c)
        if not pairs:
            continue
        es, fl = [p[0] for p in pairs], [p[1] for p in pairs]
        e = max(es, key=lambda r: r["device_steps_per_wall_s"])
        f = max(fl, key=_flower_rate)
        e_cpu = max(r["device_steps_per_cpu_s"] for r in es)
        f_cpu = max((_flower_rate(r, "cpu") for r in fl if r.get("device_steps_per_cpu_s")), default=None)
        f_all = max(r["device_steps_per_wall_s"] for r in fl)
        ratios = [a["device_steps_per_wall_s"] / _flower_rate(b) for a, b in pairs]
        loads = [r["load_avg"] for r in es + fl]
        one_round = f["steady_device_steps_per_wall_s"] is None
        lines.append("| " + " | ".join([
            f"{c:,}", e["dataset"], f"{e['rounds']} / {f['rounds']}",
            f"{e['device_steps_per_wall_s']:,.0f} / {e_cpu:,.0f}",
            f"{_flower_rate(f):,.0f}{' (its one round)' if one_round else ''} / "
            + (f"{f_cpu:,.0f}" if f_cpu else "-") + f"; {f_all:,.0f}",
            f"**{e['device_steps_per_wall_s'] / _flower_rate(f):.1f}x** / "
            + (f"{e_cpu / f_cpu:.1f}x" if f_cpu else "-"),
            f"{min(ratios):.1f}x-{max(ratios):.1f}x" if len(ratios) > 1 else f"{ratios[0]:.1f}x",
            f"{min(r['setup_s'] for r in es):.1f} / {min(r['setup_s'] for r in fl):.1f}",
            f"{min(r['process_wall_s'] for r in es):.1f} / {min(r['process_wall_s'] for r in fl):.1f}",
            f"{e['rss_peak_mb']:,.0f} / {f['rss_peak_mb']:,.0f}, {f['tree_pss_peak_mb']:,.0f}",
            f"{e['final_accuracy']:.3f} / {f['final_accuracy']:.3f}" if e["final_accuracy"] is not None else "-",
            f"{min(loads):.1f}-{max(loads):.1f}",
        ]) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="256,1000,10000")
    ap.add_argument("--rounds", default="256:20,1000:10,10000:4", help="clients:rounds for edgestream (and Flower)")
    ap.add_argument("--flower-rounds", default="10000:2", help="clients:rounds where Flower runs fewer rounds")
    ap.add_argument("--repeat", default="256:2,1000:2,10000:1", help="clients:runs of each side (alternating)")
    ap.add_argument("--synthetic-from", type=int, default=10000, help="clients from which both sides use synthetic")
    ap.add_argument("--synthetic-per-client", type=int, default=16)
    ap.add_argument("--flower-python", type=Path, default=REPO / ".venv-flower" / "bin" / "python")
    ap.add_argument("--child-timeout", type=float, default=900)
    ap.add_argument("--child", choices=("edgestream", "flower"), help=argparse.SUPPRESS)
    ap.add_argument("--dataset", default="digits", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "edgestream":
        print(json.dumps(run_edgestream(int(args.clients), int(args.rounds), args.dataset, args.synthetic_per_client)))
        return
    if args.child == "flower":
        print(json.dumps(run_flower(int(args.clients), int(args.rounds), args.data)))
        return

    sys.path.insert(0, str(HERE))
    from common import OUT, record

    if not args.flower_python.exists():
        raise SystemExit(f"{args.flower_python} not found: `make bench-flower` creates .venv-flower")
    rounds, flower_rounds, repeat = _parse_map(args.rounds), _parse_map(args.flower_rounds), _parse_map(args.repeat)
    loads = [os.getloadavg()]
    rows: list[dict] = []
    for c in (int(v) for v in args.clients.split(",")):
        dataset = dataset_of(c, args.synthetic_from)
        data = OUT / f"vs_flower_{c}.npz"
        facts = export_data(c, dataset, args.synthetic_per_client, data)
        print(f"{c} clients: {dataset}, {facts}", file=sys.stderr, flush=True)
        r_es = rounds.get(c, 10)
        r_fl = flower_rounds.get(c, r_es)
        for i in range(repeat.get(c, 1)):
            for side in (("edgestream", "flower") if i % 2 == 0 else ("flower", "edgestream")):
                r = run_child(side, c, r_es if side == "edgestream" else r_fl, args,
                              data if side == "flower" else None)
                r.update(data_facts=facts)
                rows.append(r)
                extra = (f", steady {r['steady_device_steps_per_wall_s']}" if r.get("steady_device_steps_per_wall_s")
                         else "")
                print(f"{side:>10} {c:6d} clients x {r['rounds']:3d} rounds: {r['device_steps_per_wall_s']:8.1f} "
                      f"device-steps/s{extra}, set-up {r['setup_s']:.1f} s, wall {r['wall_s']:.1f} s, process "
                      f"{r['process_wall_s']:.1f} s, peak RSS {r['rss_peak_mb']:.0f} MB"
                      + (f", tree PSS {r['tree_pss_peak_mb']:.0f} MB" if side == "flower" else "")
                      + f", accuracy {r['final_accuracy']}, load {r['load_avg']}", file=sys.stderr, flush=True)
                left = _leftover_ray()
                if left:
                    print(f"  Ray processes still running: {left}", file=sys.stderr, flush=True)
        loads.append(os.getloadavg())
        data.unlink(missing_ok=True)
    text = table(rows)
    print(text, file=sys.stderr)
    fl = next((r for r in rows if r["side"] == "flower"), {})
    record("vs_flower", {"flwr": fl.get("flwr"), "ray": fl.get("ray"), "torch_flower": fl.get("torch"),
                         "load_avg_1_5_15": loads, "rows": rows, "table": text,
                         "target": ">= 10x Flower's device-steps/s at 1,000 clients"})


if __name__ == "__main__":
    main()
