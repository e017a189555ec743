"""When a stream outruns training: `LagWatch` says once that a device's lag has kept growing.

A lag figure is fed at each step (the Kafka dataset feeds the lag in seconds of data: how old the
oldest unread sample is, so a lag bounded by max_lag_s, or a producer slowing down, does not read as
growth; any figure that grows when the stream outruns training would do). Time is cut
into bins of `warn_after_s / 4` seconds; the lag has *kept growing* when, over six consecutive bins
(the current one and the five before it), every bin's lowest figure is above the previous bin's
lowest and above the highest of the bin before that (the climb over two bins is larger than the
lag's ups and downs). A lag that only fluctuates, however widely, practically never passes that, nor
one that climbed and then levelled off for the last three bins (a lag bounded by max_lag_s); one
that climbs steadily passes it `warn_after_s` to 1.25 x `warn_after_s` after it began.

`update` is True once per growth episode: after it fired it stays silent until the lag has fallen back
to the level it had when the growth began (the first bin's highest figure). Pure: time is an argument.
"""

from __future__ import annotations

from collections import deque

BINS = 5  # the growth must be seen over this many bin steps (six bins of warn_after_s / 4)


class LagWatch:
    """A lag-growth detector for one device stream; see the module doc."""

    def __init__(self, warn_after_s: float) -> None:
        if not warn_after_s > 0:
            raise ValueError(f"runtime.lag_warning_s: {warn_after_s} is not allowed; must be > 0")
        self.warn_after_s = float(warn_after_s)
        self.width = self.warn_after_s / (BINS - 1)
        self._bins: deque[list[float]] = deque(maxlen=BINS + 1)  # [index, low, high], oldest first
        self._rearm_at: float | None = None  # set while a warning stands: the lag that re-arms it
        self.grown_since: float | None = None  # when the growth that fired the warning began (time)

    def update(self, t: float, lag: float) -> bool:
        """Record the lag at time t (non-decreasing); True when this is the moment to warn."""
        index = int(t // self.width)
        bins = self._bins
        if bins and bins[-1][0] == index:
            b = bins[-1]
            b[1], b[2] = min(b[1], lag), max(b[2], lag)
        else:
            bins.append([index, lag, lag])
        if self._rearm_at is not None:
            if lag <= self._rearm_at:
                self._rearm_at = None
            return False
        if len(bins) <= BINS or bins[-1][0] - bins[0][0] != BINS:  # six bins, consecutive
            return False
        if all(bins[i + 1][1] > bins[i][1] for i in range(BINS)) and \
                all(bins[i + 2][1] > bins[i][2] for i in range(BINS - 1)):
            self._rearm_at = bins[0][2]
            self.grown_since = bins[0][0] * self.width
            return True
        return False
