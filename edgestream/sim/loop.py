"""The simulator's event loop around SimPy: `run_until` (signals between two events, never inside one) and
`fewer_gc_passes` (the garbage collector's young passes while a run allocates its many small objects)."""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
from collections.abc import Generator

import simpy
from simpy.core import EmptySchedule, StopSimulation

from edgestream.runner.rundir import Terminated

#: the cyclic garbage collector's youngest-generation threshold while a simulation runs (Python's
#: default is 700): every request allocates a few container objects (SimPy events, generator frames,
#: dicts), so at the default a young collection ran every ~100 requests and each one walked the
#: survivors; a run's garbage is almost all freed by reference counting anyway. 20,000 objects keep
#: the memory a collection would reclaim small (about 15% more device-steps/s at 256 devices).
GC_THRESHOLD_0 = 20_000


@contextlib.contextmanager
def fewer_gc_passes() -> Generator[None, None, None]:
    """Raise the collector's youngest-generation threshold to GC_THRESHOLD_0 for the block (never lower
    it), and restore the previous thresholds after."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], GC_THRESHOLD_0), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def run_until(env: simpy.Environment, until: simpy.Event) -> None:
    """`env.run(until=until)`, with Ctrl-C and SIGTERM raised between two events, never inside one.

    A signal's exception raised where the handler happens to run would land inside a worker's SimPy process (a
    generator mid-request: the worker then "never posted" what it asked for) and end the run in a traceback
    instead of an interrupted summary. While the loop runs (main thread only) SIGINT -- and SIGTERM where a
    handler of the program's (runner.rundir.sigterm_interrupts) would raise -- are only noted; the loop raises
    KeyboardInterrupt / runner.rundir.Terminated before its next event. Elsewhere it is `env.run`."""
    noted: list[int] = []
    handled = [signal.SIGINT] if threading.current_thread() is threading.main_thread() else []
    if handled and callable(signal.getsignal(signal.SIGTERM)):
        handled.append(signal.SIGTERM)
    if until.callbacks is None:  # already processed
        return
    until.callbacks.append(StopSimulation.callback)
    previous = {sig: signal.signal(sig, lambda signum, frame: noted.append(signum)) for sig in handled}
    try:
        while True:
            if noted:
                raise Terminated() if noted[0] == signal.SIGTERM else KeyboardInterrupt()
            env.step()
    except StopSimulation:
        return
    except EmptySchedule:
        raise RuntimeError(f"no scheduled events left but the run's end was not reached: {until}") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
