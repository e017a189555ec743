"""Which device a rank computes on: the rank-to-GPU rule (docs/runtime.md "GPUs: which rank on which").

`place` is the rule as a pure function of what a process sees:

* EDGESTREAM_DEVICE=cpu: the CPU (runtime.gpus is then ignored);
* otherwise, with no CUDA device visible: the CPU (EDGESTREAM_DEVICE=cuda makes that an error);
* `runtime.gpus: [i0, i1, ...]`: local rank r takes cuda:gpus[r % len(gpus)];
* by default: local rank r takes cuda:(r % device_count).

The indices are torch's: they count the GPUs the process sees, i.e. those CUDA_VISIBLE_DEVICES lists,
in its order (all of them when it is unset), so `CUDA_VISIBLE_DEVICES=2,3` makes cuda:0 the third GPU.
Several ranks may land on one GPU (more ranks than GPUs on a host, or compose trainer containers that
each see their GPU as cuda:0): they train there, and the backend negotiation (edgestream.trainer.backend)
tells them apart by the GPU's UUID and picks gloo for their collectives, since NCCL refuses two ranks on
one GPU. The trainer ranks of a parameter-server run (its workers) take their device by the same rule;
the parameter server itself keeps its model on the CPU (it only applies the pushes Kafka brings).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgestream import settings
from edgestream.trainer.backend import BackendError, check_requested, ranks_text, shared_gpus

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    pass

TOLD = ("cpu", "cuda")


class GpuError(RuntimeError):
    """The device a rank was told to use does not exist here (one line)."""


@dataclass(frozen=True)
class Placement:
    """Where a rank computes: `device` "cpu" or "cuda:<index>", and how the rule chose it (`why`)."""

    device: str
    index: int | None
    why: str
    gpu: str | None = None    # the GPU's identity (UUID) once `identify`d; None on the CPU
    name: str | None = None   # the GPU's model name once `identify`d

    @property
    def cuda(self) -> bool:
        return self.index is not None

    def text(self) -> str:
        """One line for the rank log: `cuda:0 (NVIDIA H100, GPU-5c1f...: local rank 1 % 1 GPU)`."""
        what = ", ".join(x for x in (self.name, self.gpu) if x)
        return f"{self.device} ({what + ': ' if what else ''}{self.why})"


def check_told(value: str | None) -> str:
    """EDGESTREAM_DEVICE as given ("" = automatic); GpuError names a value that is not allowed."""
    value = (value or "").strip().lower()
    if value and value not in TOLD:
        raise GpuError(f"EDGESTREAM_DEVICE={value!r} is not allowed; must be cpu, cuda or empty (automatic: a GPU "
                       "by the rank-to-GPU rule when CUDA is there, else the CPU)")
    return value


def _visible(count: int, visible: str | None) -> str:
    gpus = "no GPU" if count == 0 else f"{count} GPU{'s' * (count != 1)} (cuda:0{f'-{count - 1}' * (count > 1)})"
    return gpus + (f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "")


def unusable_gpu(torch_version: str, torch_cuda: str | None, driver: str | None, jetson: str | None,
                 visible: str | None = None) -> str | None:
    """Why this host's NVIDIA GPU is not one torch can use, when it has one (`driver`: the kernel module's
    version, from /proc/driver/nvidia/version; `jetson`: the L4T release, from /etc/nv_tegra_release) and
    CUDA_VISIBLE_DEVICES (`visible`) does not hide it: a CPU build of torch, or one whose CUDA the driver
    does not run (too old a driver). None where no GPU is known to be here."""
    if (driver is None and jetson is None) or (visible is not None and visible.strip() in ("", "-1")):
        return None
    here = f"an NVIDIA GPU is here (driver {driver})" if driver else f"this is a Jetson ({jetson})"
    if torch_cuda is None:
        why = f"this torch ({torch_version}) is a CPU build"
    else:
        why = (f"this torch ({torch_version}, built for CUDA {torch_cuda}) cannot use it: a driver too old for "
               "that CUDA, or no GPU device in this process's namespace")
    return (f"{here}, but {why}; make install TORCH=host PYTHON=/path/to/python uses that interpreter's torch "
            "built for this host (docs/runtime.md, \"Your own torch\")")


def host_gpu(driver_file: str = "/proc/driver/nvidia/version",
             tegra_file: str = "/etc/nv_tegra_release") -> tuple[str | None, str | None]:
    """(NVIDIA driver version, Jetson L4T release) of this host, each None when its file is not there."""
    driver = jetson = None
    try:
        with open(driver_file) as f:
            found = re.search(r"Kernel Module(?: for \S+)?\s+([0-9][0-9.]*)", f.read())
        driver = found.group(1) if found else "of unknown version"
    except OSError:
        pass
    try:
        with open(tegra_file) as f:
            jetson = f.readline().strip().lstrip("# ").split(",")[0].strip() or "L4T"
    except OSError:
        pass
    return driver, jetson


def place(local_rank: int, device_count: int, *, gpus: Sequence[int] | None = None, told: str = "",
          visible: str | None = None, unusable: str | None = None) -> Placement:
    """The device of local rank `local_rank` on a host where the process sees `device_count` GPUs (module
    doc). `gpus`: runtime.gpus (None: all); `told`: EDGESTREAM_DEVICE ("", "cpu", "cuda"); `visible`:
    CUDA_VISIBLE_DEVICES as set (only named in errors); `unusable`: why a GPU of this host is not one torch
    can use (`unusable_gpu`), said where the rule falls back to the CPU. GpuError: one line naming what is
    not there."""
    told = check_told(told)
    if local_rank < 0:
        raise GpuError(f"LOCAL_RANK={local_rank} is not allowed; must be >= 0")
    if told == "cpu":
        return Placement("cpu", None, "EDGESTREAM_DEVICE=cpu")
    if device_count <= 0:
        if told == "cuda":
            raise GpuError(f"EDGESTREAM_DEVICE=cuda but this process sees {_visible(0, visible)}"
                           + (f" ({unusable})" if unusable else "; leave it empty or set cpu"))
        return Placement("cpu", None, "no CUDA device" + (" (runtime.gpus ignored)" if gpus else "")
                         + (f": {unusable}" if unusable else ""))
    if gpus:
        missing = sorted({i for i in gpus if not 0 <= i < device_count})
        if missing:
            raise GpuError(f"runtime.gpus: {list(gpus)} names GPU {', '.join(map(str, missing))}, but this process "
                           f"sees {_visible(device_count, visible)}; list indices among those")
        index = gpus[local_rank % len(gpus)]
        return Placement(f"cuda:{index}", index, f"runtime.gpus {list(gpus)}[local rank {local_rank} % {len(gpus)}]")
    index = local_rank % device_count
    return Placement(f"cuda:{index}", index,
                     f"local rank {local_rank} % {device_count} GPU{'s' * (device_count != 1)}")


def gpu_identity(index: int) -> tuple[str, str]:
    """(UUID, model name) of visible GPU `index`: the UUID tells ranks that share one GPU apart from ranks
    on GPUs of their own, also across containers that each see it as cuda:0. Without a UUID (an old
    torch or driver): the host name and PCI bus, then the host and index."""
    import torch

    props = torch.cuda.get_device_properties(index)
    raw = getattr(props, "uuid", None)
    uuid = str(raw or "")
    if " object at " in uuid:  # no readable str(): the 16 bytes as 8-4-4-4-12 hex
        h = bytes(getattr(raw, "bytes", b"")).hex()
        uuid = "-".join((h[:8], h[8:12], h[12:16], h[16:20], h[20:])) if len(h) == 32 else ""
    if uuid:
        return (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"), props.name
    bus = getattr(props, "pci_bus_id", None)
    where = f"pci {getattr(props, 'pci_domain_id', 0)}:{bus}" if bus is not None else f"cuda:{index}"
    return f"{socket.gethostname()}/{where}", props.name


def _seen(told: str, env: Mapping[str, str]) -> tuple[int, str | None, str | None]:
    """What `place` needs of this process: the GPUs torch sees (none asked for when told cpu),
    CUDA_VISIBLE_DEVICES, and why a GPU of the host is unusable where none is seen (`unusable_gpu`)."""
    import torch

    count = torch.cuda.device_count() if told != "cpu" and torch.cuda.is_available() else 0
    visible = env.get("CUDA_VISIBLE_DEVICES")
    unusable = (unusable_gpu(torch.__version__, torch.version.cuda, *host_gpu(), visible=visible)
                if count == 0 and told != "cpu" else None)
    return count, visible, unusable


def device_for(local_rank: int, gpus: Sequence[int] | None = None,
               environ: Mapping[str, str] | None = None) -> Placement:
    """This process's Placement by `place`, from EDGESTREAM_DEVICE, CUDA_VISIBLE_DEVICES, runtime.gpus
    and what torch sees, with the GPU's identity; GpuError as `place`."""

    env = os.environ if environ is None else environ
    told = check_told(settings.device(environ))
    count, visible, unusable = _seen(told, env)
    placed = place(local_rank, count, gpus=gpus, told=told, visible=visible, unusable=unusable)
    if placed.index is None:
        return placed
    uuid, name = gpu_identity(placed.index)
    return Placement(placed.device, placed.index, placed.why, uuid, name)


def refusal(placements: Sequence[Placement], requested: str) -> str | None:
    """One line when `requested` (EDGESTREAM_BACKEND) cannot work for ranks placed as `placements` on one
    host -- nccl with a rank on the CPU or ranks sharing a GPU -- else None. Knowable before any trainer
    starts, so the local engine refuses it there (the trainers' rendezvous says the same otherwise)."""
    if requested != "nccl":
        return None
    cpu = [r for r, p in enumerate(placements) if not p.cuda]
    if cpu:
        return (f"EDGESTREAM_BACKEND=nccl but {ranks_text(cpu)} would compute on the CPU ({placements[cpu[0]].why}); "
                "use gloo (it also reduces CUDA tensors) or leave it empty")
    # the rendezvous's grouping (backend.shared_gpus), by device: one host, so cuda:i names one GPU
    shared = shared_gpus([{"cuda": True, "gpu": str(p.device)} for p in placements])
    if shared:
        n = len({str(p.device) for p in placements})
        return (f"EDGESTREAM_BACKEND=nccl but {len(placements)} ranks on {n} GPU{'s' * (n != 1)}: "
                + "; ".join(f"{ranks_text(rs)} share {dev}" for dev, rs in shared)
                + " (NCCL needs a GPU of its own per rank); use gloo, give each rank its own GPU "
                "(runtime.gpus, CUDA_VISIBLE_DEVICES) or leave it empty")
    return None


def check_local(world: int, gpus: Sequence[int] | None = None, environ: Mapping[str, str] | None = None, *,
                collectives: bool = True) -> str | None:
    """What `edgestream run --engine local` refuses before it starts anything, as one line (None: nothing):
    its ranks 0..world-1 all on this host (LOCAL_RANK = rank) placed by `place` -- an EDGESTREAM_DEVICE or
    runtime.gpus that does not fit this host, an EDGESTREAM_BACKEND not allowed or a told nccl that cannot
    work (`refusal`; `collectives` False: a parameter-server run, whose workers use no backend). Asks CUDA
    only when one of those is set."""
    env = os.environ if environ is None else environ
    if not (settings.backend(environ) or settings.device(environ) or gpus):
        return None
    try:
        requested = check_requested(settings.backend(environ))
        told = check_told(settings.device(environ))
        count, visible, unusable = _seen(told, env)
        placements = [place(r, count, gpus=gpus, told=told, visible=visible, unusable=unusable) for r in range(world)]
    except (GpuError, BackendError) as exc:
        return str(exc)
    return refusal(placements, requested) if collectives else None
