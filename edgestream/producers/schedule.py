"""Per-device pacing: sample k of device i is due when the integral of S_i reaches k.

`due_count(t)` = number of samples due by time t = floor(cumulative_i(t)) + 1 (sample 0 at t = 0).
The producer loop asks, at each tick, how many samples each device owes and sends exactly those:
no drift (the schedule is absolute, against one monotonic start), and no catch-up burst beyond what
the schedule itself says.
"""

from __future__ import annotations

import math


def due_count(rate_model, device: int, t: float) -> int:
    """How many samples of `device` are due by run time t (seconds since the producer started)."""
    if t < 0:
        return 0
    return int(math.floor(rate_model.cumulative(device, t) + 1e-9)) + 1
