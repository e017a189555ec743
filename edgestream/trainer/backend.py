"""One torch.distributed backend for every rank, agreed at the rendezvous.

Each rank picking `nccl` or `gloo` by itself hangs a mixed cluster (a Jetson, a GPU node and a CPU box:
NCCL on some ranks, gloo on others) until the rendezvous timeout. Instead every rank announces, in the
rendezvous store (`torch.distributed.rendezvous("env://")`: the same TCPStore init_process_group
would create, torchrun's agent store included), whether it has a CUDA device, which GPU it computes on
(its UUID: edgestream.trainer.gpus; ranks that share one GPU -- processes on one host, compose trainer
containers that each see it as cuda:0 -- announce the same) and which backend it was told to use
(EDGESTREAM_BACKEND; empty or unset = automatic), reads every rank's announcement, and all ranks pick the
same (`choose`):

* automatic everywhere: `nccl` when every rank has a GPU of its own, else `gloo` (gloo also reduces CUDA
  tensors, staged through host memory, so GPU ranks still train on their GPUs; NCCL refuses two ranks
  on one GPU);
* a backend told on some ranks: every told rank must name the same one, and the others follow it;
  `nccl` needs a GPU of its own on every rank. A conflict is one line, the same on every rank, naming
  the ranks and what each was told, lacks or shares -- not a hang, never an NCCL traceback (the group
  is created only after the ranks agreed).

`describe` says in one line what was chosen and why (the rank log and the status line show it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

BACKENDS = ("gloo", "nccl")
KEY = "edgestream/backend/{rank}"
READ_KEY = "edgestream/backend-read/{rank}"


class BackendError(RuntimeError):
    """The ranks cannot agree on a backend (one line)."""


def check_requested(value: str | None) -> str:
    """EDGESTREAM_BACKEND as given ("" = automatic); BackendError names an unknown one."""
    value = (value or "").strip().lower()
    if value and value not in BACKENDS:
        raise BackendError(f"EDGESTREAM_BACKEND={value!r} is not allowed; must be one of {', '.join(BACKENDS)} "
                           "or empty (automatic: nccl when every rank has a GPU of its own, else gloo)")
    return value


def ranks_text(ranks: Sequence[int]) -> str:
    """"rank 3", "ranks 0, 2", "ranks 0-15, 17" (three or more in a row as a range)."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


def shared_gpus(announcements: Sequence[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    """(GPU identity, its ranks) for every GPU that more than one rank computes on, in rank order."""
    on: dict[str, list[int]] = {}
    for rank, a in enumerate(announcements):
        if a.get("cuda") and a.get("gpu"):
            on.setdefault(str(a["gpu"]), []).append(rank)
    return [(gpu, ranks) for gpu, ranks in on.items() if len(ranks) > 1]


def _sharing(shared: list[tuple[str, list[int]]]) -> str:
    return "; ".join(f"{ranks_text(ranks)} share GPU {gpu}" for gpu, ranks in shared)


def choose(announcements: Sequence[dict[str, Any]]) -> str:
    """The backend every rank uses, from every rank's {"cuda": bool, "requested": "" | "gloo" | "nccl",
    "gpu": its GPU's UUID or None} in rank order (module doc); BackendError with one line when they
    conflict."""
    told: dict[str, list[int]] = {}
    for rank, a in enumerate(announcements):
        if a.get("requested"):
            told.setdefault(a["requested"], []).append(rank)
    no_cuda = [r for r, a in enumerate(announcements) if not a.get("cuda")]
    if len(told) > 1:
        parts = "; ".join(f"{ranks_text(ranks)}: {name}" for name, ranks in sorted(told.items()))
        raise BackendError(f"the trainers were told different backends (EDGESTREAM_BACKEND: {parts}); set the same "
                           "on every host, or leave it empty everywhere to let them agree")
    if told:
        (backend,) = told
        if backend == "nccl" and no_cuda:
            raise BackendError(f"EDGESTREAM_BACKEND=nccl ({ranks_text(told['nccl'])}) but {ranks_text(no_cuda)} "
                               "have no CUDA device; use gloo (it also reduces CUDA tensors) or leave it empty")
        shared = shared_gpus(announcements)
        if backend == "nccl" and shared:
            raise BackendError(f"EDGESTREAM_BACKEND=nccl ({ranks_text(told['nccl'])}) but {_sharing(shared)} (NCCL "
                               "needs a GPU of its own per rank); use gloo, give each rank its own GPU "
                               "(runtime.gpus, CUDA_VISIBLE_DEVICES) or leave it empty")
        return backend
    return "gloo" if no_cuda or shared_gpus(announcements) else "nccl"


def describe(announcements: Sequence[dict[str, Any]], backend: str) -> str:
    """One line: the agreed backend and why (told, ranks without CUDA, ranks sharing a GPU)."""
    world = len(announcements)
    told = sorted({a["requested"] for a in announcements if a.get("requested")})
    why = []
    if told:
        why.append("told (EDGESTREAM_BACKEND)")
    no_cuda = [r for r, a in enumerate(announcements) if not a.get("cuda")]
    if len(no_cuda) == world:
        why.append("every rank on the CPU" if world > 1 else "on the CPU")
    elif no_cuda:
        why.append(f"{ranks_text(no_cuda)} {'has' if len(no_cuda) == 1 else 'have'} no CUDA device")
    shared = shared_gpus(announcements)
    if shared:
        why.append(f"{_sharing(shared)}: gloo for the collectives (NCCL needs a GPU of its own per rank)")
    if not why:
        why.append("every rank on a GPU of its own" if world > 1 else "on a GPU")
    return f"backend {backend} agreed by {world} rank{'s' * (world != 1)}: " + "; ".join(why)


def negotiate(store: Any, rank: int, world: int, *, cuda: bool, requested: str,
              timeout_s: float, gpu: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Announce this rank in `store` (`gpu`: its GPU's UUID, None on the CPU), wait for every rank's
    announcement, and return (the agreed backend, the announcements); BackendError when they conflict
    (raised on every rank alike)."""
    store.set(KEY.format(rank=rank), json.dumps({"cuda": bool(cuda), "requested": requested,
                                                 "gpu": gpu if cuda else None}))
    keys = [KEY.format(rank=r) for r in range(world)]
    store.wait(keys, timedelta(seconds=timeout_s))
    announcements = [json.loads(store.get(k)) for k in keys]
    try:
        return choose(announcements), announcements
    except BackendError:
        # Rank 0 hosts the store: it leaves only once every rank has read the announcements, or a rank
        # still reading would lose the store and say "rendezvous failed" instead of the conflict.
        store.set(READ_KEY.format(rank=rank), "1")
        if rank == 0:
            try:
                store.wait([READ_KEY.format(rank=r) for r in range(world)], timedelta(seconds=timeout_s))
            except Exception:  # noqa: BLE001 - a rank gone before reading: the conflict is still the line
                pass
        raise
