"""Page-Hinkley, the CUSUM test for a change in the mean (Page 1954, "Continuous inspection schemes"; the fading
form of Sebastião & Fernandes 2017, as River's PageHinkley): how far the errors have run above (or below) their
mean since the detector last started.

With x_t the t-th error since the start, its running mean xbar_t, the allowed slack delta and the fading factor
alpha (1 keeps every term):

    U_t = alpha U_{t-1} + (x_t - xbar_t) - delta,   up:   PH_t = U_t - min_{s<=t} U_s
    L_t = alpha L_{t-1} + (x_t - xbar_t) + delta,   down: PH_t = max_{s<=t} L_s - L_t

and a drift is reported when PH_t > `threshold` (lambda), from the `min_instances`-th value on. `direction` "up"
(the default: the error rose) tests U only, "down" L only, "both" either (River's `mode`; River's default is
"both"). The mean is that of every value since the start (River's), so a long warm-up with high errors lifts it
and delays a later rise: ADWIN, whose window drops the warm-up, suits a model that is still learning. `threshold`
and `delta` are in the errors' units: the defaults suit 0/1 errors, and absolute errors of a regression on a
scale near 1. After a report the detector starts afresh.
"""

from __future__ import annotations

import math
from typing import ClassVar

from edgestream.drift.base import Detector, not_finite
from edgestream.sync.hyperparams import Param

DIRECTIONS = ("up", "down", "both")


class PageHinkley(Detector):
    """Page-Hinkley over the prequential errors (module doc); `statistic()`: `statistic` (PH_t, the larger side's
    with "both"), `threshold` (lambda), `mean` (xbar_t)."""

    name = "page_hinkley"
    PARAMS: ClassVar[tuple[Param, ...]] = (
        Param("min_instances", 30, "int", ge=1, doc="no report before this many values since the start"),
        Param("delta", 0.005, "float", ge=0, doc="the change of the mean tolerated (the errors' units)"),
        Param("threshold", 50.0, "float", gt=0, doc="lambda: PH_t above it is a drift (the errors' units)"),
        Param("alpha", 1 - 0.0001, "float", gt=0, le=1, doc="fading factor of the cumulative sums"),
        Param("direction", "up", "choice", choices=DIRECTIONS,
              doc="which changes are drifts: up (the error rose), down, both"),
    )
    STATE = ("count", "mean", "up", "up_min", "down", "down_max", "ph", "drifted")

    def _reset(self) -> None:
        self.count = 0        # values since the start
        self.mean = 0.0
        self.up = 0.0         # U_t
        self.up_min = 0.0     # min U (set by the first value)
        self.down = 0.0       # L_t
        self.down_max = 0.0   # max L (set by the first value)
        self.ph = 0.0         # PH_t of `direction`
        self.drifted = False

    def update(self, value: float) -> bool:
        if self.drifted:
            self._reset()
        if not math.isfinite(value):
            raise not_finite(self.name, value)
        self.n += 1
        p = self.params
        k = self.count + 1
        self.count = k
        self.mean += (1.0 / k) * (value - self.mean)
        dev = value - self.mean
        alpha, delta = p["alpha"], p["delta"]
        self.up = up = alpha * self.up + dev - delta
        self.down = down = alpha * self.down + dev + delta
        if k == 1 or up < self.up_min:
            self.up_min = up
        if k == 1 or down > self.down_max:
            self.down_max = down
        direction = p["direction"]
        if direction == "up":
            ph = up - self.up_min
        elif direction == "down":
            ph = self.down_max - down
        else:
            ph = max(up - self.up_min, self.down_max - down)
        self.ph = ph
        if k >= p["min_instances"] and ph > p["threshold"]:
            self.drifted = True
            self.detections += 1
            return True
        return False

    def statistic(self) -> dict[str, float]:
        return {"statistic": self.ph, "threshold": float(self.params["threshold"]), "mean": self.mean}
