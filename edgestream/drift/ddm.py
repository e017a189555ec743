"""DDM, the drift detection method (Gama, Medas, Castillo & Rodrigues 2004, "Learning with drift detection"): a
classifier's error rate falls or holds while the data are stationary, so a significant rise above its lowest point
is a drift. It reads 0/1 errors (1: the sample was misclassified) and rises only, by construction.

With n values since the start and p_n their error rate, s_n = sqrt(p_n (1 - p_n) / n) (binomial); after
`warm_start` values the lowest p_n + s_n is remembered as p_min + s_min (a tie takes the newer), and a drift is
reported when

    p_n + s_n > p_min + d s_min,    d = `drift_threshold` (3: about 99% confidence).

Before `warm_start` values nothing is tested (the model's own warm-up, while its errors fall, lowers p_min and is
never a drift). After a report the detector starts afresh. River's DDM also flags a warning zone (d = 2); edgestream
reports drifts only.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from edgestream.drift.base import Detector, DetectorError, as_values
from edgestream.sync.hyperparams import Param


class DDM(Detector):
    """DDM over 0/1 prequential errors (module doc); `statistic()`: `p`, `s`, `p_plus_s`, `p_min_plus_s_min`
    and `drift_level` (p_min + d s_min; before the warm-up ends the minimum is the current p + s)."""

    name = "ddm"
    BINARY = True
    PARAMS: ClassVar[tuple[Param, ...]] = (
        Param("warm_start", 30, "int", ge=0, doc="no test until more values than this since the start"),
        Param("drift_threshold", 3.0, "float", gt=0, doc="d: standard deviations above the minimum that are a drift"),
    )
    STATE = ("count", "errors", "p", "s", "armed", "p_min", "s_min", "drifted")

    def _reset(self) -> None:
        self.count = 0         # values since the start
        self.errors = 0.0      # errors since the start
        self.p = 0.0
        self.s = 0.0
        self.armed = False     # the warm-up is over: p_min, s_min hold the lowest p + s since
        self.p_min = 0.0
        self.s_min = 0.0
        self.drifted = False

    def update(self, value: float) -> bool:
        if self.drifted:
            self._reset()
        if value != 0.0 and value != 1.0:
            raise _not_binary(value)
        self.n += 1
        k = self.count + 1
        self.count = k
        self.errors += value
        p = self.errors / k
        s = math.sqrt(p * (1.0 - p) / k)
        self.p, self.s = p, s
        if k <= self.params["warm_start"]:
            return False
        ps = p + s
        if not self.armed or ps <= self.p_min + self.s_min:
            self.armed, self.p_min, self.s_min = True, p, s
        if ps > self.p_min + self.params["drift_threshold"] * self.s_min:
            self.drifted = True
            self.detections += 1
            return True
        return False

    def update_many(self, values: Any) -> list[int]:
        x = as_values(values)
        bad = (x != 0.0) & (x != 1.0)
        if bad.any():
            at = int(np.argmax(bad))
            raise _not_binary(float(x[at]), at)
        return super().update_many(x)

    def statistic(self) -> dict[str, float]:
        ps = self.p + self.s
        level = self.p_min + self.params["drift_threshold"] * self.s_min if self.armed else ps
        return {"p": self.p, "s": self.s, "p_plus_s": ps,
                "p_min_plus_s_min": self.p_min + self.s_min if self.armed else ps, "drift_level": level}


def _not_binary(value: float, position: int | None = None) -> DetectorError:
    at = "" if position is None else f" at position {position}"
    return DetectorError(f"drift detector ddm: reads 0/1 errors (classification), got {value!r}{at}")
