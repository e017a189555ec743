"""`WorkerContext`: what a worker generator knows about its run — plain data, no engine objects.

The engine builds one per worker (`WorkerContext.from_config` for an `ExperimentConfig`) and passes a
`should_stop` callback. A worker may return different `should_stop()` answers than its peers (each
engine decides by its own clock); algorithms therefore agree on stopping through their next
collective (a stop flag is reduced with the data), so every worker leaves after the same step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from edgestream.models.optim import lr_at


def _never() -> bool:
    return False


@dataclass
class WorkerContext:
    """One worker's view of its run.

    rank, world_size: this worker i and the group size M.
    seed: the run seed (injection draws, seeded compressors).
    params: the algorithm's parameters (defaults merged in by `AlgorithmSpec.resolve`).
    lr, milestones, gamma: base learning rate eta and its step decay; milestones count steps.
    compression: the `compression:` block as a dict ({"name": "none"} = dense).
    injection: the ScaDLES injection block ({"alpha", "beta", "mode"}) or None.
    param_names: names of the trainable parameters (keys of per-tensor compressor state); None = "0", "1", ...
    should_stop: the engine's stop test (max steps, time, target accuracy).
    step: synchronous steps (or rounds) this worker has completed; the worker advances it.
    """

    rank: int
    world_size: int
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    lr: float = 0.1
    milestones: tuple[float, ...] = ()
    gamma: float = 0.2
    compression: dict[str, Any] = field(default_factory=lambda: {"name": "none"})
    injection: dict[str, Any] | None = None
    param_names: list[str] | None = None
    should_stop: Callable[[], bool] = _never
    step: int = 0

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is out of range 0..{self.world_size - 1}")

    def lr_now(self) -> float:
        """eta at the current step: lr * gamma ** (milestones passed)."""
        return lr_at(self.step, self.lr, self.milestones, self.gamma)

    def names(self, count: int) -> list[str]:
        """Per-tensor names for `count` gradients: `param_names` when given, else "0", "1", ..."""
        if self.param_names is not None:
            if len(self.param_names) != count:
                raise ValueError(f"{len(self.param_names)} parameter names for {count} tensors")
            return list(self.param_names)
        return [str(i) for i in range(count)]

    @classmethod
    def from_config(
        cls,
        cfg: Any,
        rank: int,
        should_stop: Callable[[], bool] = _never,
        param_names: list[str] | None = None,
        world_size: int | None = None,
    ) -> WorkerContext:
        """The context of worker `rank` for an `ExperimentConfig` (duck-typed: any object with its fields).

        Algorithm params are validated and merged with defaults; ValueError lists the problems.
        """
        from edgestream.sync.registry import get_algorithm

        spec = get_algorithm(cfg.algorithm.name)
        injection = cfg.algorithm.injection
        if injection is not None and not isinstance(injection, Mapping):
            injection = injection.model_dump()
        compression = cfg.compression.spec() if hasattr(cfg.compression, "spec") else dict(cfg.compression)
        return cls(
            rank=rank,
            world_size=world_size if world_size is not None else cfg.devices.count,
            seed=cfg.seed,
            params=spec.resolve(cfg.algorithm.params),
            lr=cfg.optim.lr,
            milestones=tuple(cfg.optim.milestones),
            gamma=cfg.optim.gamma,
            compression=compression,
            injection=dict(injection) if injection is not None else None,
            param_names=param_names,
            should_stop=should_stop,
        )
