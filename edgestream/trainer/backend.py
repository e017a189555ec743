"""One torch.distributed backend for every rank, agreed at the rendezvous.

Each rank picking `nccl` or `gloo` by itself hangs a mixed cluster (a Jetson, a GPU node and a CPU box:
NCCL on some ranks, gloo on others) until the rendezvous timeout. Instead every rank announces, in the
rendezvous store (`torch.distributed.rendezvous("env://")`: the same TCPStore init_process_group
would create, torchrun's agent store included), whether it has a CUDA device and which backend it was
told to use (EDGESTREAM_BACKEND; empty or unset = automatic), reads every rank's announcement, and all
ranks pick the same (`choose`):

* automatic everywhere: `nccl` when every rank has CUDA, else `gloo` (gloo also reduces CUDA tensors,
  staged through host memory, so GPU ranks still train on their GPUs);
* a backend told on some ranks: every told rank must name the same one, and the others follow it;
  `nccl` needs CUDA on every rank. A conflict is one line, the same on every rank, naming the ranks
  and what each was told or lacks -- not a hang.
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
                           "or empty (automatic: nccl when every rank has CUDA, else gloo)")
    return value


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def choose(announcements: Sequence[dict[str, Any]]) -> str:
    """The backend every rank uses, from every rank's {"cuda": bool, "requested": "" | "gloo" | "nccl"} in
    rank order (module doc); BackendError with one line when they conflict."""
    told: dict[str, list[int]] = {}
    for rank, a in enumerate(announcements):
        if a.get("requested"):
            told.setdefault(a["requested"], []).append(rank)
    no_cuda = [r for r, a in enumerate(announcements) if not a.get("cuda")]
    if len(told) > 1:
        parts = "; ".join(f"{_ranks(ranks)}: {name}" for name, ranks in sorted(told.items()))
        raise BackendError(f"the trainers were told different backends (EDGESTREAM_BACKEND: {parts}); set the same "
                           "on every host, or leave it empty everywhere to let them agree")
    if told:
        (backend,) = told
        if backend == "nccl" and no_cuda:
            raise BackendError(f"EDGESTREAM_BACKEND=nccl ({_ranks(told['nccl'])}) but {_ranks(no_cuda)} "
                               "have no CUDA device; use gloo (it also reduces CUDA tensors) or leave it empty")
        return backend
    return "gloo" if no_cuda else "nccl"


def negotiate(store: Any, rank: int, world: int, *, cuda: bool, requested: str,
              timeout_s: float) -> tuple[str, list[dict[str, Any]]]:
    """Announce this rank in `store`, wait for every rank's announcement, and return (the agreed backend,
    the announcements); BackendError when they conflict (raised on every rank alike)."""
    store.set(KEY.format(rank=rank), json.dumps({"cuda": bool(cuda), "requested": requested}))
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
