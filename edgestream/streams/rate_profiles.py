"""One device's stream rate over time, S_i(t), with its exact integral and that integral's inverse.

A profile answers three questions for t >= 0 (seconds since the run start) and k >= 0 (samples):

- ``rate(t)``        S_i(t), samples per second;
- ``cumulative(t)``  C_i(t) = integral of S_i over [0, t], the expected number of samples by t;
- ``due_time(k)``    the smallest t with C_i(t) >= k: when sample k is due (producers pace on it,
  the simulator derives arrivals and waits from it). ``due_times`` is the same over an array.

Every profile's rate is > 0 everywhere, so C_i is strictly increasing and due_time is its inverse.
Constant, bursts and piecewise (trace, random walk) profiles have exact O(1) / O(log n) inverses;
the sinusoid inverts its closed-form integral by safeguarded Newton within one period.
Profiles are pure apart from the random walk's lazily extended (deterministic) segment table.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_right
from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Profile(Protocol):
    """The interface RateModel expects of one device's S_i(t)."""

    def rate(self, t: float) -> float: ...
    def cumulative(self, t: float) -> float: ...
    def due_time(self, k: float) -> float: ...
    def due_times(self, ks: np.ndarray) -> np.ndarray: ...


class ConstantProfile:
    """S(t) = S: C(t) = S t, due_time(k) = k / S."""

    def __init__(self, rate: float) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.S = float(rate)

    def rate(self, t: float) -> float:
        return self.S

    def cumulative(self, t: float) -> float:
        return self.S * t

    def due_time(self, k: float) -> float:
        return k / self.S

    def due_times(self, ks: np.ndarray) -> np.ndarray:
        return np.asarray(ks, dtype=float) / self.S


class SinusoidProfile:
    """S(t) = b (1 + A sin(w t + phi)), w = 2 pi / P, 0 <= A < 1.

    C(t) = b t + (b A / w) (cos phi - cos(w t + phi)); C(t + P) = C(t) + b P, so both C and its
    inverse reduce t (or k) to one period first, which keeps them exact for long runs.
    """

    def __init__(self, base: float, amplitude: float, period_s: float, phase: float) -> None:
        if not (base > 0 and 0 <= amplitude < 1 and period_s > 0):
            raise ValueError(f"need base > 0, 0 <= amplitude < 1, period_s > 0 "
                             f"(got {base}, {amplitude}, {period_s})")
        self.b, self.A, self.P, self.phi = float(base), float(amplitude), float(period_s), float(phase)
        self.w = 2.0 * math.pi / self.P
        self._per_period = self.b * self.P
        self._cos_phi = math.cos(self.phi)

    def rate(self, t: float) -> float:
        return self.b * (1.0 + self.A * math.sin(self.w * t + self.phi))

    def _within(self, s: float) -> float:
        """C(s) for s in [0, P]."""
        return self.b * s + self.b * self.A / self.w * (self._cos_phi - math.cos(self.w * s + self.phi))

    def cumulative(self, t: float) -> float:
        n = math.floor(t / self.P)
        return n * self._per_period + self._within(t - n * self.P)

    def due_time(self, k: float) -> float:
        if self.A == 0.0:
            return k / self.b
        n = math.floor(k / self._per_period)
        r = k - n * self._per_period
        lo, hi = 0.0, self.P
        s = min(max(r / self.b, lo), hi)
        for _ in range(100):
            f = self._within(s) - r
            if f > 0:
                hi = s
            else:
                lo = s
            s_new = s - f / self.rate(s)
            if not lo <= s_new <= hi:
                s_new = 0.5 * (lo + hi)
            if abs(s_new - s) <= 1e-13 * self.P:
                s = s_new
                break
            s = s_new
        return n * self.P + s

    def due_times(self, ks: np.ndarray) -> np.ndarray:
        ks = np.asarray(ks, dtype=float)
        if self.A == 0.0:
            return ks / self.b
        n = np.floor(ks / self._per_period)
        r = ks - n * self._per_period
        lo, hi = np.zeros_like(r), np.full_like(r, self.P)
        s = np.clip(r / self.b, 0.0, self.P)
        c = self.b * self.A / self.w
        for _ in range(100):
            f = self.b * s + c * (self._cos_phi - np.cos(self.w * s + self.phi)) - r
            hi = np.where(f > 0, s, hi)
            lo = np.where(f > 0, lo, s)
            d = self.b * (1.0 + self.A * np.sin(self.w * s + self.phi))
            s_new = s - f / d
            s_new = np.where((s_new < lo) | (s_new > hi), 0.5 * (lo + hi), s_new)
            done = np.all(np.abs(s_new - s) <= 1e-13 * self.P)
            s = s_new
            if done:
                break
        return n * self.P + s


class BurstProfile:
    """Periodic bursts: S(t) = high while ((t - offset) mod E) < D, else low (E = every_s, D = duration_s).

    With G(u) = floor(u/E) Q + partial(u mod E), Q = high D + low (E - D) the samples per period,
    C(t) = G(t - offset) - G(-offset) in closed form, and its inverse too.
    """

    def __init__(self, low: float, high: float, every_s: float, duration_s: float, offset: float) -> None:
        if not (low > 0 and high > 0 and 0 < duration_s < every_s):
            raise ValueError(f"need low, high > 0 and 0 < duration_s < every_s (got {low}, {high}, "
                             f"{duration_s}, {every_s})")
        self.low, self.high = float(low), float(high)
        self.E, self.D, self.offset = float(every_s), float(duration_s), float(offset)
        self.Q = self.high * self.D + self.low * (self.E - self.D)
        self._burst = self.high * self.D
        self._g0 = self._G(-self.offset)

    def _G(self, u: float) -> float:
        n = math.floor(u / self.E)
        r = u - n * self.E
        return n * self.Q + self.high * min(r, self.D) + self.low * max(0.0, r - self.D)

    def rate(self, t: float) -> float:
        return self.high if (t - self.offset) % self.E < self.D else self.low

    def cumulative(self, t: float) -> float:
        return self._G(t - self.offset) - self._g0

    def due_time(self, k: float) -> float:
        K = k + self._g0
        n = math.floor(K / self.Q)
        r = K - n * self.Q
        s = r / self.high if r < self._burst else self.D + (r - self._burst) / self.low
        return max(0.0, n * self.E + s + self.offset)

    def due_times(self, ks: np.ndarray) -> np.ndarray:
        K = np.asarray(ks, dtype=float) + self._g0
        n = np.floor(K / self.Q)
        r = K - n * self.Q
        s = np.where(r < self._burst, r / self.high, self.D + (r - self._burst) / self.low)
        return np.maximum(0.0, n * self.E + s + self.offset)


class PiecewiseProfile:
    """Piecewise-constant S(t): rate rates[j] from starts[j] (starts[0] = 0) until the next start.

    The last rate holds forever. cums[j] = C(starts[j]); both lookups are a bisection, O(log n).
    The table is one tuple, replaced whole when it grows, so concurrent readers see it consistent.
    """

    def __init__(self, starts: Sequence[float], rates: Sequence[float]) -> None:
        if len(starts) == 0 or len(starts) != len(rates) or starts[0] != 0:
            raise ValueError("need as many starts as rates, starting at 0")
        if any(b <= a for a, b in zip(starts, starts[1:], strict=False)):
            raise ValueError("segment starts must be strictly increasing")
        if any(not r > 0 for r in rates):
            raise ValueError("every rate must be > 0")
        starts = [float(s) for s in starts]
        rates = [float(r) for r in rates]
        cums = [0.0]
        for j in range(1, len(starts)):
            cums.append(cums[-1] + rates[j - 1] * (starts[j] - starts[j - 1]))
        self._table: tuple[list[float], list[float], list[float]] = (starts, rates, cums)
        self._arrays: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None

    def _segment_at(self, t: float, starts: list[float]) -> int:
        return max(0, bisect_right(starts, t) - 1)

    def rate(self, t: float) -> float:
        self._cover_time(t)
        starts, rates, _ = self._table
        return rates[self._segment_at(t, starts)]

    def cumulative(self, t: float) -> float:
        self._cover_time(t)
        starts, rates, cums = self._table
        j = self._segment_at(t, starts)
        return cums[j] + rates[j] * (t - starts[j])

    def due_time(self, k: float) -> float:
        self._cover_count(k)
        starts, rates, cums = self._table
        j = max(0, bisect_right(cums, k) - 1)
        return starts[j] + (k - cums[j]) / rates[j]

    def due_times(self, ks: np.ndarray) -> np.ndarray:
        ks = np.asarray(ks, dtype=float)
        if ks.size:
            self._cover_count(float(ks.max()))
        table = self._table
        if self._arrays is None or self._arrays[0] != len(table[0]):
            self._arrays = (len(table[0]), *(np.array(x) for x in table))
        _, starts, rates, cums = self._arrays
        j = np.maximum(0, np.searchsorted(cums, ks, side="right") - 1)
        return starts[j] + (ks - cums[j]) / rates[j]

    def _cover_time(self, t: float) -> None:
        """Hook for lazily extended tables (the random walk); a finite trace needs nothing."""

    def _cover_count(self, k: float) -> None:
        """Hook for lazily extended tables (the random walk); a finite trace needs nothing."""


class RandomWalkProfile(PiecewiseProfile):
    """S(t) = max(min_rate, b exp(L_j)) on [j step, (j+1) step), L_0 = 0, L_j = L_{j-1} + sigma z_j.

    A log-factor random walk (median factor 1), piecewise constant over step_s intervals. The
    normals z_j come in blocks from an RNG seeded by (seed, device, block), so the walk is the
    same whatever order and range of times it is asked about; the table grows as time advances.
    """

    BLOCK = 1024
    TAG = 7_100_003  # separates this RNG stream from the other per-device streams

    def __init__(self, base: float, sigma: float, step_s: float, min_rate: float, seed: int,
                 device: int) -> None:
        if not (base > 0 and sigma >= 0 and step_s > 0 and min_rate > 0):
            raise ValueError(f"need base > 0, sigma >= 0, step_s > 0, min_rate > 0 (got {base}, {sigma}, "
                             f"{step_s}, {min_rate})")
        self.b, self.sigma = float(base), float(sigma)
        self.step, self.min_rate = float(step_s), float(min_rate)
        self._seed, self._device = seed, device
        self._log = 0.0
        self._lock = threading.Lock()
        self._table = ([], [], [])
        self._arrays = None
        self._extend()

    def _extend(self) -> None:
        """Append the next block of BLOCK segments (deterministic in (seed, device, block))."""
        starts, rates, cums = (list(x) for x in self._table)
        j0 = len(starts)
        block = j0 // self.BLOCK
        z = np.random.default_rng([self._seed, self._device, self.TAG, block]).standard_normal(self.BLOCK)
        if block == 0:
            z[0] = 0.0
        logs = self._log + np.cumsum(self.sigma * z)
        new_rates = np.maximum(self.min_rate, self.b * np.exp(logs)).tolist()
        cum = cums[-1] + rates[-1] * self.step if j0 else 0.0
        for i, r in enumerate(new_rates):
            starts.append((j0 + i) * self.step)
            rates.append(r)
            cums.append(cum)
            cum += r * self.step
        self._log = float(logs[-1])
        self._table = (starts, rates, cums)

    def _cover_time(self, t: float) -> None:
        if len(self._table[0]) * self.step <= t:
            with self._lock:
                while len(self._table[0]) * self.step <= t:
                    self._extend()

    def _cover_count(self, k: float) -> None:
        _, rates, cums = self._table
        if cums[-1] + rates[-1] * self.step <= k:
            with self._lock:
                while self._table[2][-1] + self._table[1][-1] * self.step <= k:
                    self._extend()

    def _segment_at(self, t: float, starts: list[float]) -> int:
        return max(0, min(int(t // self.step), len(starts) - 1))
