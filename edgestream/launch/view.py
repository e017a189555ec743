"""What a local run shows while it trains: a rich Live table on a terminal (refreshed about twice a
second), otherwise one plain progress line every few seconds. Both are fed from the trainers' rank
files (`RanksTail`), never from the trainers themselves."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from edgestream.launch.outage import KINDS as WAIT_KINDS
from edgestream.launch.outage import KafkaWaits
from edgestream.runner.report import drift_line

WINDOW = 20  # steps per device that the rate and the wait/compute/comm shares are taken over
#: the metric an eval line is shown by: the first of these it carries (classification, regression)
PRIMARY = ("accuracy", "rmse")


@dataclass
class DeviceState:
    step: int | None = None
    batch: int | None = None
    buffer: int | None = None
    lag_s: float | None = None         # seconds of data behind (the step lines' lag_s)
    dropped: int = 0
    loss: float | None = None
    rate: float | None = None          # the stream rate a trainer reports (extra key "rate"), if any
    recent: deque = field(default_factory=lambda: deque(maxlen=WINDOW))  # (time, batch, wait, compute, comm)

    def add(self, rec: dict) -> None:
        self.step = rec.get("step", self.step)
        self.batch = rec.get("batch", self.batch)
        self.buffer = rec.get("buffer_samples", self.buffer)
        self.lag_s = rec.get("lag_s", self.lag_s)
        self.dropped += int(rec.get("dropped") or 0)
        if rec.get("loss") is not None:
            self.loss = rec["loss"]
        if rec.get("rate") is not None:
            self.rate = rec["rate"]
        self.recent.append((float(rec.get("time") or 0.0), int(rec.get("batch") or 0), float(rec.get("wait_s") or 0.0),
                            float(rec.get("compute_s") or 0.0), float(rec.get("comm_s") or 0.0)))

    def trained_per_s(self) -> float | None:
        """Samples trained per second over the recent steps."""
        if len(self.recent) < 2:
            return None
        span = self.recent[-1][0] - self.recent[0][0]
        return sum(r[1] for r in list(self.recent)[1:]) / span if span > 0 else None

    def shares(self) -> tuple[float, float, float] | None:
        """(wait, compute, comm) fractions of the recent steps' measured time."""
        w = sum(r[2] for r in self.recent)
        c = sum(r[3] for r in self.recent)
        m = sum(r[4] for r in self.recent)
        total = w + c + m
        return (w / total, c / total, m / total) if total > 0 else None


class LiveState:
    """Running figures of a local run, updated from (rank, record) pairs of the rank files."""

    def __init__(self, run: str, world: int) -> None:
        self.run = run
        self.world = world
        self.t0 = time.monotonic()
        self.devices: dict[int, DeviceState] = {r: DeviceState() for r in range(world)}
        self.accuracy: float | None = None  # the latest value of `metric` (accuracy; rmse for regression)
        self.metric = "accuracy"
        self.eval_step: int | None = None
        self.status = "starting"
        self.phase: str | None = None      # while starting: what the trainers are doing (runner.rundir.starting_phase)
        self.ps: PSState | None = None     # a parameter-server run's PS figures
        self.kafka = KafkaWaits()          # the devices waiting for Kafka (their "wait" records)
        self.warnings: list[str] = []      # the trainers' warning lines (lag_warning) not yet shown
        self.placed: dict[int, str] = {}   # device -> where its trainer computes ("cuda:0", "cpu")
        self.backend: str | None = None    # the ranks' agreed backend and why (rank 0's "placement" line)
        self.pool: Any = None              # the devices' prequential figures, pooled (metrics.prequential.LivePool)
        self.drifts = 0                    # drift detections in the rank files so far

    def add_ps(self, records: list[dict]) -> None:
        """Records of the parameter server's ranks/ps.jsonl."""
        if self.ps is None:
            self.ps = PSState()
        self.add([(-1, r) for r in records if r.get("kind") == "eval"])
        for rec in records:
            self.ps.add(rec)

    def add(self, items: list[tuple[int, dict]]) -> None:
        for rank, rec in items:
            if rec.get("kind") == "eval":
                metric = next((k for k in PRIMARY if rec.get(k) is not None), None)
                if metric is not None:
                    self.metric, self.accuracy, self.eval_step = metric, float(rec[metric]), rec.get("step")
                continue
            device = rec.get("device", rank)
            if rec.get("kind") == "placement":  # a trainer's device and the agreed backend (edgestream.trainer.gpus)
                self._placed(int(device), rec)
                continue
            if rec.get("kind") in WAIT_KINDS:
                self.kafka.add(int(device), rec)
                continue
            if rec.get("kind") == "drift":  # a detection: counted, and said as a line of its own
                self.drifts += 1
                self.warnings.append(drift_line(rec))
                continue
            if rec.get("kind") not in (None, "step"):
                continue
            if "preq_n" in rec:
                if self.pool is None:
                    from edgestream.metrics.prequential import LivePool

                    self.pool = LivePool()
                self.pool.update(int(device), rec)
            self.devices.setdefault(int(device), DeviceState()).add(rec)
            if rec.get("lag_warning"):
                self.warnings.append(str(rec["lag_warning"]))

    def _placed(self, device: int, rec: dict) -> None:
        self.placed[device] = str(rec.get("on") or "?")
        if rec.get("note") and (self.backend is None or device == 0):
            self.backend = str(rec["note"])
            if "share GPU" in self.backend and device == 0:  # said once, as a line of its own
                self.warnings.append(f"note: {self.backend}")

    def placement(self) -> str | None:
        """Where the trainers compute and their backend: "on cuda:0 x2 | backend gloo ... share GPU ..."."""
        if not self.placed:
            return None
        ons = list(self.placed.values())
        where = ", ".join(f"{on} x{ons.count(on)}" for on in dict.fromkeys(ons))
        return f"on {where}" + (f" | {self.backend}" if self.backend else "")

    def pop_warnings(self) -> list[str]:
        """The trainers' warning lines since the last call (the orchestrator prints them)."""
        out, self.warnings = self.warnings, []
        return out

    @property
    def shown_status(self) -> str:
        """The status, with what the trainers are doing while it is "starting"."""
        return f"{self.status} ({self.phase})" if self.status == "starting" and self.phase else self.status

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def headline(self) -> str:
        acc = f"{self.accuracy:.3f} (step {self.eval_step})" if self.accuracy is not None else "-"
        wait = self.kafka.text()  # a device waiting for Kafka
        head = f"{self.run} | {self.elapsed:6.1f} s | {self.metric} {acc} | {self.shown_status}"
        note = self.stream_note()
        return head + (f" | {note}" * bool(note)) + (f" | {wait}" * bool(wait))

    def stream_note(self) -> str:
        """The all-devices prequential figure and the drifts so far ("" without prequential evaluation)."""
        if self.pool is None:
            return ""
        from edgestream.runner.report import stream_note

        return stream_note(self.pool.figures("preq_"), self.metric, self.drifts)

    def table(self) -> Any:
        from rich.table import Table

        t = Table(title=self.headline(), title_justify="left", expand=False,
                  caption=self.ps.text() if self.ps is not None else None, caption_justify="left")
        for col in ("device", "step", "rate/s", "trained/s", "batch", "buffer", "lag s", "dropped", "wait",
                    "compute", "comm", "loss", "on"):
            t.add_column(col, justify="right")
        for d, s in sorted(self.devices.items()):
            sh = s.shares()
            tps = s.trained_per_s()
            t.add_row(str(d), _fmt(s.step), _fmt(s.rate, ".0f"), _fmt(tps, ".0f"), _fmt(s.batch), _fmt(s.buffer),
                      _fmt(s.lag_s, ".1f"), str(s.dropped), *((f"{x:.0%}" for x in sh) if sh else ("-", "-", "-")),
                      _fmt(s.loss, ".3f"), self.placed.get(d, "-"))
        if self.backend:
            t.caption = "\n".join(x for x in (self.backend, t.caption) if x)
        return t

    def line(self) -> str:
        """One plain progress line (for logs and pipes)."""
        steps = [s.step for s in self.devices.values() if s.step is not None]
        tps = [x for x in (s.trained_per_s() for s in self.devices.values()) if x is not None]
        buf = [s.buffer for s in self.devices.values() if s.buffer is not None]
        shares = [s.shares() for s in self.devices.values()]
        shares = [x for x in shares if x is not None]
        part = [f"[{self.elapsed:7.1f}s] {self.shown_status}",
                f"steps {min(steps)}-{max(steps)}" if steps else "steps -",
                f"{self.metric} {self.accuracy:.3f}" if self.accuracy is not None else f"{self.metric} -",
                f"trained/s {sum(tps):.0f}" if tps else "trained/s -",
                f"buffer max {max(buf)}" if buf else "buffer -"]
        if self.kafka.text():
            part.insert(1, self.kafka.text())
        if self.stream_note():
            part.append(self.stream_note())
        lags = [s.lag_s for s in self.devices.values() if s.lag_s is not None]
        if lags:
            part.append(f"lag max {max(lags):.1f} s")
        if shares:
            n = len(shares)
            part.append("wait/compute/comm " + "/".join(f"{sum(x[i] for x in shares) / n:.0%}" for i in range(3)))
        if self.ps is not None:
            part.append(self.ps.text())
        if self.placement():
            part.append(self.placement())
        return " | ".join(part)


@dataclass
class PSState:
    """The parameter server's running figures: from its "ps_stats" lines (pushes/s, version, commits,
    rejected) and its reply lines ("ps": staleness, time a pull was held back)."""

    version: int | None = None
    pushes_per_s: float | None = None
    pushes: int = 0
    commits: int = 0
    rejected: int = 0
    replies: int = 0
    staleness_sum: float = 0.0
    staleness_max: int = 0
    blocked_s: float = 0.0
    starts: int = 0

    def add(self, rec: dict) -> None:
        kind = rec.get("kind")
        if kind == "ps_stats":
            self.version = rec.get("version", self.version)
            self.pushes_per_s = rec.get("pushes_per_s", self.pushes_per_s)
            self.pushes = int(rec.get("pushes_applied") or self.pushes)
            self.commits = int(rec.get("commits") or self.commits)
            self.rejected = int(rec.get("rejected") or self.rejected)
        elif kind == "ps":
            self.replies += 1
            lag = int(rec.get("staleness") or 0)
            self.staleness_sum += lag
            self.staleness_max = max(self.staleness_max, lag)
            self.blocked_s += float(rec.get("blocked_s") or 0.0)
        elif kind == "ps_start":
            self.starts += 1

    def text(self) -> str:
        mean = self.staleness_sum / self.replies if self.replies else 0.0
        restarts = f" | restarts {self.starts - 1}" if self.starts > 1 else ""
        return (f"PS v{_fmt(self.version)} | pushes/s {_fmt(self.pushes_per_s, '.1f')} | staleness mean {mean:.2f} "
                f"max {self.staleness_max} | blocked {self.blocked_s:.1f} s | commits {self.commits} | "
                f"rejected {self.rejected}{restarts}")


def _fmt(v: Any, spec: str = "") -> str:
    if v is None:
        return "-"
    try:
        return format(v, spec)
    except (TypeError, ValueError):
        return str(v)


class View:
    """The live view of a run: a rich Live table when `live`, else `line()` every `every_s` seconds
    on `echo` (None: silent; every_s None: runner.progress.plain_every_s(), as an in-process run's lines)."""

    def __init__(self, state: LiveState, *, live: bool, echo=None, every_s: float | None = None,
                 console: Any = None) -> None:
        from edgestream.runner.progress import plain_every_s

        self.state = state
        self.echo = echo
        self.every_s = plain_every_s() if every_s is None else every_s
        self._next = self.every_s
        self._live = None
        if live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(state.table(), console=console or Console(stderr=True), refresh_per_second=2,
                              transient=False)
            self._live.start()

    def update(self) -> None:
        if self._live is not None:
            self._live.update(self.state.table())
        elif self.echo is not None and self.state.elapsed >= self._next:
            self._next = self.state.elapsed + self.every_s
            self.echo(self.state.line())

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self.state.table())
            self._live.stop()
            self._live = None
