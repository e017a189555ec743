"""ADWIN, adaptive windowing (Bifet & Gavaldà 2007, "Learning from time-changing data with adaptive windowing",
ADWIN2 with exponential histograms): keep a window W of the recent errors, and cut it where an older part W0 and a
newer part W1 have means that differ by more than chance allows.

The window is compressed into buckets: level i holds at most M (`max_buckets`) buckets of 2^i values each (their
sum and their sum of squared deviations); a value enters level 0, and when a level holds M + 1 buckets its two
oldest merge into one of the next level (Chan et al.'s pairwise update of the squared deviations). The window's
width |W|, sum and squared deviations are kept exactly as values enter.

Every `clock` values (once |W| > `grace_period`), every boundary between buckets splits W into W0 (older, n0
values, mean m0) and W1 (newer, n1, m1), both of at least `min_window_length` (l) values, and tests

    |m1 - m0| > eps,   eps = sqrt(2 (1/k0 + 1/k1) var(W) d') + 2/3 (1/k0 + 1/k1) d',
    k_j = n_j - l + 1,  d' = ln(2 ln|W| / delta),  var(W) = the window's (population) variance,

the paper's Bernstein-style bound with delta' = delta / ln|W| (the form MOA and River use). Which cuts count:
`direction` "up" (the default) reports a cut only when m1 > m0 (the error rose); a cut the other way (the model
improving, e.g. its own warm-up) drops the window's oldest bucket and tests again, as ADWIN shrinks its window,
without a report. "down" is the mirror; "both" reports any cut (River's ADWIN). After a report the detector
starts afresh (as River's does).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from edgestream.drift.base import Detector, as_finite, not_finite
from edgestream.sync.hyperparams import Param

DIRECTIONS = ("up", "down", "both")


class ADWIN(Detector):
    """ADWIN over the prequential errors (module doc); `statistic()` at a detection: `width` (|W| then), `mean`
    (its mean), `mean_old` / `mean_new` and `n_old` / `n_new` (W0 and W1 at the cut) and `epsilon` (the bound)."""

    name = "adwin"
    PARAMS: ClassVar[tuple[Param, ...]] = (
        Param("delta", 0.002, "float", gt=0, lt=1, doc="confidence of a cut: a smaller delta, fewer false alarms"),
        Param("clock", 32, "int", ge=1, doc="test the cuts every `clock` values"),
        Param("max_buckets", 5, "int", ge=1, doc="buckets of one size kept before the two oldest merge (M)"),
        Param("min_window_length", 5, "int", ge=1, doc="the fewest values each side of a cut holds"),
        Param("grace_period", 10, "int", ge=0, doc="no test until the window holds more values than this"),
        Param("direction", "up", "choice", choices=DIRECTIONS,
              doc="which cuts are drifts: up (the error rose), down, both"),
    )
    STATE = ("width", "total", "var", "tick", "sums", "sqdev", "drifted", "cut")

    def _reset(self) -> None:
        self.width = 0           # |W|
        self.total = 0.0         # the sum of W
        self.var = 0.0           # the sum of squared deviations from W's mean
        self.tick = 0            # values since the last reset (the clock)
        self.sums: list[list[float]] = [[]]    # sums[i]: the sums of level i's buckets (2^i values), oldest first
        self.sqdev: list[list[float]] = [[]]   # their sums of squared deviations
        self.drifted = False
        self.cut: list[float] = []             # at a detection: width, n_old, n_new, mean_old, mean_new, epsilon

    # ------------------------------------------------------------------ values in
    def update(self, value: float) -> bool:
        if not math.isfinite(value):
            raise not_finite(self.name, value)
        return bool(self._feed([float(value)])[0])

    def update_many(self, values: Any) -> list[int]:
        found, self.last_statistics = self._feed(as_finite(self.name, values).tolist())
        return found

    def _feed(self, xs: list[float]) -> tuple[list[int], list[dict[str, float]]]:
        """Take `xs` in turn (the one insertion of both `update` and `update_many`): the positions of the
        detections and `statistic()` at each. The window's figures stay in local variables between cut tests."""
        found: list[int] = []
        stats: list[dict[str, float]] = []
        m, clock, grace = self.params["max_buckets"], self.params["clock"], self.params["grace_period"]
        i, count = 0, len(xs)
        while i < count:
            if self.drifted:
                self._reset()
            w, total, var, tick = self.width, self.total, self.var, self.tick
            level, sq = self.sums[0], self.sqdev[0]
            hit = False
            while i < count:
                value = xs[i]
                i += 1
                w += 1
                if w > 1:
                    d = value - total / (w - 1)
                    var += (w - 1) * d * d / w
                total += value
                level.append(value)
                sq.append(0.0)
                if len(level) > m:
                    self._merge()
                tick += 1
                if tick % clock == 0 and w > grace and w >= 2:
                    self.width, self.total, self.var, self.tick = w, total, var, tick
                    if self._test():
                        hit = True
                        break
                    w, total, var = self.width, self.total, self.var  # a cut the other way shrank the window
            self.width, self.total, self.var, self.tick = w, total, var, tick
            if hit:
                found.append(i - 1)
                stats.append(self.statistic())
        self.n += count
        return found, stats

    def _merge(self) -> None:
        """Merge the two oldest buckets of each full level into one of the next, as far as levels overflow."""
        m = self.params["max_buckets"]
        sums, sqdev = self.sums, self.sqdev
        i = 0
        while len(sums[i]) > m:
            size = 1 << i
            a, b = sums[i][0], sums[i][1]
            mu_a, mu_b = a / size, b / size
            merged = sqdev[i][0] + sqdev[i][1] + size * 0.5 * (mu_a - mu_b) * (mu_a - mu_b)
            del sums[i][:2], sqdev[i][:2]
            if i + 1 == len(sums):
                sums.append([])
                sqdev.append([])
            sums[i + 1].append(a + b)
            sqdev[i + 1].append(merged)
            i += 1

    # ------------------------------------------------------------------ cuts
    def _test(self) -> bool:
        """Test every cut, oldest first; True on a reported one. A cut the other way drops the oldest bucket and
        the test starts again (the window shrinks), as ADWIN does."""
        delta, mwl = self.params["delta"], self.params["min_window_length"]
        direction = self.params["direction"]
        while True:
            w = self.width
            if w < 2:
                return False
            var_w = max(self.var / w, 0.0)   # >= 0 but for rounding after a bucket is dropped
            dp = math.log(2.0 * math.log(w) / delta)
            c = 2.0 / 3.0 * dp
            n0, u0, n1, u1 = 0, 0.0, w, self.total
            found = 0.0
            for i in range(len(self.sums) - 1, -1, -1):
                size = 1 << i
                for t in self.sums[i]:
                    n0 += size
                    n1 -= size
                    u0 += t
                    u1 -= t
                    if n1 < mwl:
                        break
                    if n0 < mwl:
                        continue
                    diff = u0 / n0 - u1 / n1          # older minus newer
                    m = 1.0 / (n0 - mwl + 1) + 1.0 / (n1 - mwl + 1)
                    bound = 2.0 * m * var_w * dp
                    if diff * diff <= bound:            # |diff| <= sqrt(bound) < eps: no cut, and no sqrt
                        continue
                    eps = math.sqrt(bound) + c * m
                    if abs(diff) > eps:
                        found = diff
                        break
                else:
                    continue
                break
            if not found:
                return False
            rising = found < 0
            if direction == "both" or rising == (direction == "up"):
                self.drifted = True
                self.detections += 1
                self.cut = [float(w), float(n0), float(n1), u0 / n0, u1 / n1, eps]
                return True
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        """Drop the window's oldest bucket, taking its values out of |W|, the sum and the squared deviations."""
        top = len(self.sums) - 1
        size = 1 << top
        u, v = self.sums[top].pop(0), self.sqdev[top].pop(0)
        mu = u / size
        self.width -= size
        self.total -= u
        w = self.width
        mu_w = self.total / w
        self.var -= v + size * w * (mu - mu_w) * (mu - mu_w) / (size + w)
        while len(self.sums) > 1 and not self.sums[-1]:
            self.sums.pop()
            self.sqdev.pop()

    # ------------------------------------------------------------------ figures
    def statistic(self) -> dict[str, float]:
        if self.drifted:
            w, n0, n1, m0, m1, eps = self.cut
            return {"width": w, "mean": self.total / self.width, "mean_old": m0, "mean_new": m1, "n_old": n0,
                    "n_new": n1, "epsilon": eps}
        return {"width": float(self.width), "mean": self.total / self.width if self.width else 0.0}
