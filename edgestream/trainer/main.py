"""`edgestream train`: one trainer process = one device's worker, run for real.

Reads the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK; device i =
rank), consumes device i's stream through `KafkaStreamDataset` with the run's buffer and batch
policies, and runs the shared `edgestream.sync` worker through `edgestream.runner.drive` against a
`TrainerPerformer` (torch forward/backward on CUDA when available, torch.distributed collectives:
gloo on CPU, NCCL on CUDA).

Files, under `<out>/<name>-<run id>/`: `ranks/<rank>.jsonl` (this rank's events.jsonl lines, flushed
per line; rank 0 adds the eval lines), `ranks/<rank>.log` (its log, Kafka client logs included),
`ranks/<rank>.summary.json` at a normal exit, `checkpoints/rank<rank>.pt` (checkpoint.every_steps).
The orchestrator (`edgestream run --engine local`) merges them into the run directory.

Errors a user can cause end with one line naming the problem (`TrainerError`): an unreachable broker,
a rank outside the config's devices, a rendezvous that times out (naming MASTER_ADDR:MASTER_PORT).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from edgestream.consumers.device_stream import BROKER_TIMEOUT_S
from edgestream.runner.driver import StepMeter, drive, run_blocking
from edgestream.runner.stop import StopRule

log = logging.getLogger("edgestream.trainer")

#: seconds a trainer waits for all peers at the rendezvous (and for a collective) before failing
RENDEZVOUS_TIMEOUT_S = 60.0


class TrainerError(RuntimeError):
    """A problem a user can fix; the message is one line naming it."""


@dataclass(frozen=True)
class DistEnv:
    """The torchrun environment of this process."""

    rank: int
    world: int
    master_addr: str
    master_port: int
    local_rank: int

    @classmethod
    def from_environ(cls, devices: int, environ: dict | None = None) -> DistEnv:
        env = os.environ if environ is None else environ

        def integer(name: str, default: str | None = None) -> int:
            raw = env.get(name, default)
            if raw is None:
                raise TrainerError(f"{name} is not set (edgestream train reads torchrun's RANK, WORLD_SIZE, "
                                   "MASTER_ADDR, MASTER_PORT)")
            try:
                return int(raw)
            except ValueError:
                raise TrainerError(f"{name}={raw!r} is not an integer") from None

        rank, world = integer("RANK"), integer("WORLD_SIZE")
        if world != devices:
            raise TrainerError(f"WORLD_SIZE={world} but the config has devices.count {devices}: run one trainer "
                               "per device")
        if not 0 <= rank < devices:
            raise TrainerError(f"RANK={rank} is outside the config's devices 0-{devices - 1} (devices.count {devices})")
        port = integer("MASTER_PORT", "29500")
        if not 0 < port < 65536:
            raise TrainerError(f"MASTER_PORT={port} is not a port (1-65535)")
        return cls(rank, world, env.get("MASTER_ADDR", "127.0.0.1"), port, integer("LOCAL_RANK", "0"))


def param_digest(params: list[torch.Tensor]) -> str:
    """A short hash of the parameters' bytes: equal digests = bitwise-identical replicas."""
    h = hashlib.blake2b(digest_size=8)
    for p in params:
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class JsonlWriter:
    """events.jsonl lines of one rank, flushed per line (the orchestrator tails them)."""

    def __init__(self, path: Path, append: bool) -> None:
        self._f = open(path, "a" if append else "w", buffering=1)  # noqa: SIM115
        self.steps = 0

    def write(self, rec: dict) -> None:
        self._f.write(json.dumps(rec, separators=(",", ":"), default=_plain) + "\n")

    def close(self) -> None:
        self._f.close()


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return str(v)


def _setup_logging(path: Path) -> logging.Handler:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger("edgestream")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler


def _rendezvous(env: DistEnv, backend: str, timeout_s: float) -> None:
    """init_process_group over env://; a missing peer ends in TrainerError naming the address."""
    os.environ.update(MASTER_ADDR=env.master_addr, MASTER_PORT=str(env.master_port))
    try:
        dist.init_process_group(backend, init_method="env://", rank=env.rank, world_size=env.world,
                                timeout=timedelta(seconds=timeout_s))
    except Exception as exc:  # noqa: BLE001 - torch raises several kinds (DistStoreError, RuntimeError, ...)
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise TrainerError(f"rendezvous at {env.master_addr}:{env.master_port} failed: not all {env.world} trainers "
                           f"joined within {timeout_s:.0f} s ({detail})") from None


def train(cfg: Any, *, run_id: str, bootstrap: str, out: str | Path, resume: bool = False, digest: bool = True,
          environ: dict | None = None) -> dict:
    """Run this process's worker until the group stops; returns the rank's summary (see module doc)."""
    from edgestream.consumers import KafkaStreamDataset
    from edgestream.consumers.device_stream import commit_offset, trainer_group
    from edgestream.data import load_dataset
    from edgestream.kafka.admin import KafkaUnavailable
    from edgestream.kafka.topics import device_topic, injection_topic, run_name
    from edgestream.models import build_model, build_optimizer, param_names
    from edgestream.sync import get_algorithm
    from edgestream.sync.context import WorkerContext
    from edgestream.sync.requests import Log
    from edgestream.trainer.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
    from edgestream.trainer.collectives import DistCollectives
    from edgestream.trainer.evaluator import BackgroundEvaluator
    from edgestream.trainer.performer import Stopped, TrainerPerformer

    env = DistEnv.from_environ(cfg.devices.count, environ)
    spec = get_algorithm(cfg.algorithm.name)
    if spec.family == "ps":
        raise TrainerError(f"algorithm {spec.name!r} is a parameter-server algorithm; the trainer runs the "
                           f"collective family only (use the simulator: edgestream run --engine sim)")
    run = run_name(cfg.name, run_id)
    run_dir = Path(out) / run
    ranks = run_dir / "ranks"
    ranks.mkdir(parents=True, exist_ok=True)
    handler = _setup_logging(ranks / f"{env.rank}.log")
    cuda = torch.cuda.is_available() and os.environ.get("EDGESTREAM_DEVICE", "") != "cpu"
    device = torch.device(f"cuda:{env.local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = os.environ.get("EDGESTREAM_BACKEND") or ("nccl" if cuda else "gloo")
    log.info("rank %d/%d run %s device %s backend %s bootstrap %s", env.rank, env.world, run, device, backend,
             bootstrap)

    d = cfg.data
    data = load_dataset(d.dataset, d.root, seed=cfg.seed, shape=tuple(d.shape) if d.shape else None,
                        num_classes=d.num_classes, n_train=d.n_train, n_test=d.n_test)
    with torch.random.fork_rng(devices=[]):  # every rank (and every engine) starts from the same model
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model.name, data.shape, data.num_classes)
    model = model.to(device).train()
    o = cfg.optim
    optimizer = build_optimizer(model, o.lr, o.momentum, o.weight_decay)

    ckpt_file = checkpoint_path(run_dir, env.rank)
    ckpt = None
    if resume:
        if not ckpt_file.exists():
            raise TrainerError(f"--resume: no checkpoint {ckpt_file} (set checkpoint.every_steps to write them)")
        ckpt = load_checkpoint(ckpt_file, map_location=device)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        for topic, kind in ((device_topic(run, env.rank), "dev"), (injection_topic(run, env.rank), "inj")):
            offset = ckpt["offsets"].get(kind)
            if offset is not None:  # the data position that matches the restored model
                commit_offset(bootstrap, topic, trainer_group(run, env.rank, kind), int(offset),
                              cfg.runtime.kafka_client)

    stop_event = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop_event.set())

    try:
        dataset = KafkaStreamDataset.from_config(
            cfg, bootstrap, run, env.rank, timeout=1.0,
            broker_timeout_s=float(os.environ.get("EDGESTREAM_BROKER_TIMEOUT_S", BROKER_TIMEOUT_S)))
    except KafkaUnavailable as exc:
        raise TrainerError(str(exc)) from None
    timeout_s = float(os.environ.get("EDGESTREAM_RENDEZVOUS_TIMEOUT_S", RENDEZVOUS_TIMEOUT_S))
    try:
        _rendezvous(env, backend, timeout_s)
    except TrainerError:
        dataset.close()
        raise

    (ranks / f"{env.rank}.ready").touch()  # rendezvous done, consumers open (the orchestrator waits for it)
    c = cfg.devices.compute
    meters: dict[int, StepMeter] = {}
    every = cfg.checkpoint.every_steps
    performer = TrainerPerformer(env.rank, model, optimizer, dataset, DistCollectives(env.rank, env.world), meters,
                                 device=device, static=c.static[env.rank % len(c.static)], dynamic=c.dynamic,
                                 seed=cfg.seed, defer_acks=every is not None,
                                 time_offset=ckpt["elapsed_s"] if ckpt else 0.0, stop_event=stop_event,
                                 due_time=None if ckpt else _due_time(cfg, env.rank))
    rule = StopRule.from_config(cfg.stop)
    ctx = WorkerContext.from_config(cfg, env.rank, param_names=param_names(model))
    if ckpt is not None:
        ctx.step, ctx.state = int(ckpt["step"]), ckpt["state"]
        performer.samples = int(ckpt.get("samples", 0))

    def should_stop(completed: int | None = None) -> bool:
        if stop_event.is_set() and rule.reason is None:
            rule.reason = "signal"
        done = ctx.step + 1 if completed is None else completed
        return rule.should_stop(done, performer.now(env.rank))

    ctx.should_stop = should_stop
    events = JsonlWriter(ranks / f"{env.rank}.jsonl", append=resume)
    evaluator = None
    if env.rank == 0:
        x_test = data.normalize(torch.from_numpy(data.x_test))
        y_test = torch.from_numpy(data.y_test).long()

        def on_eval(now: float, step: int, acc: float, loss: float) -> None:
            events.write({"kind": "eval", "time": round(now, 6), "step": step, "accuracy": acc, "loss": loss})
            rule.accuracy(acc)
            log.info("eval t=%.1fs step %d accuracy %.4f", now, step, acc)

        evaluator = BackgroundEvaluator(model, x_test.to(device), y_test.to(device), cfg.eval.every_s, on_eval)

    params = performer.params
    saved_at = {"step": ctx.step}

    def checkpoint() -> None:
        offsets = performer.pending_ack["ack"] if performer.pending_ack is not None else None
        # taken when the worker yields Log: ctx.step steps are applied and acked and ctx.state is
        # complete (the sync/ state contract), so a restarted worker continues from exactly here
        save_checkpoint(ckpt_file, model=model, optimizer=optimizer, step=ctx.step, state=ctx.state,
                        offsets=_offsets(offsets, ckpt), elapsed_s=performer.now(env.rank), samples=performer.samples)
        performer.commit_pending()  # acks become durable only with the checkpoint that holds their model
        saved_at["step"] = ctx.step
        log.info("checkpoint: step %d, offsets %s", ctx.step, offsets)

    def on_request(rank: int, req: Any) -> None:
        if not isinstance(req, Log):
            return
        if digest:
            meters[rank].gauge(digest=param_digest(params))
        if evaluator is not None:
            with performer.model_lock:
                evaluator.offer(model, performer.now(rank), ctx.step)
        if every is not None and ctx.step != saved_at["step"] and ctx.step % every == 0:
            checkpoint()

    def sink(line: dict) -> None:
        events.write({"kind": "step", **line})

    t_start = time.monotonic()
    status = "finished"
    try:
        run_blocking(drive(env.rank, spec.worker(ctx), performer, sink, meters, on_request))
    except Stopped:
        status = "stopped"
        raise TrainerError(f"device {env.rank}: stopped by a signal while waiting for stream data") from None
    except (RuntimeError, dist.DistError) as exc:  # a peer died or the group broke: one line, details in the log
        status = "failed"
        text = " ".join(str(exc).split())
        if not isinstance(exc, dist.DistError) and not any(w in text.lower() for w in ("gloo", "nccl", "connection",
                                                                                       "peer", "timed out")):
            raise
        log.exception("collective failed")
        raise TrainerError(f"device {env.rank}: a collective with the other trainers failed (a peer died or the "
                           f"network broke): {text[:160]}") from None
    finally:
        if status == "finished":
            if evaluator is not None:
                evaluator.final(model, performer.now(env.rank), ctx.step)
            if every is not None:
                checkpoint()
        events.close()
        dataset.close()
        if dist.is_initialized():
            dist.destroy_process_group()
        logging.getLogger("edgestream").removeHandler(handler)
        handler.close()
    summary = {"rank": env.rank, "device": str(device), "backend": backend, "algorithm": spec.name,
               "stop_reason": rule.reason or "finished", "steps": ctx.step, "samples": performer.samples,
               "acked_samples": performer.acked_samples, "dropped": dataset.totals["dropped"],
               "dlq": dataset.totals["dlq"], "injected_in": dataset.totals["injected_in"],
               "injected_out": dataset.totals["injected_out"], "wall_s": round(time.monotonic() - t_start, 3),
               "resumed": resume}
    (ranks / f"{env.rank}.summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _due_time(cfg: Any, device: int):
    """seq -> when the rate model had sample seq of `device` due (seconds since the stream began)."""
    from edgestream.streams import build_rate_model

    d = cfg.devices
    rates = build_rate_model(d.rates.spec(), d.variation.spec(), d.count, cfg.seed, min_rate=d.rates.min_rate)
    return lambda seq: float(rates.due_time(device, seq))


def _offsets(acked: dict | None, ckpt: dict | None) -> dict:
    """The offsets a checkpoint holds: those of the newest acked batch, else the previous checkpoint's."""
    if acked is not None:
        return {k: int(v) for k, v in acked.items() if v is not None}
    return dict(ckpt["offsets"]) if ckpt else {}
