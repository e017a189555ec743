"""How a trainer meets its peers: the torchrun environment (DistEnv), the rendezvous where the ranks agree on a
backend and start the process group, the agreement on a resumed step, and, for a parameter-server algorithm,
joining the PS through Kafka. Each failure a user can cause ends in one line (TrainerError)."""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from edgestream.trainer.errors import TrainerError

log = logging.getLogger("edgestream.trainer")


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


def rendezvous(env: DistEnv, placed: Any, requested: str, timeout_s: float, collective_s: float) -> tuple[str, str]:
    """The env:// rendezvous, where the ranks agree on one backend (edgestream.trainer.backend; `placed`:
    this rank's gpus.Placement), then init_process_group with it; returns (the backend, the line saying
    why). A missing peer ends in TrainerError naming the
    address after `timeout_s`; ranks that cannot agree end in the same one line on every rank. The group's
    collectives then wait `collective_s` for a peer."""
    from torch.distributed import rendezvous as env_rendezvous

    from edgestream.trainer.backend import BackendError, describe, negotiate

    os.environ.update(MASTER_ADDR=env.master_addr, MASTER_PORT=str(env.master_port))
    try:
        store, _, _ = next(env_rendezvous("env://", rank=env.rank, world_size=env.world,
                                      timeout=timedelta(seconds=timeout_s)))
        backend, announced = negotiate(store, env.rank, env.world, cuda=placed.cuda, requested=requested,
                                       timeout_s=timeout_s, gpu=placed.gpu)
        note = describe(announced, backend)
        log.info("%s (%s)", note, announced)
        # every rank has announced itself (negotiate waited `timeout_s` for them), so the group's own
        # timeout is the collectives' (dist.set_timeout is not in every torch this supports, e.g. 2.11)
        dist.init_process_group(backend, store=store, rank=env.rank, world_size=env.world,
                                timeout=timedelta(seconds=collective_s))
        return backend, note
    except BackendError as exc:
        raise TrainerError(f"device {env.rank}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - torch raises several kinds (DistStoreError, RuntimeError, ...)
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise TrainerError(f"rendezvous at {env.master_addr}:{env.master_port} failed: not all {env.world} trainers "
                           f"joined within {timeout_s:.0f} s ({detail})") from None


def agree_on_step(env: DistEnv, step: int, device: torch.device, path: Path) -> None:
    """All-gather the step each rank's checkpoint holds; TrainerError on every rank when they differ."""
    from edgestream.trainer.checkpoint import step_disagreement

    mine = torch.tensor([step], dtype=torch.int64, device=device)
    steps = [torch.zeros_like(mine) for _ in range(env.world)]
    dist.all_gather(steps, mine)
    problem = step_disagreement(str(path.parent), {r: int(t.item()) for r, t in enumerate(steps)})
    if problem:
        raise TrainerError(f"device {env.rank}: {problem}")


def join_ps(plan: Any, bootstrap: str, run: str, env: DistEnv, model: torch.nn.Module, device: torch.device,
             stop_event: threading.Event, *, fresh: bool, outage: Any = None) -> Any:
    """Connect worker `env.rank` to the run's parameter server through Kafka and wait until it answers
    (a worker started before the PS waits here, logging what it waits for). A fresh worker starts from
    the PS's current model; a resumed one keeps its checkpoint's."""
    from confluent_kafka import KafkaException

    from edgestream.kafka.admin import KafkaUnavailable
    from edgestream.kafka.topic_check import TopicMismatch
    from edgestream.kafka.topic_settings import TopicSettingsError
    from edgestream.ps.client import PSClient, PSStopped
    from edgestream.sync.buffers import floating_buffers

    params = [p for p in model.parameters() if p.requires_grad]
    try:
        client = PSClient(bootstrap, run, env.rank, env.world, params, security=plan.security,
                          stop=stop_event.is_set, device=device,
                          echo=lambda m: print(m, file=sys.stderr, flush=True),
                          buffers=floating_buffers(model),  # they travel with pushes and replies
                          outage=outage,  # the rank's one outage, shared with its readers
                          topic_settings=lambda: plan.topic_settings(bootstrap))  # kafka.topics, resolved
        reply = client.join()
    except (KafkaUnavailable, KafkaException, TopicMismatch, TopicSettingsError) as exc:
        raise TrainerError(f"device {env.rank}: the parameter server's topics on {bootstrap}: {exc}") from None
    except PSStopped as exc:
        raise TrainerError(f"device {env.rank}: {exc}") from None
    if fresh:
        with torch.no_grad():
            for p, t in zip(params, reply.params, strict=True):
                p.copy_(t.reshape(p.shape))
        client.set_buffers(reply.buffers)
    return client
