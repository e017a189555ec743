"""A local run's children's phase: the orchestrator watches its children and the rank files until the trainers
stop at the agreed stop condition, a child dies, a straggler overstays, or SIGINT/SIGTERM arrives; it lets the
producer stream once every trainer is ready, restarts a parameter server that died, and feeds the live view."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edgestream import settings
from edgestream.launch.procs import Child, describe_status
from edgestream.launch.run_children import RunChildren
from edgestream.launch.tail import JsonlTail, RanksTail
from edgestream.launch.view import LiveState, View
from edgestream.runner.rundir import PS_FILE, starting_phase

#: seconds the other trainers get to finish after the first one stopped at the agreed stop condition
STRAGGLER_S = settings.launch_straggler_s()


@dataclass
class Outcome:
    """How the children's phase ended: 'done', 'failed' (a child died) or 'signal'."""

    kind: str = "running"
    reason: str = ""
    child: Child | None = None
    signum: int | None = None
    stopped: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)   # children still alive GRACE_S after SIGTERM
    stop_s: float | None = None                        # seconds from SIGTERM to the last child gone
    hint: str = ""                                     # how to go on (a Kafka outage: launch/outage.py)


class Signals:
    """SIGINT/SIGTERM set a flag (the main loop acts on it); restored at exit. Only in the main thread."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on)
        return self

    def _on(self, signum, frame) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def watch(kids: RunChildren, signals: Signals, state: LiveState, view: View, tail: RanksTail,
          echo: Callable[[str], None], on_restart: Callable[[], None]) -> Outcome:
    """Watch the run until its children's phase ends; `on_restart()` after a parameter server was restarted."""
    first_done: float | None = None
    died: dict[int, float] = {}
    ranks = kids.path / "ranks"
    ps_tail = JsonlTail(ranks / PS_FILE) if kids.ps_family else None
    while True:
        kids.release_producer()
        state.add(tail.read())
        if ps_tail is not None:
            state.add_ps(ps_tail.read())
        for line in state.pop_warnings():  # a trainer's lag warning (once per growth episode)
            echo(line)
        view.update()
        if signals.signum is not None:
            return Outcome("signal", f"interrupted by {signal.Signals(signals.signum).name}", signum=signals.signum)
        codes = kids.poll_trainers(died)
        failed = [r for r, code in codes.items() if code is not None and code != 0]
        if failed:
            # when one trainer dies its peers fail soon after (a collective loses them): let them settle
            # (polling often, to see who went when), then name the first to die; among those seen in the
            # same poll, one killed by a signal, else the lowest rank
            settle = time.monotonic() + 0.5
            while time.monotonic() < settle:
                time.sleep(0.02)
                codes = kids.poll_trainers(died)
            failed = [r for r, code in codes.items() if code is not None and code != 0]
            failed.sort(key=lambda r: (died[r], codes[r] >= 0, r))
            r = failed[0]
            also = "; ".join(f"device {o} {describe_status(codes[o])}" for o in failed[1:])
            return Outcome("failed", f"device {r} (trainer rank {r}) {describe_status(codes[r])}"
                           + (f" (also {also})" if also else ""), child=kids.trainers[r])
        pcode = kids.producer.poll() if kids.producer else None
        if all(code == 0 for code in codes.values()):
            return Outcome("done", "finished")
        restarts = kids.ps_restarts
        ps_failed = kids.check_ps()
        if ps_failed is not None:
            return Outcome("failed", ps_failed, child=kids.ps)
        if kids.ps_restarts != restarts:
            on_restart()
        if pcode is not None:
            return Outcome("failed", f"the producer exited early ({describe_status(pcode)})", child=kids.producer)
        if first_done is None and any(code == 0 for code in codes.values()):
            first_done = time.monotonic()
            state.status = "stopping"
        if first_done is not None and time.monotonic() - first_done > STRAGGLER_S:
            late = min(r for r, code in codes.items() if code is None)
            return Outcome("failed", f"device {late} (trainer rank {late}) did not stop within {STRAGGLER_S:g} s "
                           f"of the others", child=kids.trainers[late])
        if state.status == "starting" and any(d.step is not None for d in state.devices.values()):
            state.status = "training"
        elif state.status == "starting":  # what the trainers are doing meanwhile (ranks/<rank>.phase)
            state.phase = starting_phase(ranks, kids.world)
        time.sleep(0.1 if kids.released else 0.01)  # the streams go the moment every trainer is ready
