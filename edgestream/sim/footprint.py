"""How much memory a simulated run needs, from bytes per device (measured), and the refusal of a run
that would not fit.

What a simulated device costs grows with the model: its gradients (every worker has its own, batched
or not), its all-reduce result, and with per-worker replicas its own parameters, optimizer momentum and
nn.Module objects; the rest (stream, context, meter, the request driver's generator, its block of the
stream order) is a fixed amount. Measured on this project's 2-core box (peak RSS of a 3-step run minus
the process before the engine was built, slope between two device counts, batched compute, synthetic
1x8x8 data, batch 8; `mlp` with hidden (8,) (610 parameters) and (128, 64) (17,226 parameters)):

| replicas | per device, fixed | model copies per device |
|---|---|---|
| one shared replica (ddl, scadles, dbs-sgd) | 29 KB -> 32 KB | 2.9 -> 3 |
| per-worker replicas (every other algorithm) | 48 KB -> 48 KB | 8.5 -> 9 |

(e.g. ddl with the 17k-parameter mlp: 199 KB per device measured, 239 KB estimated; local-sgd:
585 KB measured, 668 KB estimated.) A device's batch adds its inputs a few times over (the batch, the
stacked batched-compute input, the first layer's activations), counted at the batch policy's size
(fixed) or its lower bound (rate, available).

The estimate is compared with the memory the run may still use: EDGESTREAM_SIM_MEMORY_BYTES when set,
else the kernel's MemAvailable (/proc/meminfo), of which `HEADROOM` is usable (the rest for the
allocator's slack and the rest of the machine). No figure is known elsewhere: nothing is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgestream import settings

#: algorithms whose simulated workers keep one shared replica (measured: `Replicas.shared` after a run)
ONE_REPLICA = frozenset({"ddl", "scadles", "dbs-sgd"})
#: the memory a simulation may use, in bytes (default: MemAvailable)
MEMORY_ENV = settings.SIM_MEMORY_BYTES.name
#: the share of the available memory an estimate may take
HEADROOM = 0.9
#: copies of a device's batch inputs held at once (batch, stacked input, first activations)
BATCH_COPIES = 3


@dataclass(frozen=True)
class PerDevice:
    """Bytes one simulated device costs: `fixed` plus `model_copies` x the model's parameter bytes."""

    fixed: int
    model_copies: float


PER_DEVICE = {"one replica": PerDevice(32_000, 3.0), "per-worker replicas": PerDevice(48_000, 9.0)}


def replicas_kind(algorithm: str) -> str:
    """"one replica" or "per-worker replicas": how the simulator holds `algorithm`'s models."""
    return "one replica" if algorithm in ONE_REPLICA else "per-worker replicas"


def bytes_per_device(algorithm: str, param_bytes: int, batch_input_bytes: int = 0) -> int:
    """Estimated bytes one device of `algorithm` costs with a model of `param_bytes` and batches of
    `batch_input_bytes` inputs."""
    per = PER_DEVICE[replicas_kind(algorithm)]
    return int(per.fixed + per.model_copies * param_bytes + BATCH_COPIES * batch_input_bytes)


def available_bytes() -> int | None:
    """The memory a simulation may use: EDGESTREAM_SIM_MEMORY_BYTES, else MemAvailable, else None."""
    given = settings.sim_memory_bytes()
    if given is not None:
        return given
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def memory_problem(algorithm: str, devices: int, num_params: int, param_bytes: int,
                   batch_input_bytes: int = 0, available: int | None = None) -> str | None:
    """One line naming devices.count when `devices` devices would not fit in memory (None: they fit, or
    the available memory is unknown). `available`: bytes (default `available_bytes()`)."""
    avail = available_bytes() if available is None else available
    if avail is None:
        return None
    per = bytes_per_device(algorithm, param_bytes, batch_input_bytes)
    need, usable = devices * per, int(avail * HEADROOM)
    if need <= usable:
        return None
    return (f"devices.count: {devices:,} devices of {algorithm} ({replicas_kind(algorithm)}, a model of "
            f"{num_params:,} parameters) need about {_size(need)} ({_size(per)} per device, estimated), more than "
            f"the {_size(usable)} usable of {_size(avail)} available; at most {max(1, usable // per):,} devices "
            f"fit (a smaller model or batch, or an algorithm with one replica, fits more)")
