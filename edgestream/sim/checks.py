"""What the simulator refuses before a run starts: a run without an end, devices that would not fit in memory
(each one line naming the config field, `SimConfigError`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from edgestream.runner.engines import EngineError
from edgestream.runner.plan import RunPlan
from edgestream.sim.footprint import memory_problem


class SimConfigError(EngineError):
    """A config the simulator cannot run (bad algorithm params, rates, dataset sizes...); `problems`
    holds one line per problem, as `ConfigError` does."""


def unbounded_problem(cfg: Any) -> None:
    """SimConfigError when the run has no time or step limit (`stop: {}`, continuous training, or a target
    alone): a simulation must end, even when it never reaches its target."""
    stop = getattr(cfg, "stop", None)
    if stop is not None and not stop.bounded:
        what = "continuous training (stop: {})" if stop.continuous else "a target alone"
        raise SimConfigError([f"stop: {what} runs only on engine local (it trains until interrupted); the simulator "
                              "needs an end: give stop.max_time_s or stop.max_steps"])


def fits_problem(plan: RunPlan, model: torch.nn.Module, batch_policy: Any) -> None:
    """SimConfigError (one line naming devices.count) when the run's devices would not fit in the memory
    available, estimated from bytes per device (edgestream.sim.footprint)."""
    params = [p for p in model.parameters() if p.requires_grad]
    num_params = sum(p.numel() for p in params)
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    batch = int(getattr(batch_policy, "size", 0) or getattr(batch_policy, "min", 0) or 1)
    sample_floats = int(np.prod(plan.dataset.shape))
    problem = memory_problem(plan.algorithm.name, plan.world, num_params, param_bytes, batch * sample_floats * 4)
    if problem is not None:
        raise SimConfigError([problem])
