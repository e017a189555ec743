"""adsp's scheduler search (Hu, Wang & Wu, AAAI 2020; paper 000 section 4.2 and Alg. 1): the loss-curve fit,
the reward of an evaluation window and the hill-climb over the per-period commit increment D
(`CommitRateSearch`). The worker, the PS and the checkpoints that use them: edgestream.sync.adsp.

Reward (`window_reward`): the window's loss samples (t, l), t measured from the epoch's start, are
smoothed to WINDOW_POINTS (5) points, the means of equal-time bins ("a few" points per window, as the
paper collects them), fitted to l = 1/(a1^2 t + a2) + a3 with the asymptote a3 = 0, and
r = a1^2 / (1/(l* - a3) - a2) = 1/t*, the inverse of the predicted time to reach l*, bounded by
1/t_end, t_end the window's end (a window whose curve reached l* before it ended scores as reaching
it at its end: no better than the window before, so the climb stops there instead of running up). l* = target_loss,
or (null) 0.8 x the mean loss of the epoch's first window, fixed for the epoch so that rewards
compare. A window with fewer than 3 points has reward -inf; an l* the fitted curve never reaches
(a1^2 <= 0: the loss is not falling) reward 0. Departure from the paper, which fits a1, a2 and a3:
a3 is not identifiable from a few points of a one-window stretch of the curve, so noise decides it
(fitting every mini-batch loss with a3 free gave a3 around -16,000 and rewards jumping between 0.49
and 6.4 from window to window); a training loss's asymptote is ~0, and with a3 = 0 the fit is a
linear regression of 1/l on t. On a loss curve whose best commit rate is known
(tests/kafka/test_ps_adsp.py), the search settles on it in 27-28 of 30 noisy trials with a3 = 0 against
12-14 with a3 fitted (>= 0) on the same smoothed points. `fit_loss_curve` (the paper's 3-parameter
fit, a3 bounded to [0, min l) for positive losses) stays for analysis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: smoothed (t, loss) points per evaluation window that the reward is fitted to
WINDOW_POINTS = 5


# ---------------------------------------------------------------- the reward (000 section 4.2)


def _linear_fit(t: np.ndarray, l: np.ndarray, a3: float) -> tuple[float, float, float]:
    """For a given a3: least squares of 1/(l - a3) = A t + B, and the squared error of the curve in
    loss space (inf where the curve has a pole in the samples' range)."""
    y = 1.0 / (l - a3)
    tm, ym = t.mean(), y.mean()
    dt = t - tm
    var = float(dt @ dt)
    slope = float(dt @ (y - ym)) / var if var > 0 else 0.0
    icpt = float(ym - slope * tm)
    den = slope * t + icpt
    if np.any(den <= 0):
        return slope, icpt, math.inf
    r = 1.0 / den + a3 - l
    return slope, icpt, float(r @ r)


def fit_loss_curve(ts: Sequence[float], losses: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares fit of l = 1/(a1^2 t + a2) + a3 to samples (t, l); returns (a1^2, a2, a3).

    Deterministic profile least squares: for a fixed a3 the model is linear in 1/(l - a3) (A t + B,
    solved exactly); a3 < min(l) is searched on a log grid of min(l) - a3 spanning 1e-6 .. 1e4 times the
    losses' scale (down to a3 = 0 when the losses are positive: a loss's asymptote is not negative), then
    refined by golden section between the best grid point's neighbours, minimising the squared error in
    loss space. Exact on noiseless curves (to rounding). Needs >= 3 samples at >= 2 distinct times."""
    t = np.asarray(ts, dtype=np.float64)
    l = np.asarray(losses, dtype=np.float64)
    if t.shape != l.shape or t.size < 3 or np.unique(t).size < 2:
        raise ValueError(f"fit_loss_curve needs >= 3 samples at >= 2 distinct times, got {t.size}")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(l))):
        raise ValueError("fit_loss_curve: samples must be finite")
    lmin = float(l.min())
    scale = max(abs(lmin), float(l.max() - lmin), 1e-12)

    def sse(log_u: float) -> float:
        return _linear_fit(t, l, lmin - math.exp(log_u))[2]

    # a3 is the loss the curve tends to: a training loss (cross-entropy) is >= 0, so a3 in [0, min l)
    # when the losses are positive; unbounded below, noisy samples fit a3 of -1e4 and a meaningless a1^2
    top = math.log(lmin) if lmin > scale * 1e-6 else math.log(scale * 1e4)
    grid = np.linspace(math.log(scale * 1e-6), top, 241)
    errs = [sse(float(g)) for g in grid]
    k = int(np.argmin(errs))
    lo, hi = float(grid[max(k - 1, 0)]), float(grid[min(k + 1, grid.size - 1)])
    inv = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - inv * (hi - lo), lo + inv * (hi - lo)
    f1, f2 = sse(x1), sse(x2)
    for _ in range(120):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - inv * (hi - lo)
            f1 = sse(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + inv * (hi - lo)
            f2 = sse(x2)
    best = min((errs[k], float(grid[k])), (f1, x1), (f2, x2))[1]
    a3 = lmin - math.exp(best)
    slope, icpt, _ = _linear_fit(t, l, a3)
    return slope, icpt, a3


def reward_of(a1sq: float, a2: float, a3: float, target: float, cap: float = math.inf) -> float:
    """r = a1^2 / (1/(l* - a3) - a2): 1/t*, t* the time the fitted curve reaches l* (000 section 4.2),
    at most `cap`. 0 when it never does (l* <= a3, or the loss is not falling: a1^2 <= 0); `cap` when it
    already has at t = 0 (or sooner than 1/cap)."""
    if a1sq <= 0 or target <= a3:
        return 0.0
    den = 1.0 / (target - a3) - a2
    return cap if den <= 0 else min(cap, a1sq / den)


def reward(ts: Sequence[float], losses: Sequence[float], target: float, cap: float = math.inf) -> float:
    """The reward of loss samples (t, l): fit, then `reward_of`; -inf with fewer than 3 samples (or
    all at one time): no evidence."""
    if len(ts) < 3 or len(set(float(x) for x in ts)) < 2:
        return -math.inf
    return reward_of(*fit_loss_curve(ts, losses), target, cap)


def smooth(ts: Sequence[float], losses: Sequence[float], points: int) -> tuple[list[float], list[float]]:
    """`points` smoothed (t, loss) pairs of a window's samples: the window's time range cut into `points`
    equal bins, each non-empty bin's mean time and mean loss (the paper collects "a few" points per
    window, at its start, middle and end; one mini-batch loss each would be noise)."""
    if not ts:
        return [], []
    t = np.asarray(ts, dtype=np.float64)
    l = np.asarray(losses, dtype=np.float64)
    lo, hi = float(t.min()), float(t.max())
    if hi <= lo:
        return [float(t.mean())], [float(l.mean())]
    idx = np.minimum(((t - lo) / (hi - lo) * points).astype(np.int64), points - 1)
    out_t, out_l = [], []
    for b in range(points):
        m = idx == b
        if m.any():
            out_t.append(float(t[m].mean()))
            out_l.append(float(l[m].mean()))
    return out_t, out_l


def window_reward(ts: Sequence[float], losses: Sequence[float], target: float, t_end: float) -> float:
    """The reward of one evaluation window ending at `t_end` (seconds since the epoch's start; the samples'
    t are too): its samples smoothed to WINDOW_POINTS points, fitted with the asymptote a3 = 0 (see the
    module doc), r = 1/t* bounded by 1/t_end: a curve that reached l* before the window ended scores as
    reaching it at the end, so windows past l* compare as no better than the last one before (unbounded, a
    loss already below l* scored infinity and drove the climb upward). -inf below 3 points."""
    t, l = smooth(ts, losses, WINDOW_POINTS)
    if len(t) < 3:
        return -math.inf
    slope, icpt, _ = _linear_fit(np.asarray(t), np.asarray(l), 0.0)
    return reward_of(slope, icpt, 0.0, target, 1.0 / t_end if t_end > 0 else math.inf)


# ---------------------------------------------------------------- the search (Alg. 1)


class CommitRateSearch:
    """Alg. 1's DecideCommitRate as a state machine over evaluation windows: `start()` at an epoch's
    start (D = 1); `window_done(r)` with the reward of the window just run returns the D to run next
    and whether the search is still evaluating. Plain values only (`state`/`load`)."""

    def __init__(self) -> None:
        self.base = 1           # the D the search stands on (Alg. 1's C_target)
        self.d = 1              # the D running now
        self.r_base: float | None = None
        self.searching = True
        self.trace: list[tuple[int, float]] = []  # (D evaluated, reward), this epoch

    def start(self) -> int:
        self.base, self.d, self.r_base, self.searching, self.trace = 1, 1, None, True, []
        return self.d

    def window_done(self, r: float) -> int:
        """The window that ran `self.d` ended with reward r: the next D (unchanged once settled)."""
        if not self.searching:
            return self.d
        self.trace.append((self.d, float(r)))
        if self.r_base is None:            # evaluated the base: now evaluate base + 1
            self.r_base = r
            self.d = self.base + 1
        elif r > self.r_base:              # base + 1 is better: stand on it, evaluate one more
            self.base, self.r_base = self.d, r
            self.d = self.base + 1
        else:                              # no improvement: the base for the rest of the epoch
            self.d, self.searching = self.base, False
        return self.d

    def state(self) -> dict[str, Any]:
        return {"base": self.base, "d": self.d, "r_base": self.r_base, "searching": self.searching,
                "trace": [[d, r] for d, r in self.trace]}

    def load(self, st: Mapping[str, Any]) -> None:
        self.base, self.d = int(st["base"]), int(st["d"])
        self.r_base = None if st["r_base"] is None else float(st["r_base"])
        self.searching = bool(st["searching"])
        self.trace = [(int(d), float(r)) for d, r in st["trace"]]
