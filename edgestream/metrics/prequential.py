"""Prequential (test-then-train) evaluation: how well the model predicts the samples arriving now.

Every training batch is scored by the model *before* the step that trains on it: the training step's own
forward pass (its outputs are those of the model before the update), so the cost is the scoring of outputs
already computed. Each sample contributes one row of the task's additive sums (`Task.sample_sums`: correct and
loss for classification; squared error, absolute error, elements and loss for regression), and the task's
`finish` turns accumulated sums into its metrics. Three accumulations, per device (docs/stream-learning.md):

* cumulative: every sample scored since the run began, S_n = sum_{i<=n} s_i, metric = finish(S_n, n);
* window: the last `window` samples of the device, W_n = sum_{n-w<i<=n} s_i, metric = finish(W_n, min(n, w));
* fading (when `fading` = alpha in (0, 1) is given): F_n = s_n + alpha F_{n-1}, N_n = 1 + alpha N_{n-1},
  metric = finish(F_n / N_n, 1) (Gama, Sebastiao & Rodrigues 2013).

Over all devices the figures pool the devices' sums (`pooled`): cumulative sum S over devices / sum n; window:
the union of every device's last `window` samples; fading: sum F / sum N. Pooling needs no order across
devices, so every engine (one process or one per rank) computes the same all-devices figures from the same
per-device counters. A `PrequentialCounter` is explicit state: `state_dict()` is plain JSON-able lists, kept in
the trainer's checkpoint, so a resumed run continues the counters exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

#: state_dict layout version
STATE_VERSION = 1


class PrequentialCounter:
    """One device's prequential counters for `task` (an edgestream.tasks.Task): `update(rows)` with the batch's
    `Task.sample_sums` rows in the order the samples were scored; `figures()` the metrics (module doc)."""

    def __init__(self, task: Any, window: int, fading: float | None = None) -> None:
        self.task, self.window, self.fading = task, int(window), (None if fading is None else float(fading))
        self.keys = tuple(task.sum_keys)
        m = len(self.keys)
        self.n = 0
        self.cum = np.zeros(m, dtype=np.float64)
        self.ring = np.zeros((self.window, m), dtype=np.float64)
        self.pos = 0          # where the next row goes in the ring
        self.filled = 0       # rows of the ring in use (min(n, window))
        self.fade = np.zeros(m, dtype=np.float64)
        self.fade_n = 0.0

    # ------------------------------------------------------------------ updates
    def update(self, rows: Any) -> None:
        """Add a batch's per-sample sums ([B, m], oldest first)."""
        rows = np.asarray(rows, dtype=np.float64)
        b = len(rows)
        if b == 0:
            return
        self.n += b
        self.cum += rows.sum(axis=0)
        w = self.window
        if b >= w:
            self.ring[:] = rows[b - w:]
            self.pos, self.filled = 0, w
        else:
            end = self.pos + b
            if end <= w:
                self.ring[self.pos:end] = rows
            else:
                first = w - self.pos
                self.ring[self.pos:] = rows[:first]
                self.ring[:b - first] = rows[first:]
            self.pos = end % w
            self.filled = min(w, self.filled + b)
        alpha = self.fading
        if alpha is not None:
            weights = alpha ** np.arange(b - 1, -1, -1, dtype=np.float64)
            self.fade = self.fade * alpha ** b + weights @ rows
            self.fade_n = self.fade_n * alpha ** b + float(weights.sum())

    # ------------------------------------------------------------------ figures
    def window_sums(self) -> np.ndarray:
        return self.ring[:self.filled].sum(axis=0)

    def sums(self) -> dict[str, Any]:
        """The additive sums the pooled figures are made of (plain lists and numbers)."""
        return {"n": self.n, "cum": self.cum.tolist(), "window_n": self.filled,
                "window": self.window_sums().tolist(), "fade": self.fade.tolist(), "fade_n": self.fade_n}

    def figures(self) -> dict[str, Any]:
        """{"cumulative": metrics, "window": metrics, "fading": metrics | None, "samples": n}."""
        return figures_of(self.task, self.keys, [self.sums()], self.fading is not None)

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able state (a checkpoint loads it with weights_only=True)."""
        return {"version": STATE_VERSION, "window": self.window, "fading": self.fading, "keys": list(self.keys),
                "n": self.n, "cum": self.cum.tolist(), "ring": self.ring[:self.filled].tolist() if self.filled else [],
                "pos": self.pos, "fade": self.fade.tolist(), "fade_n": self.fade_n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()`; ValueError naming what does not match (another window or task)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"prequential state version {state.get('version')!r}; this edgestream reads "
                             f"{STATE_VERSION}")
        if tuple(state["keys"]) != self.keys or int(state["window"]) != self.window:
            raise ValueError(f"eval.prequential.window: the checkpoint's counters keep a window of {state['window']} "
                             f"over {state['keys']}; this config has {self.window} over {list(self.keys)} (resume "
                             "with the window the run began with)")
        if state.get("fading") != self.fading:
            raise ValueError(f"eval.prequential.fading: the checkpoint's counters fade with {state.get('fading')}; "
                             f"this config has {self.fading} (resume with the fading the run began with)")
        self.n = int(state["n"])
        self.cum = np.asarray(state["cum"], dtype=np.float64)
        ring = np.asarray(state["ring"], dtype=np.float64).reshape(-1, len(self.keys))
        self.filled = len(ring)
        self.ring[:self.filled] = ring
        self.pos = int(state["pos"])
        self.fade = np.asarray(state["fade"], dtype=np.float64)
        self.fade_n = float(state["fade_n"])


def _metrics(task: Any, keys: tuple[str, ...], sums: Iterable[float], n: float) -> dict[str, float] | None:
    if n <= 0:
        return None
    return {k: float(v) for k, v in task.finish(dict(zip(keys, sums, strict=True)), n).items()}


def figures_of(task: Any, keys: tuple[str, ...], parts: list[dict[str, Any]], fading: bool) -> dict[str, Any]:
    """The prequential figures of the pooled `parts` (each a `PrequentialCounter.sums()`; module doc)."""
    m = len(keys)
    n = sum(int(p["n"]) for p in parts)
    cum = np.sum([p["cum"] for p in parts], axis=0) if parts else np.zeros(m)
    wn = sum(int(p["window_n"]) for p in parts)
    win = np.sum([p["window"] for p in parts], axis=0) if parts else np.zeros(m)
    out: dict[str, Any] = {"cumulative": _metrics(task, keys, cum, n), "window": _metrics(task, keys, win, wn),
                           "fading": None, "samples": n, "window_samples": wn}
    if fading:
        fn = sum(float(p["fade_n"]) for p in parts)
        if fn > 0:
            fade = np.sum([p["fade"] for p in parts], axis=0) / fn
            out["fading"] = _metrics(task, keys, fade, 1)
    return out


def pooled(task: Any, parts: dict[int, dict[str, Any]], fading: bool) -> dict[str, Any]:
    """summary.json's `prequential`: the all-devices figures (pooled) and each device's own, from the devices'
    `sums()` ({device: sums})."""
    keys = tuple(task.sum_keys)
    out = figures_of(task, keys, list(parts.values()), fading)
    out["devices"] = {str(d): figures_of(task, keys, [p], fading) for d, p in sorted(parts.items())}
    return out


def line_fields(task: Any, counter: PrequentialCounter) -> dict[str, Any]:
    """What a step line carries: `preq_<metric>` over the device's window, `preq_cum_<metric>` since the run
    began, `preq_n` samples scored so far and `preq_wn` in the window."""
    fields: dict[str, Any] = {}
    keys, finish = counter.keys, task.finish
    # the two figures straight from the counter's sums (what `figures()` pools, without its generality: per step)
    for prefix, sums, n in (("preq_", counter.window_sums(), counter.filled), ("preq_cum_", counter.cum, counter.n)):
        if n <= 0:
            continue
        for k, v in finish(dict(zip(keys, sums.tolist(), strict=True)), n).items():
            fields[prefix + k] = round(v, 6) if math.isfinite(v) else v
    fields["preq_n"], fields["preq_wn"] = counter.n, counter.filled
    return fields


#: metrics pooled as root-mean-squares (the others pool as sample-weighted means)
RMS = ("rmse",)


class LivePool:
    """The all-devices figures from each device's newest step-line fields (`line_fields`), kept up to date one step
    line at a time (a device's contribution replaced by its newest) in O(metrics), whatever the number of devices:
    the window's (`figures("preq_")`, weighted by `preq_wn`) or the cumulative ones (`figures("preq_cum_")`, weighted
    by `preq_n`); exact, as the task's metrics are means over samples (rmse: the root of the mean of squares). What
    the progress line, `status` and TensorBoard show for all devices."""

    def __init__(self) -> None:
        self.latest: dict[int, dict[str, Any]] = {}
        self._sums: dict[str, dict[str, float]] = {"preq_": {}, "preq_cum_": {}}
        self._totals = {"preq_": 0.0, "preq_cum_": 0.0}

    def _add(self, fields: dict[str, Any], sign: float) -> None:
        for prefix, weight_key in (("preq_", "preq_wn"), ("preq_cum_", "preq_n")):
            w = float(fields.get(weight_key) or 0)
            if w <= 0:
                continue
            self._totals[prefix] += sign * w
            sums = self._sums[prefix]
            for key, value in fields.items():
                if not key.startswith(prefix) or value is None or key in ("preq_n", "preq_wn", "preq_err"):
                    continue
                name = key[len(prefix):]
                if prefix == "preq_" and name.startswith("cum_"):
                    continue
                sums[name] = sums.get(name, 0.0) + sign * w * (float(value) ** 2 if name in RMS else float(value))

    def update(self, device: int, fields: dict[str, Any]) -> None:
        old = self.latest.get(device)
        if old is not None:
            self._add(old, -1.0)
        fields = {k: v for k, v in fields.items() if k.startswith("preq_")}
        self.latest[device] = fields
        self._add(fields, 1.0)

    def figures(self, prefix: str = "preq_") -> dict[str, float]:
        total = self._totals[prefix]
        if total <= 0:
            return {}
        return {k: (math.sqrt(max(0.0, v) / total) if k in RMS else v / total) for k, v in self._sums[prefix].items()}


def learning_of(records: Iterable[dict]) -> dict[str, Any] | None:
    """What `edgestream status` says of stream learning from a run's event lines (its rank files while it runs):
    the all-devices window and cumulative figures (`LivePool`), each device's window figures and samples scored,
    the drift detections (count, per device, the newest five); None when the lines carry no prequential figures."""
    pool = LivePool()
    drifts: list[dict] = []
    for rec in records:
        kind = rec.get("kind", "step")
        if kind == "step" and "preq_n" in rec:
            pool.update(int(rec.get("device", 0)), rec)
        elif kind == "drift":
            drifts.append(rec)
    if not pool.latest:
        return None
    per: dict[str, int] = {}
    for d in drifts:
        key = "all" if d.get("device") is None else str(d.get("device"))
        per[key] = per.get(key, 0) + 1
    devices = {str(d): {"samples": f.get("preq_n"),
                        "window": {k[5:]: v for k, v in f.items()
                                   if k.startswith("preq_") and not k.startswith("preq_cum_")
                                   and k not in ("preq_n", "preq_wn", "preq_err")}}
               for d, f in sorted(pool.latest.items())}
    return {"window": pool.figures("preq_"), "cumulative": pool.figures("preq_cum_"), "devices": devices,
            "drifts": len(drifts), "drifts_per_device": per, "recent_drifts": drifts[-5:]}


def summary_of(task: Any, records: Iterable[dict], fading: bool,
               detecting: bool = True) -> tuple[dict | None, dict | None]:
    """summary.json's `prequential` (pooled over the devices' newest `prequential` lines: `pooled`) and `drift`
    (the `drift` lines counted: total, per device, all-devices, and each detection's device, time, samples and
    seq; None without detectors) from a run's event lines; None for what the run has none of."""
    parts: dict[int, dict[str, Any]] = {}
    drifts: list[dict] = []
    for rec in records:
        kind = rec.get("kind")
        if kind == "prequential" and isinstance(rec.get("sums"), dict):
            parts[int(rec.get("device", 0))] = rec["sums"]
        elif kind == "drift":
            drifts.append(rec)
    preq = pooled(task, parts, fading) if parts else None
    drift = None
    if detecting:
        per: dict[str, int] = {}
        for d in drifts:
            if d.get("scope") != "all":
                per[str(d.get("device"))] = per.get(str(d.get("device")), 0) + 1
        drift = {"detections": sum(per.values()), "devices": per,
                 "all_devices": sum(1 for d in drifts if d.get("scope") == "all"),
                 "events": [{k: d.get(k) for k in ("time", "device", "step", "samples", "seq", "scope")}
                            for d in drifts[:1000]]}
    return preq, drift


def window_curve(records: Iterable[dict], metric: str) -> list[tuple[float, float]]:
    """(time, all-devices window value of `metric`) at every step line of a run's event lines (time order): the
    curve `compare` plots for a drift scenario (`LivePool`)."""
    pool = LivePool()
    out: list[tuple[float, float]] = []
    for rec in records:
        if rec.get("kind", "step") == "step" and "preq_n" in rec:
            pool.update(int(rec.get("device", 0)), rec)
            value = pool.figures("preq_").get(metric)
            if value is not None:
                out.append((float(rec.get("time") or 0.0), value))
    return out


def recovery(curve: list[tuple[float, float]], at: float, *, higher: bool = True, tol: float = 0.02,
             after_s: float = 0.0) -> dict[str, Any]:
    """How a window curve came back after a change at time `at`: `before` (its value at the last point before
    `at`), `dip` (its worst value after), `final` (its last value), and `recovered_s`: the time from `at` until
    it was back within `tol` of `before` (after `after_s` at least, so that the window holds post-change samples:
    None when it never was; 0 when it never fell more than `tol` below `before`: `dipped` False, a model still
    learning when the change came). `higher`: the metric improves upwards (accuracy); rmse and loss do not."""
    before = next((v for t, v in reversed(curve) if t < at), None)
    after = [(t, v) for t, v in curve if t >= at]
    if before is None or not after:
        return {"before": before, "dip": None, "final": None, "recovered_s": None, "dipped": None}
    dip = min(v for _, v in after) if higher else max(v for _, v in after)
    dipped = dip < before - tol if higher else dip > before + tol
    dipped_at = next(t for t, v in after if v == dip)
    back = next((t for t, v in after if t >= max(dipped_at, at + after_s)
                 and (v >= before - tol if higher else v <= before + tol)), None)
    return {"before": round(before, 4), "dip": round(dip, 4), "final": round(after[-1][1], 4),
            "recovered_s": None if back is None else (round(back - at, 3) if dipped else 0.0), "dipped": dipped}
