"""zipline: ElasticBSP barrier placement (paper 003, section 5; ALGORITHMS.md "elastic-bsp(R)").

Why: ElasticBSP lets workers run asynchronously between barriers and places the next barrier where
the workers' predicted push times line up best. Given `times` of shape (n, R) — row p holds worker
p's R predicted push times e_1^p <= ... <= e_R^p — choose one point per worker (a set Z) minimising
the spread d_Z = max(Z) - min(Z); the barrier is t_sync = max(Z*). The result carries `t_sync`,
`wait` (= d_Z) and `picks` (the chosen column per worker).

Variants (all take the same array and return the same `ZipLineResult`):
- `zipline`: the merged-timeline sweep. Merge all n*R points into Omega sorted by (time, worker id,
  column), scan left to right keeping each worker's latest point in the window Z; whenever Z holds
  all n workers, d_Z = current time - min(Z). min(Z) is the earliest point of Omega that is still
  some worker's latest point, found with a forward-only pointer (amortised O(1)), so the whole
  method is O(nR log(nR)), dominated by the sort.
- `zipline_opt`: the paper's ZipLineOpt (5.3.1): Z kept as an array in arrival order (hence sorted);
  if the oldest element has the new element's colour it is popped and d_Z recomputed, otherwise the
  same-colour element is searched and removed in O(n) and d_Z is not recomputed (Theorem 3: it
  cannot improve).
- `zipline_opt_bs`: the paper's ZipLineOptBS (5.3.2): like ZipLineOpt, but the same-colour element
  is located by binary search on its key (M[p, i-1], p) in the sorted Z.
- `grid_scan`: the paper's GridScan heuristic (Algorithm 1), R candidates; may miss the optimum.
- `full_grid_scan`: the paper's FullGridScan baseline, every element of M designated in turn
  (nR candidates), O(R n^2 log R) here; exact.

Tie rule (ALGORITHMS.md): update the best only on a strictly smaller d_Z, so the earliest optimum
wins. The sweep meets candidates in non-decreasing t_sync, so exact variants return the minimum
wait and, among optima, the smallest t_sync. Within a row with repeated times the latest such
column is picked (the window keeps a worker's latest point).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "ZipLineResult",
    "full_grid_scan",
    "grid_scan",
    "zipline",
    "zipline_opt",
    "zipline_opt_bs",
]

TimesLike = npt.ArrayLike | Sequence[Sequence[float]]


@dataclass(frozen=True)
class ZipLineResult:
    """A chosen barrier: `picks[p]` is worker p's column; t_sync = max, wait = max - min."""

    t_sync: float
    wait: float
    picks: tuple[int, ...]


def _validate(times: TimesLike) -> np.ndarray:
    try:
        m = np.asarray(times, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"times must be a 2-D array of floats (n, R): {exc}") from exc
    if m.ndim != 2:
        raise ValueError(f"times must be 2-D with shape (n, R), got {m.ndim}-D shape {m.shape}")
    n, r = m.shape
    if n < 1:
        raise ValueError("times must have at least one worker (n >= 1), got n = 0")
    if r < 1:
        raise ValueError("times must have at least one predicted point per worker (R >= 1), got R = 0")
    if not np.all(np.isfinite(m)):
        raise ValueError("times must be finite (no NaN or inf)")
    if r > 1:
        bad = np.nonzero(np.any(np.diff(m, axis=1) < 0, axis=1))[0]
        if bad.size:
            raise ValueError(f"times rows must be ascending; row {int(bad[0])} is not")
    return m


def _result(m: np.ndarray, picks: Sequence[int]) -> ZipLineResult:
    vals = [float(m[p, c]) for p, c in enumerate(picks)]
    hi, lo = max(vals), min(vals)
    return ZipLineResult(t_sync=hi, wait=hi - lo, picks=tuple(int(c) for c in picks))


def _omega(m: np.ndarray) -> list[tuple[float, int, int]]:
    """Omega: all points as (time, worker, column), sorted; ties by worker id, then column."""
    n, r = m.shape
    return sorted((float(m[p, i]), p, i) for p in range(n) for i in range(r))


def zipline(times: TimesLike) -> ZipLineResult:
    """Exact ZipLine by the merged-timeline sweep, O(nR log(nR))."""
    m = _validate(times)
    n = m.shape[0]
    omega = _omega(m)
    latest = [-1] * n  # index in omega of each worker's latest point so far
    have = 0
    lo = 0  # pointer: earliest index of omega that may still be some worker's latest point
    best_d = float("inf")
    best_picks: list[int] = []
    for k, (t, p, _i) in enumerate(omega):
        if latest[p] < 0:
            have += 1
        latest[p] = k
        if have < n:
            continue
        while latest[omega[lo][1]] != lo:
            lo += 1
        d = t - omega[lo][0]
        if d < best_d:
            best_d = d
            best_picks = [omega[latest[q]][2] for q in range(n)]
    return _result(m, best_picks)


def zipline_opt(times: TimesLike) -> ZipLineResult:
    """ZipLineOpt (paper 5.3.1): arrival-ordered Z with Theorem 3 pruning."""
    m = _validate(times)
    n = m.shape[0]
    z: list[tuple[float, int, int]] = []  # arrival order == sorted order
    best_d = float("inf")
    best_z: list[tuple[float, int, int]] = []
    for e in _omega(m):
        t, p, i = e
        if len(z) == n and z[0][1] == p:
            # case (i): the oldest element has the new colour -> min(Z') is the next one
            z.pop(0)
            z.append(e)
            d = t - z[0][0]
            if d < best_d:
                best_d, best_z = d, list(z)
            continue
        full_before = len(z) == n
        for j, x in enumerate(z):  # case (ii) / initialisation: O(n) same-colour search
            if x[1] == p:
                del z[j]
                break
        z.append(e)
        if len(z) == n and not full_before:
            # first complete window (paper lines 5-9): evaluate it
            d = t - z[0][0]
            if d < best_d:
                best_d, best_z = d, list(z)
        # else: Theorem 3, d_Z' >= d_Z of a window already evaluated or dominated
    picks = [0] * n
    for _t, p, i in best_z:
        picks[p] = i
    return _result(m, picks)


def zipline_opt_bs(times: TimesLike) -> ZipLineResult:
    """ZipLineOptBS (paper 5.3.2): ZipLineOpt with the same-colour element found by binary search.

    Z is sorted by (time, worker id); the worker's previous element is (M[p, i-1], p), found with
    bisect — the paper's "first/last equal timestamp then worker id order" search in one step.
    """
    m = _validate(times)
    n = m.shape[0]
    z: list[tuple[float, int]] = []  # keys (time, worker), sorted
    col = [-1] * n  # column of each worker's element in Z
    best_d = float("inf")
    best_picks: list[int] = []
    for t, p, i in _omega(m):
        full_before = len(z) == n
        if col[p] >= 0:
            prev = (float(m[p, col[p]]), p)
            if full_before and z[0] == prev:
                z.pop(0)
                z.append((t, p))
                col[p] = i
                d = t - z[0][0]
                if d < best_d:
                    best_d, best_picks = d, list(col)
                continue
            del z[bisect.bisect_left(z, prev)]
        z.append((t, p))
        col[p] = i
        if len(z) == n and not full_before:
            d = t - z[0][0]
            if d < best_d:
                best_d, best_picks = d, list(col)
    return _result(m, best_picks)


def _latest_at_or_before(row: np.ndarray, t: float) -> int:
    """Column of the latest point of `row` <= t, or -1 if none."""
    return int(np.searchsorted(row, t, side="right")) - 1


def _nearest(row: np.ndarray, t: float) -> int:
    """Column of the point of `row` closest to t (ties: the earlier point)."""
    j = int(np.searchsorted(row, t, side="left"))
    if j == 0:
        return 0
    if j == len(row):
        return j - 1
    return j - 1 if t - row[j - 1] <= row[j] - t else j


def _better(a: ZipLineResult, b: ZipLineResult | None) -> bool:
    return b is None or (a.wait, a.t_sync) < (b.wait, b.t_sync)


def grid_scan(times: TimesLike) -> ZipLineResult:
    """GridScan heuristic (paper Algorithm 1), O(R^2 n) in the paper, O(R n log R) here.

    The designated row is the worker with the earliest first point (Algorithm 1 line 4); for each of
    its R points, every other worker contributes its point "close to" it (line 10), read here as the
    nearest in absolute time (ALGORITHMS.md is silent; ties take the earlier point). The best of the
    R candidates (min wait, then min t_sync) is returned; it may miss the optimum.
    """
    m = _validate(times)
    n, r = m.shape
    d_row = int(np.argmin(m[:, 0]))
    best: ZipLineResult | None = None
    for i in range(r):
        t = float(m[d_row, i])
        picks = [i if q == d_row else _nearest(m[q], t) for q in range(n)]
        cand = _result(m, picks)
        if _better(cand, best):
            best = cand
    assert best is not None
    return best


def full_grid_scan(times: TimesLike) -> ZipLineResult:
    """FullGridScan baseline: every element of M designated in turn (GridScan without line 4).

    Exactness needs a one-sided "close to": the designated point is taken as the barrier and every
    other worker contributes its latest point <= it (the paper's text says only "close to"; the
    nearest-in-absolute-time reading can miss the optimum, while this one cannot: for an optimum
    Z* designating max(Z*) yields a window no wider than Z* with the same t_sync). Candidates
    where some worker has no point <= the designated one are skipped.
    """
    m = _validate(times)
    n, r = m.shape
    best: ZipLineResult | None = None
    for p in range(n):
        for i in range(r):
            t = float(m[p, i])
            picks = [_latest_at_or_before(m[q], t) for q in range(n)]
            if min(picks) < 0:
                continue
            cand = _result(m, picks)
            if _better(cand, best):
                best = cand
    assert best is not None  # the row holding the largest first point always yields a candidate
    return best
