"""Read a rate trace: a CSV with header ``time,device,rate``, one row per rate change.

Row (time, device, rate) means device `device` streams at `rate` samples/s from `time` (seconds
since the run start) until its next row; its last rate holds forever, and its first rate also
covers [0, first time). Rates below min_rate are raised to min_rate (RateModel's floor). Only the
devices 0..num_devices-1 are used; a trace may describe more. This is the one place in streams/
that reads a file, and only when a model is built.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from edgestream.streams.rate_profiles import PiecewiseProfile

COLUMNS = ("time", "device", "rate")


def read_trace(path: str | Path) -> dict[int, list[tuple[float, float]]]:
    """Per device, its (time, rate) rows sorted by time. ValueError names the file, line and problem."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"rates.path: trace file {str(path)!r} does not exist")
    rows: dict[int, dict[float, float]] = {}
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        if tuple(header) != COLUMNS:
            raise ValueError(f"rates.path: {path}: header must be {','.join(COLUMNS)} "
                             f"(got {','.join(header)})")
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != 3:
                raise ValueError(f"rates.path: {path}:{line}: expected 3 fields, got {len(row)}")
            try:
                t, dev_f, rate = (float(c) for c in row)
            except ValueError:
                raise ValueError(f"rates.path: {path}:{line}: fields must be numbers "
                                 f"(got {','.join(row)})") from None
            if not (math.isfinite(t) and t >= 0):
                raise ValueError(f"rates.path: {path}:{line}: time {row[0]} must be >= 0")
            if not dev_f.is_integer() or dev_f < 0:
                raise ValueError(f"rates.path: {path}:{line}: device {row[1]} must be a whole number >= 0")
            if not (math.isfinite(rate) and rate >= 0):
                raise ValueError(f"rates.path: {path}:{line}: rate {row[2]} must be >= 0")
            per_device = rows.setdefault(int(dev_f), {})
            if t in per_device:
                raise ValueError(f"rates.path: {path}:{line}: device {int(dev_f)} has two rows for time {t}")
            per_device[t] = rate
    return {d: sorted(r.items()) for d, r in rows.items()}


def trace_profiles(path: str | Path, num_devices: int, min_rate: float) -> list[PiecewiseProfile]:
    """One piecewise-constant profile per device 0..num_devices-1; ValueError lists devices missing."""
    rows = read_trace(path)
    missing = [d for d in range(num_devices) if d not in rows]
    if missing:
        shown = ", ".join(str(d) for d in missing[:10]) + (", ..." if len(missing) > 10 else "")
        covered = ", ".join(str(d) for d in sorted(rows)[:10]) or "none"
        raise ValueError(f"rates.path: trace {str(path)!r} has no rows for device(s) {shown} of the "
                         f"{num_devices} configured (it covers {covered}{', ...' if len(rows) > 10 else ''})")
    profiles = []
    for d in range(num_devices):
        times = [t for t, _ in rows[d]]
        rates = [max(min_rate, r) for _, r in rows[d]]
        times[0] = 0.0
        profiles.append(PiecewiseProfile(times, rates))
    return profiles
