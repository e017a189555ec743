"""Pure decisions on sample counts: batch size b_i, buffer truncation, ScaDLES data injection.

Kafka consumers apply these to offsets (lag, seek, commit) and the simulator to its virtual
buffers, so both engines decide identically. Nothing here reads a clock: times and counts are
arguments. Counting convention under a rate model: sample k is due at due_time(k), so the samples
arrived in (t0, t1] are floor(C(t1)) - floor(C(t0)) (with a 1e-9 tolerance against rounding).

Batch policies (the config's ``algorithm.batch``)
    fixed      b_i = size (default 64); ready when size samples are buffered.
    rate       b_i = clip(round(S_i), min, max) (defaults 8, 1024): what streamed in during the
               last second (ScaDLES, 004 section IV); round is half-up; ready when b_i are buffered.
    available  b_i = clip(available, 1, max) (default max 512): take what is there; ready at >= 1.

Buffer policies (``algorithm.buffer``; 004 section III)
    persist    keep every unconsumed sample (buffer grows as eq. 2: `persist_buffer_size`).
    truncate   keep only what arrived in the last window_s seconds: skip the oldest
               max(0, available - arrived_in_window) samples.

Injection (``algorithm.injection``, 004 section IV): each step a worker sends floor(beta b_i)
samples of its batch to each of ceil(alpha M) distinct other workers chosen at random.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from edgestream.streams._spec import check_keys, choice, number

_EPS = 1e-9  # tolerance for counts computed from float rates and integrals


class _RateModel(Protocol):
    def cumulative(self, device: int, t: float) -> float: ...
    def due_time(self, device: int, k: float) -> float: ...


# ---------------------------------------------------------------- batch size b_i


class BatchPolicy(Protocol):
    """Decides a worker's batch size b_i and when its buffer holds enough to train."""

    name: str

    def target(self, rate: float, available: int) -> int: ...
    def ready(self, target: int, available: int) -> bool: ...


@dataclass(frozen=True)
class FixedBatch:
    """b_i = size whatever the stream does (ddl and the other fixed-batch algorithms)."""

    size: int = 64
    name: str = "fixed"

    def target(self, rate: float, available: int) -> int:
        return self.size

    def ready(self, target: int, available: int) -> bool:
        return available >= target


@dataclass(frozen=True)
class RateBatch:
    """b_i = clip(round(S_i), min, max): train on what streamed in during the last second (ScaDLES)."""

    min: int = 8
    max: int = 1024
    name: str = "rate"

    def target(self, rate: float, available: int) -> int:
        return int(min(self.max, max(self.min, math.floor(rate + 0.5))))

    def ready(self, target: int, available: int) -> bool:
        return available >= target


@dataclass(frozen=True)
class AvailableBatch:
    """b_i = clip(available, 1, max): train on whatever is buffered, never waiting for more than one."""

    max: int = 512
    name: str = "available"

    def target(self, rate: float, available: int) -> int:
        return int(min(self.max, max(1, available)))

    def ready(self, target: int, available: int) -> bool:
        return available >= 1


BATCH_FIELDS: dict[str, tuple[str, ...]] = {"fixed": ("size",), "rate": ("min", "max"), "available": ("max",)}


def build_batch_policy(spec: Mapping[str, Any] | None) -> FixedBatch | RateBatch | AvailableBatch:
    """The batch policy of an ``algorithm.batch`` dict (None: fixed 64). ValueError names bad fields."""
    if spec is None:
        return FixedBatch()
    if not isinstance(spec, Mapping):
        raise ValueError(f"batch: must be a mapping, got {type(spec).__name__}")
    policy = choice("batch", "policy", spec.get("policy"), BATCH_FIELDS)
    check_keys("batch", spec, ("policy", *BATCH_FIELDS[policy]), f"policy {policy!r}")
    if policy == "fixed":
        return FixedBatch(number("batch", spec, "size", 64, ge=1, integer=True))
    if policy == "rate":
        lo = number("batch", spec, "min", 8, ge=1, integer=True)
        hi = number("batch", spec, "max", 1024, ge=1, integer=True)
        if lo > hi:
            raise ValueError(f"batch.min: {lo} is not allowed; must be <= batch.max ({hi})")
        return RateBatch(lo, hi)
    return AvailableBatch(number("batch", spec, "max", 512, ge=1, integer=True))


def samples_arrived(rate_model: _RateModel, device: int, t0: float, t1: float) -> int:
    """Whole samples of `device` that arrive in (t0, t1] under the rate model (0 if t1 <= t0)."""
    if t1 <= t0:
        return 0
    c1 = math.floor(rate_model.cumulative(device, t1) + _EPS)
    c0 = math.floor(rate_model.cumulative(device, t0) + _EPS)
    return max(0, c1 - c0)


def time_until_available(rate_model: _RateModel, device: int, t: float, need: int) -> float:
    """Seconds from t until `need` more whole samples of `device` have arrived (0 if need <= 0).

    The simulator's wait time: a worker holding fewer than b_i samples waits this long for the rest.
    """
    if need <= 0:
        return 0.0
    have = math.floor(rate_model.cumulative(device, t) + _EPS)
    return max(0.0, rate_model.due_time(device, have + need) - t)


# ---------------------------------------------------------------- buffer: persist / truncate


@dataclass(frozen=True)
class PersistBuffer:
    """Keep every unconsumed sample; the buffer grows as eq. 2 when S_i t_i > b_i."""

    window_s: float = 1.0
    name: str = "persist"

    def truncate(self, available: int, arrived_in_window: int) -> int:
        _check_counts(available, arrived_in_window)
        return 0


@dataclass(frozen=True)
class TruncateBuffer:
    """Keep only the samples that arrived in the last window_s seconds; skip the older backlog."""

    window_s: float = 1.0
    name: str = "truncate"

    def truncate(self, available: int, arrived_in_window: int) -> int:
        """How many of the OLDEST buffered samples to skip (the consumer seeks past them)."""
        _check_counts(available, arrived_in_window)
        return max(0, available - arrived_in_window)


BUFFER_POLICIES = ("persist", "truncate")


def build_buffer_policy(name: str, window_s: float = 1.0) -> PersistBuffer | TruncateBuffer:
    """The buffer policy called `name` (``algorithm.buffer``) with its window in seconds."""
    choice("algorithm", "buffer", name, BUFFER_POLICIES)
    window_s = number("buffer", {"window_s": window_s}, "window_s", gt=0)
    return PersistBuffer(window_s) if name == "persist" else TruncateBuffer(window_s)


def arrived_in_window(rate_model: _RateModel, device: int, t: float, window_s: float) -> int:
    """Whole samples of `device` that arrived in (t - window_s, t]: the simulator's input to truncate()."""
    return samples_arrived(rate_model, device, t - window_s, t)


def persist_buffer_size(S: float, t_step: float, b: float, T: int) -> float:
    """Q_i after T timesteps under stream persistence, eq. 2 of 004: Q_i = (t_i S_i - b_i) T + S_i.

    S: stream rate S_i (samples/s); t_step: iteration time t_i (s); b: batch size b_i. The model
    assumes a constant rate with S_i t_i >= b_i (the buffer never drains). Note the paper's
    worked T = 2 case (2 (t_i + 1) S_i - 2 b_i) does not match eq. 2; this follows eq. 2.
    """
    if T < 0:
        raise ValueError(f"T: {T} is not allowed; must be >= 0")
    return (t_step * S - b) * T + S


def _check_counts(available: int, arrived_in_window: int) -> None:
    if available < 0 or arrived_in_window < 0:
        raise ValueError(f"counts must be >= 0 (available={available}, "
                         f"arrived_in_window={arrived_in_window})")


# ---------------------------------------------------------------- ScaDLES data injection


def injection_targets(rng: np.random.Generator, device: int, num_devices: int, alpha: float) -> list[int]:
    """ceil(alpha M) distinct devices other than `device`, at random (at most M - 1), sorted."""
    if not 0 <= device < num_devices:
        raise ValueError(f"device {device} is out of range 0..{num_devices - 1}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"injection.alpha: {alpha} is not allowed; must be in [0, 1]")
    n = min(math.ceil(alpha * num_devices - _EPS), num_devices - 1)
    if n <= 0:
        return []
    others = np.delete(np.arange(num_devices), device)
    return sorted(int(x) for x in rng.choice(others, size=n, replace=False))


def injection_count(beta: float, b_i: int) -> int:
    """floor(beta b_i): how many samples of its batch a worker sends to each chosen peer."""
    if not 0 <= beta <= 1:
        raise ValueError(f"injection.beta: {beta} is not allowed; must be in [0, 1]")
    if b_i < 0:
        raise ValueError(f"b_i: {b_i} is not allowed; must be >= 0")
    return int(math.floor(beta * b_i + _EPS))


@dataclass(frozen=True)
class InjectionPlan:
    """One worker's injection at one step: who receives, and which of its b_i batch samples."""

    targets: list[int]
    indices: list[int]

    @property
    def samples_sent(self) -> int:
        return len(self.targets) * len(self.indices)


@dataclass(frozen=True)
class Injection:
    """ScaDLES injection (alpha, beta) with an RNG per (seed, device, step) shared by both engines."""

    alpha: float
    beta: float
    mode: str = "samples"

    @staticmethod
    def rng(seed: int, device: int, step: int) -> np.random.Generator:
        """The generator for this worker's step: the same draws in the simulator and on Kafka."""
        return np.random.default_rng([seed % 2**64, device, step])

    def targets(self, seed: int, device: int, step: int, num_devices: int) -> list[int]:
        return injection_targets(self.rng(seed, device, step), device, num_devices, self.alpha)

    def count(self, b_i: int) -> int:
        return injection_count(self.beta, b_i)

    def plan(self, seed: int, device: int, step: int, num_devices: int, b_i: int) -> InjectionPlan:
        """Targets, then min(floor(beta b_i), b_i) distinct batch positions, from one step RNG."""
        rng = self.rng(seed, device, step)
        targets = injection_targets(rng, device, num_devices, self.alpha)
        count = min(injection_count(self.beta, b_i), b_i)
        if not targets or count == 0:
            return InjectionPlan(targets, [])
        return InjectionPlan(targets, [int(i) for i in rng.choice(b_i, size=count, replace=False)])


INJECTION_FIELDS = ("alpha", "beta", "mode")
INJECTION_MODES = ("samples", "labels")


def build_injection(spec: Mapping[str, Any] | None) -> Injection | None:
    """None when injection is off, else the (alpha, beta) policy; ValueError names bad fields."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise ValueError(f"injection: must be a mapping or null, got {type(spec).__name__}")
    check_keys("injection", spec, INJECTION_FIELDS)
    alpha = number("injection", spec, "alpha", 0.1, gt=0)
    beta = number("injection", spec, "beta", 0.1, gt=0)
    if alpha > 1:
        raise ValueError(f"injection.alpha: {alpha} is not allowed; must be <= 1")
    if beta > 1:
        raise ValueError(f"injection.beta: {beta} is not allowed; must be <= 1")
    mode = choice("injection", "mode", spec.get("mode", "samples"), INJECTION_MODES)
    return Injection(float(alpha), float(beta), mode)
