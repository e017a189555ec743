"""The stream-rate sets of paper 004 (ScaDLES), Table I, as rate distributions.

==========  ============  =====  ====  ===================================================
preset      distribution  mean   std   drawn as (min_rate = 1)
==========  ============  =====  ====  ===================================================
``S1``      uniform       38     24    U(1, 79.569)      (derived bounds -3.569, 79.569)
``S2``      uniform       300    112   U(106.012, 493.988)
``S1'``     normal        64     24    N(64, 24) truncated below at min_rate (redrawn)
``S2'``     normal        256    28    N(256, 28) truncated below at min_rate (redrawn)
==========  ============  =====  ====  ===================================================

Uniform bounds come from the table's mean and std: a uniform U(low, high) has std (high - low) /
sqrt(12), so low = mean - sqrt(3) std and high = mean + sqrt(3) std. For S1 that gives
low = 38 - 41.569 = -3.569 < 0, which no stream can have; we clip the low bound to min_rate (the
reference code's ranges are not published), keeping high = 79.569. S1 therefore draws from
U(1, 79.569), whose mean is 40.28 and std 22.68 rather than 38 and 24 (the table's own std cannot
be met by a non-negative uniform with mean 38). S2's bounds are positive and used as derived.

"S1p" / "S1prime" (and S2's) are accepted spellings of the primed sets; the canonical name is S1'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RatePreset:
    """One row of Table I: the distribution family of per-device rates and its mean and std."""

    name: str
    distribution: str  # "uniform" or "normal"
    mean: float
    std: float

    def spec(self, min_rate: float = 1.0) -> dict[str, Any]:
        """The distribution spec this preset stands for (uniform bounds derived and clipped)."""
        if self.distribution == "uniform":
            half = math.sqrt(3.0) * self.std
            low, high = max(min_rate, self.mean - half), self.mean + half
            return {"distribution": "uniform", "low": low, "high": high}
        return {"distribution": "normal", "mean": self.mean, "std": self.std}


PRESETS: dict[str, RatePreset] = {
    "S1": RatePreset("S1", "uniform", 38.0, 24.0),
    "S2": RatePreset("S2", "uniform", 300.0, 112.0),
    "S1'": RatePreset("S1'", "normal", 64.0, 24.0),
    "S2'": RatePreset("S2'", "normal", 256.0, 28.0),
}

PRESET_ALIASES: dict[str, str] = {"S1p": "S1'", "S2p": "S2'", "S1prime": "S1'", "S2prime": "S2'"}


def preset(name: str) -> RatePreset:
    """The preset called `name` (or one of its aliases); ValueError listing the choices otherwise."""
    canonical = PRESET_ALIASES.get(name, name)
    if canonical not in PRESETS:
        raise ValueError(f"rates.preset: {name!r} is not allowed; must be one of {', '.join(PRESETS)} "
                         f"(or {', '.join(PRESET_ALIASES)})")
    return PRESETS[canonical]
