"""ZipLine variants (issue 11 item 3) against brute force over all R^n choices, with many ties."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from edgestream.sync.zipline import (
    ZipLineResult,
    full_grid_scan,
    grid_scan,
    zipline,
    zipline_opt,
    zipline_opt_bs,
)

EXACT = [zipline, zipline_opt, zipline_opt_bs, full_grid_scan]
ALL = [*EXACT, grid_scan]


def brute(m: np.ndarray) -> tuple[float, float]:
    """(min wait, then min t_sync) over all R^n choices."""
    n, r = m.shape
    best: tuple[float, float] | None = None
    for picks in itertools.product(range(r), repeat=n):
        vals = [float(m[p, c]) for p, c in enumerate(picks)]
        key = (max(vals) - min(vals), max(vals))
        if best is None or key < best:
            best = key
    assert best is not None
    return best


def check_consistent(m: np.ndarray, res: ZipLineResult) -> None:
    n, r = m.shape
    assert isinstance(res.picks, tuple) and len(res.picks) == n
    assert all(isinstance(c, int) and 0 <= c < r for c in res.picks)
    vals = [float(m[p, c]) for p, c in enumerate(res.picks)]
    assert res.t_sync == max(vals)
    assert res.wait == max(vals) - min(vals)


def instances(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(1, 5))
        r = int(rng.integers(1, 6))
        hi = int(rng.integers(1, 8))  # small range -> many ties within and across rows
        m = np.sort(rng.integers(0, hi, size=(n, r)), axis=1).astype(float)
        yield m


@pytest.mark.parametrize("seed", range(6))
def test_exact_variants_match_brute_force(seed: int) -> None:
    for m in instances(seed, 80):
        want_wait, want_sync = brute(m)
        for fn in EXACT:
            res = fn(m)
            check_consistent(m, res)
            assert (res.wait, res.t_sync) == (want_wait, want_sync), (fn.__name__, m.tolist(), res)


@pytest.mark.parametrize("seed", range(3))
def test_exact_variants_match_brute_force_real_times(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for _ in range(60):
        n, r = int(rng.integers(1, 5)), int(rng.integers(1, 6))
        m = np.sort(np.round(rng.uniform(0, 3, size=(n, r)), 1), axis=1)
        want = brute(m)
        for fn in EXACT:
            res = fn(m)
            check_consistent(m, res)
            assert (res.wait, res.t_sync) == want, (fn.__name__, m.tolist(), res)


@pytest.mark.parametrize("seed", range(4))
def test_grid_scan_valid_and_never_better_than_optimum(seed: int) -> None:
    for m in instances(1000 + seed, 80):
        want_wait, _ = brute(m)
        res = grid_scan(m)
        check_consistent(m, res)
        assert res.wait >= want_wait


def test_grid_scan_can_miss_the_optimum() -> None:
    # designated row 2 (earliest first point); the optimum (10, 9, 4) uses row 2's 4 but not the
    # points nearest to it (row 0's nearest to 4 is 2), so GridScan never builds it
    m = np.array([[2.0, 10.0], [9.0, 11.0], [0.0, 4.0]])
    assert zipline(m) == ZipLineResult(t_sync=10.0, wait=6.0, picks=(1, 0, 1))
    assert grid_scan(m).wait == 7.0


def test_nested_list_input_and_small_cases() -> None:
    times = [[1.0, 5.0, 9.0], [4.0, 6.0, 20.0]]
    for fn in ALL:
        res = fn(times)
        assert res == ZipLineResult(t_sync=5.0, wait=1.0, picks=(1, 0)), fn.__name__
    for fn in ALL:
        assert fn([[3.0]]) == ZipLineResult(t_sync=3.0, wait=0.0, picks=(0,))
        assert fn([[1.0, 2.0]]).wait == 0.0
        assert fn([[1.0, 2.0]]).t_sync == 1.0


def test_result_is_frozen() -> None:
    res = zipline([[1.0]])
    with pytest.raises(AttributeError):
        res.wait = 2.0  # type: ignore[misc]


@pytest.mark.parametrize("fn", ALL, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("times", "word"),
    [
        ([1.0, 2.0], "2-D"),
        ([[[1.0]]], "2-D"),
        (np.zeros((0, 3)), "n >= 1"),
        (np.zeros((2, 0)), "R >= 1"),
        ([[1.0, math.nan]], "finite"),
        ([[1.0, math.inf]], "finite"),
        ([[1.0, 2.0], [3.0, 2.0]], "row 1"),
        ([["a", "b"]], "floats"),
    ],
)
def test_validation(fn, times, word: str) -> None:
    with pytest.raises(ValueError, match=word.replace("(", r"\(")):
        fn(times)
