"""Drift scenarios of a run's own streams (`devices.drift`), resolved: what device i's k-th sample becomes.

A scenario changes some devices' streams from one sample on (docs/stream-learning.md, "Drift scenarios"):

- `label_swap` (concept drift): classification, y' = permutation[y] (`permutation`, `swap` pairs, default a
  seeded random derangement: the same on every device of the scenario); regression, y' = target(x, y) (a
  user's function by import path) or y' = -y.
- `input_shift` (covariate drift): x' = x * scale + offset + noise * N(0, 1) (per element, seeded per sample),
  or x' = transform(x) (a user's function by import path, [n, ...] -> the same shape and dtype). Computed in
  float64 on the raw sample and cast back to the dataset's dtype (integer dtypes: rounded and clipped).
- `class_prior`: the k-th sample is not the shard order's: a class c is drawn with the scenario's `weights`
  (renormalised over the classes the device's shard holds) and then one of the shard's samples of class c,
  uniformly, both from uniforms seeded by (run seed, device, k): random access, so the producer and the
  simulator pick the same dataset index for sample k without a history (`DriftedOrder`).

When: `at_s` resolves to the first sample due at or after it under the rate model (`due_time(i, k)`),
`at_sample` is sample k itself, `at_step` the sample at_step * batch (fixed batch policies). Abrupt: every
sample k >= begin is of the new concept. Gradual (`over_s`): sample k is of the new concept with probability
p(k) = (due_time(k) - due_time(begin)) / over_s clipped to [0, 1], decided by a uniform seeded per
(run seed, device, k, scenario); from `end` (the first sample due at begin time + over_s) on, all are.
Scenarios of one device apply in the config's order (a later class_prior overrides an earlier one's pick).

Everything here is a pure function of (run seed, device, k) and the raw sample: vectorised over arrays of
sequence numbers, the same for any batching, in the producer (a pass of a device's samples at a time) and the
simulator (batches). The plan resolves it (`RunPlan.drift_scenario`, through drift_resolve.py: None when
devices.drift is empty, so the no-drift path does no work); `DriftWatch` says when a change began on a device
(the `drift_start` event).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_G, _M1, _M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_MASK = (1 << 64) - 1
#: purposes of the per-sample uniforms (a scenario's draws are independent of each other)
_TAG_GRADUAL, _TAG_CLASS, _TAG_MEMBER, _TAG_NOISE, _TAG_PERM = 1, 2, 3, 4, 5


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(_G)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
        return z ^ (z >> np.uint64(31))


def _key(*parts: int) -> int:
    """A 64-bit key of small integers (run seed, device, scenario, purpose)."""
    z = np.zeros(1, dtype=np.uint64)
    for p in parts:
        z = _mix(z ^ np.uint64(int(p) & _MASK))
    return int(z[0])


def uniforms(key: int, ks: np.ndarray, width: int = 0) -> np.ndarray:
    """U[0, 1) per sequence number k (shape [n]), or per (k, j < width) (shape [n, width]): a pure function
    of (key, k, j), whatever the batch."""
    z = _mix(np.uint64(key) ^ _mix(np.asarray(ks, dtype=np.int64).astype(np.uint64)))
    if width:
        z = _mix(z[:, None] ^ np.arange(width, dtype=np.uint64)[None, :])
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)


def first_due_at(rate_model: Any, device: int, t: float) -> int:
    """The first sample of `device` due at or after t (due_time(k) >= t, up to float rounding: 1.28 + 1.5 is
    2.7800000000000002, and the sample due at 2.78 counts)."""
    if t <= 0:
        return 0
    t -= 1e-9 * max(1.0, t)
    k = max(0, math.ceil(rate_model.cumulative(device, t) - 1e-9))
    while k > 0 and rate_model.due_time(device, k - 1) >= t:
        k -= 1
    while rate_model.due_time(device, k) < t:
        k += 1
    return k


@dataclass(frozen=True)
class Change:
    """Scenario `scenario` (its index in devices.drift) on `device`: samples begin..end-1 ramp into the new
    concept (none when abrupt: begin == end), every sample from `end` on is of it; `*_s`: their due times."""

    scenario: int
    kind: str
    device: int
    begin: int
    end: int
    begin_s: float
    end_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "kind": self.kind, "device": self.device, "begin_sample": self.begin,
                "begin_s": round(self.begin_s, 6), "end_sample": self.end, "end_s": round(self.end_s, 6)}


@dataclass
class Scenario:
    """One resolved entry of devices.drift (see the module doc); `changes[device]` where it applies."""

    index: int
    kind: str
    over_s: float | None
    changes: dict[int, Change]
    permutation: np.ndarray | None = None                          # label_swap, classification
    target: Callable[[np.ndarray, np.ndarray], Any] | None = None  # label_swap, regression
    scale: float = 1.0
    offset: float = 0.0
    noise: float = 0.0
    transform: Callable[[np.ndarray], Any] | None = None
    #: class_prior, per device: (cdf over its weighted classes, those classes, where each class's samples begin
    #: in the pool, how many it has, the pool: the shard's dataset indices sorted by class)
    pools: dict[int, tuple[np.ndarray, ...]] = field(default_factory=dict)

    def active(self, seed: int, rate_model: Any, device: int, ks: np.ndarray) -> np.ndarray:
        """Which of `device`'s samples `ks` are of the new concept (bool array)."""
        c = self.changes[device]
        if c.begin == c.end:
            return ks >= c.begin
        out = ks >= c.end
        ramp = (ks >= c.begin) & ~out
        if ramp.any():
            due = rate_model.due_times(device, ks[ramp])
            p = np.clip((due - c.begin_s) / float(self.over_s), 0.0, 1.0)
            u = uniforms(_key(seed, device, self.index, _TAG_GRADUAL), ks[ramp])
            out[ramp] = u < p
        return out


class Drift:
    """The run's resolved drift scenarios (edgestream.streams.drift_resolve.resolve_drift): `indices`
    (class_prior) and `apply` (label_swap, input_shift) for device i's samples `ks`, `changes(i)` for what is
    said about them."""

    def __init__(self, scenarios: list[Scenario], seed: int, rate_model: Any, num_devices: int) -> None:
        self.scenarios, self.seed, self.rate_model, self.num_devices = scenarios, int(seed), rate_model, num_devices
        self._of: dict[int, list[Scenario]] = {}
        for s in scenarios:
            for d in s.changes:
                self._of.setdefault(d, []).append(s)
        #: the first sample of each drifted device that a scenario may change
        self.first = {d: min(s.changes[d].begin for s in ss) for d, ss in self._of.items()}
        self._picks = {d: [s for s in ss if s.kind == "class_prior"] for d, ss in self._of.items()}

    def changes(self, device: int) -> list[Change]:
        """The device's changes in the config's order ([] for a device no scenario touches)."""
        return [s.changes[device] for s in self._of.get(device, [])]

    def all_changes(self) -> list[Change]:
        return [c for d in range(self.num_devices) for c in self.changes(d)]

    def picks(self, device: int) -> bool:
        """Whether a class_prior scenario changes which dataset index some sample of `device` is."""
        return bool(self._picks.get(device))

    def indices(self, device: int, ks: np.ndarray, base: np.ndarray) -> np.ndarray:
        """Dataset indices of `device`'s samples `ks`, given their shard-order indices `base`."""
        picks = self._picks.get(device)
        if not picks:
            return base
        ks = np.asarray(ks, dtype=np.int64)
        out = np.array(base, dtype=np.int64, copy=True)
        for s in picks:
            on = s.active(self.seed, self.rate_model, device, ks)
            if not on.any():
                continue
            cdf, _, offsets, counts, pool = s.pools[device]
            k = ks[on]
            c = np.minimum(np.searchsorted(cdf, uniforms(_key(self.seed, device, s.index, _TAG_CLASS), k),
                                           side="right"), len(cdf) - 1)
            member = np.floor(uniforms(_key(self.seed, device, s.index, _TAG_MEMBER), k) * counts[c]).astype(np.int64)
            out[on] = pool[offsets[c] + np.minimum(member, counts[c] - 1)]
        return out

    def apply(self, device: int, ks: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(x', y'): `device`'s raw samples `ks` (x [n, ...] in the dataset's dtype, y [n] or [n, K]) as the
        scenarios make them; the arrays given are not changed."""
        scenarios = self._of.get(device)
        if not scenarios:
            return x, y
        ks = np.asarray(ks, dtype=np.int64)
        for s in scenarios:
            if s.kind == "class_prior":
                continue
            on = s.active(self.seed, self.rate_model, device, ks)
            if not on.any():
                continue
            if s.kind == "label_swap":
                y = np.array(y, copy=True)
                if s.permutation is not None:
                    y[on] = s.permutation[y[on]]
                elif s.target is not None:
                    y[on] = np.asarray(s.target(x[on], y[on])).astype(y.dtype, copy=False).reshape(y[on].shape)
                else:
                    y[on] = -y[on]
            else:
                x = np.array(x, copy=True)
                x[on] = self._shift(s, device, ks[on], x[on])
        return x, y

    def _shift(self, s: Scenario, device: int, ks: np.ndarray, x: np.ndarray) -> np.ndarray:
        if s.transform is not None:
            return np.asarray(s.transform(x))
        xf = x.astype(np.float64) * s.scale + s.offset
        if s.noise:
            width = int(np.prod(x.shape[1:], dtype=np.int64))
            key = _key(self.seed, device, s.index, _TAG_NOISE)
            u = uniforms(key, ks, 2 * width)
            gauss = np.sqrt(-2.0 * np.log1p(-u[:, :width])) * np.cos(2.0 * np.pi * u[:, width:])
            xf = xf + s.noise * gauss.reshape(x.shape)
        return cast_like(xf, x.dtype)


def cast_like(xf: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float values back in the dataset's dtype: integers rounded and clipped to the dtype's range."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.rint(xf), info.min, info.max).astype(dtype)
    return xf.astype(dtype)


class DriftedOrder:
    """A device's stream order with its class_prior scenarios: sample k -> dataset index (`index`), as
    `ShardOrder` (whose indices it changes where a scenario picks another sample)."""

    def __init__(self, order: Any, drift: Drift, device: int) -> None:
        self.order, self.drift, self.device = order, drift, device
        self.shard = order.shard

    def index(self, k: int) -> int:
        return int(self.indices(k, k + 1)[0])

    def indices(self, start: int, stop: int) -> np.ndarray:
        """Dataset indices of samples [start, stop) (int64)."""
        base = np.fromiter((self.order.index(k) for k in range(start, stop)), dtype=np.int64, count=stop - start)
        return self.drift.indices(self.device, np.arange(start, stop, dtype=np.int64), base)


class DriftWatch:
    """When the changes of one device began in a worker's batches: `note(seqs, time)` with each batch's own-
    stream sequence numbers calls `record(change, seq, time)` once per change, at the first batch holding a
    sample >= its begin (`seq`: the first such sample taken). `resumed()`: a worker continued from a
    checkpoint: a change whose begin lies before its first batch was recorded before and is not again."""

    def __init__(self, changes: Sequence[Change], record: Callable[[Change, int, float], None]) -> None:
        self.pending = sorted(changes, key=lambda c: (c.begin, c.scenario))
        self.record = record
        self.fresh = True

    def resumed(self) -> None:
        self.fresh = False

    def note(self, seqs: Any, time: float) -> None:
        if not self.pending or seqs is None or len(seqs) == 0:
            return
        s = seqs if type(seqs) is range else np.asarray(seqs, dtype=np.int64)
        lo, hi = (s.start, s.stop - 1) if type(s) is range else (int(s.min()), int(s.max()))
        fresh, self.fresh = self.fresh, True
        while self.pending and self.pending[0].begin <= hi:
            c = self.pending.pop(0)
            if not fresh and lo > c.begin:
                continue  # began before this worker's resumed stream: recorded by its first life
            first = max(lo, c.begin) if type(s) is range else int(s[s >= c.begin].min())
            self.record(c, first, time)


def drift_watch(drift: Drift | None, device: int, events: Any) -> DriftWatch | None:
    """The `DriftWatch` of worker `device` writing a `drift_start` line to `events` (an EventLog) when each
    change began in its batches: {"kind": "drift_start", "device", "time" (the engine's clock when the batch was
    taken: virtual seconds in the simulator), "seq" (the first sample of the change taken), "due_s" (when that
    sample was due, seconds of stream time), "drift" (the scenario's kind), "scenario" (its index in
    devices.drift)}. None without a change on the device."""
    changes = drift.changes(device) if drift is not None else []
    if not changes or not hasattr(events, "record"):
        return None
    rates = drift.rate_model

    def record(c: Change, seq: int, time: float) -> None:
        events.record("drift_start", device=device, time=float(time), seq=int(seq),
                      due_s=float(rates.due_time(device, seq)), drift=c.kind, scenario=c.scenario)

    return DriftWatch(changes, record)


def drift_lines(drift: Drift | None) -> list[str]:
    """What `config show` and `edgestream rates` say about the scenarios: per device, each change's first and
    last sample of the ramp and when they are due ([] without scenarios)."""
    if drift is None:
        return []
    out = ["devices.drift, per device: the sample each change begins at and the one from which every sample is "
           "of the new concept, with their due times (seconds of stream time)"]
    for c in drift.all_changes():
        s = drift.scenarios[c.scenario]
        how = (f"abrupt at sample {c.begin} ({c.begin_s:.3f} s)" if c.begin == c.end else
               f"gradual from sample {c.begin} ({c.begin_s:.3f} s) to {c.end} ({c.end_s:.3f} s), over_s {s.over_s:g}")
        out.append(f"  device {c.device}: drift[{c.scenario}] {c.kind}: {how}")
    return out
