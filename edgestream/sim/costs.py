"""Cost models of the simulator: device compute time and network time (ALGORITHMS.md "Heterogeneity models").

Compute: t_i(b) = (a + c * b) * static_i * (1 + U(0, dynamic)), static factors cycling over devices;
the U(0, dynamic) draws come from one generator per device seeded by (seed, device), so a device's
jitter sequence does not depend on how the other devices' steps interleave.
Network: a message of n bytes takes latency + n / bandwidth; an all-reduce of n bytes over M workers
takes 2 log2(M) latencies (tree) and moves 2 (M - 1) / M * n bytes per worker (ring); an all-gather
moves the other workers' payloads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_TAG_COMPUTE = 7_300_001


@dataclass
class ComputeModel:
    """Virtual step time of each device: t_i(b) = t(b) static_i (1 + U(0, dynamic)), t(b) = a + c b or a
    compute profile's measured curve (`curve`, edgestream.profiles)."""

    a: float                    # seconds per step, fixed part
    c: float                    # seconds per sample
    static: Sequence[float]     # per-device slowdown factors (cycled)
    dynamic: float = 0.0        # up to this fraction of extra time, uniformly random per step
    seed: int = 0
    curve: Callable[[float], float] | None = None  # t(b) of a compute profile; replaces a + c b
    _rngs: dict[int, np.random.Generator] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.a < 0 or self.c < 0 or self.dynamic < 0 or not self.static or min(self.static) <= 0:
            raise ValueError(f"invalid compute model: a={self.a}, c={self.c}, static={list(self.static)}, "
                             f"dynamic={self.dynamic}")

    def factor(self, device: int) -> float:
        """static_i: the device's fixed slowdown factor."""
        return float(self.static[device % len(self.static)])

    def step_time(self, device: int, b: int) -> float:
        """Seconds of one forward/backward of `b` samples on `device` (draws this device's jitter)."""
        jitter = 1.0
        if self.dynamic > 0:
            rng = self._rngs.get(device)
            if rng is None:
                rng = self._rngs[device] = np.random.default_rng([self.seed % 2**64, device, _TAG_COMPUTE])
            jitter += float(rng.uniform(0.0, self.dynamic))
        base = self.curve(b) if self.curve is not None else self.a + self.c * b
        return base * self.factor(device) * jitter


@dataclass
class NetworkModel:
    """One latency and bandwidth shared by every device (the config's devices.network)."""

    latency_s: float
    bandwidth_Bps: float        # bytes per second

    def transfer(self, nbytes: float) -> float:
        """Point-to-point message of `nbytes`."""
        return self.latency_s + nbytes / self.bandwidth_Bps

    def allreduce(self, nbytes: float, m: int) -> float:
        """All-reduce of an `nbytes` message over m workers (0 for one worker)."""
        if m <= 1:
            return 0.0
        # latency of a tree (2 log2 M hops), bandwidth of a ring (2 (M-1)/M of the message per worker)
        return 2 * math.ceil(math.log2(m)) * self.latency_s + 2.0 * (m - 1) / m * nbytes / self.bandwidth_Bps

    def allgather(self, nbytes_each: Sequence[float]) -> float:
        """All-gather where worker j contributes nbytes_each[j]: each receives the others' payloads."""
        m = len(nbytes_each)
        if m <= 1:
            return 0.0
        others = sum(nbytes_each) - min(nbytes_each)
        return math.ceil(math.log2(m)) * self.latency_s + others / self.bandwidth_Bps


def calibrate(model: Any, in_shape: tuple[int, ...], num_classes: int, sizes: tuple[int, int] = (8, 64),
              repeats: int = 5) -> tuple[float, float]:
    """Time the real model's forward/backward on this machine at two batch sizes; fit t = a + c * b.

    Wall-clock timing: a run whose compute model is calibrated is not bit-for-bit repeatable in virtual
    time (set devices.compute.base_s and per_sample_s for that).
    """
    from edgestream.profiles.measure import time_steps

    times = time_steps(model, in_shape, num_classes, sizes, repeats=repeats, warmup=0)
    (b1, b2), (t1, t2) = sizes, times
    c = max((t2 - t1) / (b2 - b1), 1e-7)
    a = max(t1 - c * b1, 1e-5)
    return a, c
