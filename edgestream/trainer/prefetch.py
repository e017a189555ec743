"""Batches prepared ahead of the step: a bounded prefetch thread around a trainer's `KafkaStreamDataset`.

`PrefetchDataset(dataset, depth, device)` takes the next batch -- poll, decode, validation, the copy to the
device -- in a thread while the trainer computes the current one, and hands batches out in stream order
through a queue of `depth` (1-2) batches. What the trainer sees is what the bare dataset gives it:

* **order and acks**: batches come out in the order they were taken; `ack(batch)` commits that batch's
  offsets (synchronously, as the dataset does); `ack_later(batch)` leaves the commit to the thread (between
  two takes) or to the next `ack` / `close`, so a commit is never on the step's critical path. A commit
  never goes back: an older batch's pending ack is dropped once a newer one is committed.
* **nothing acknowledged is lost**: `close()` stops the thread, then commits the pending ack before the
  dataset closes (which makes it durable). Batches taken ahead but never handed out are not acknowledged:
  a restart reads them again (at-least-once, as any unacknowledged sample).
* **state**: `state_dict()` and `totals` are the dataset's as they were right after the last batch HANDED
  OUT (taken with it in the thread), not after the ones taken ahead: a checkpoint resumes after the last
  batch trained, never skipping the prefetched ones.
* **errors**: an exception in the thread (an outage past its budget, a decode error) is raised by the
  trainer's next `next_batch`, after the batches taken before it.
* **CUDA**: the thread's copies and the device-side normalisation run on a side stream; the trainer's stream
  waits for that batch's event before it uses the batch (and the batch's memory is recorded on it). Labels
  stay on the host (the step notes their CRC), pinned, so the step's copy of them is asynchronous.

`prefetch_depth(plan)`: the queue depth a run gets (0: no prefetch). Only where a take ahead is the take the
algorithm would make: an algorithm whose spec says `takes_ahead` (ddl: its batch never changes), a fixed
batch (the policy's or ddl's own `batch`), no injection (injected samples depend on the step), no compute
emulation. EDGESTREAM_PREFETCH=0 turns it off, =2 deepens it.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import torch

from edgestream import settings

log = logging.getLogger("edgestream.trainer")

DEFAULT_DEPTH = 1
ENV = settings.PREFETCH.name


def prefetch_depth(plan: Any, environ: dict | None = None) -> int:
    """The prefetch queue depth for `plan`'s trainers: 0 (off) unless every take ahead is the one the
    algorithm makes (module doc); EDGESTREAM_PREFETCH (0, 1, 2) sets it where it applies."""
    return settings.prefetch(environ) if takes_fixed_batches(plan) else 0


def takes_fixed_batches(plan: Any) -> bool:
    """Whether every take of `plan`'s trainers is known ahead and of one size: an algorithm whose spec says
    `takes_ahead`, a fixed batch, no injection (injected samples depend on the step), no compute emulation.
    Then batches can be taken ahead (`PrefetchDataset`) and the step replayed from CUDA graphs
    (edgestream.trainer.graphs)."""
    fixed = plan.params.get("batch") is not None or str(plan.batch.get("policy")) == "fixed"
    emulated = plan.compute.curve is not None or plan.compute.dynamic > 0 or any(
        plan.compute.factor(i) != 1.0 for i in range(plan.world))
    return bool(plan.algorithm.takes_ahead and fixed and plan.injection is None and not emulated)


class _Item:
    __slots__ = ("batch", "state", "totals", "event", "error")

    def __init__(self, batch: Any = None, state: Any = None, totals: Any = None, event: Any = None,
                 error: BaseException | None = None) -> None:
        self.batch, self.state, self.totals, self.event, self.error = batch, state, totals, event, error


class PrefetchDataset:
    """`dataset` with its next batches taken ahead in a thread (see the module doc)."""

    def __init__(self, dataset: Any, depth: int = DEFAULT_DEPTH, device: torch.device | None = None) -> None:
        self.dataset, self.depth = dataset, max(1, int(depth))
        self.device = device
        self.timeout = dataset.timeout
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=self.depth)
        self._lock = threading.Lock()        # held while the thread (or an ack, close) uses the dataset
        self._ack_lock = threading.Lock()    # guards the pending ack
        self._later: Any = None              # newest batch to commit off the critical path
        self._committed = -1                 # next_offset of the newest commit (commits never go back)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._size: int | None = None
        self._state = dataset.state_dict()   # as of the last batch handed out
        self._totals = dict(dataset.totals)
        self._failed = False
        cuda = device is not None and torch.device(device).type == "cuda"
        self._stream = torch.cuda.Stream(device=device) if cuda else None
        self._current: Any = None  # the trainer's stream, which waits for each batch's copy

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        if self._stream is not None:
            torch.cuda.set_device(self.device)
            # this thread's current stream, once (torch's current stream is per thread): every take's copies and
            # kernels go to the side stream without a stream context per batch (~15 us of Python each)
            torch.cuda.set_stream(self._stream)
        while not self._stop.is_set():
            try:
                self._commit_later()
                with self._lock:
                    if self._stop.is_set():
                        return
                    item = self._take()
                if item is None:
                    continue
            except BaseException as exc:  # noqa: BLE001 - handed to the trainer, raised there
                item = _Item(error=exc)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    self._commit_later()  # the trainer is busy computing: commit what it acknowledged
            if item.error is not None:
                return

    def _take(self) -> _Item | None:
        ds = self.dataset
        if self._stream is None:
            batch = ds.next_batch(size=self._size)
            event = None
        else:  # on the side stream, this thread's current one (`_run`)
            batch = ds.next_batch(size=self._size)
            if batch is not None:  # labels stay on the host (the step notes their CRC), pinned for the copy
                batch.x = batch.x.to(self.device, non_blocking=True)
                if batch.labels.device.type == "cpu" and not batch.labels.is_pinned():
                    batch.labels = batch.labels.pin_memory()
            event = torch.cuda.Event()
            event.record(self._stream)
        if batch is None:
            return None
        return _Item(batch, ds.state_dict(), dict(ds.totals), event)

    def _commit_later(self) -> None:
        with self._ack_lock:
            batch, self._later = self._later, None
        if batch is not None:
            with self._lock:
                self._commit(batch)

    def _commit(self, batch: Any) -> None:
        """Commit `batch`'s offsets unless a newer batch's are committed already (holding `_lock`)."""
        offset = int(batch.next_offset)
        if offset < self._committed:
            return
        self.dataset.ack(batch)
        self._committed = offset

    # ------------------------------------------------------------------ the dataset's interface
    def next_batch(self, size: int | None = None) -> Any:
        """The next batch in stream order, or None when none came within the dataset's timeout."""
        if self._thread is None:
            self._size = size
            self._thread = threading.Thread(target=self._run, name="edgestream-prefetch", daemon=True)
            self._thread.start()
        elif size != self._size:
            raise RuntimeError(f"prefetch takes batches of size {self._size}; the algorithm asked for {size}")
        try:
            item = self._queue.get(timeout=self.timeout)
        except queue.Empty:
            return None
        if item.error is not None:
            self._failed = True
            raise item.error
        if item.event is not None:
            current = self._current
            if current is None:  # the trainer's stream (asked once: a Python call that costs ~10 us a step)
                current = self._current = torch.cuda.current_stream(self.device)
            current.wait_event(item.event)
            if item.batch.x.device.type == "cuda":
                item.batch.x.record_stream(current)  # made on the side stream, used on this one
        self._state, self._totals = item.state, item.totals
        return item.batch

    def ack(self, batch: Any) -> None:
        """Commit `batch`'s offsets now (and drop an older pending one)."""
        with self._ack_lock:
            if self._later is not None and int(self._later.next_offset) <= int(batch.next_offset):
                self._later = None
        with self._lock:
            self._commit(batch)

    def ack_later(self, batch: Any) -> None:
        """Commit `batch`'s offsets off the critical path (the thread, or the next ack / close)."""
        with self._ack_lock:
            if self._later is None or int(self._later.next_offset) <= int(batch.next_offset):
                self._later = batch

    def state_dict(self) -> dict[str, Any]:
        return self._state

    def load_state_dict(self, state: Any) -> None:
        if self._thread is not None:
            raise RuntimeError("load_state_dict after the prefetch started")
        self.dataset.load_state_dict(state)
        self._state, self._totals = self.dataset.state_dict(), dict(self.dataset.totals)

    @property
    def totals(self) -> dict[str, Any]:
        return self._totals

    def hurry(self) -> None:
        self.dataset.hurry()

    def _halt(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def close(self, wait: bool = True) -> None:
        """Stop the thread, commit the pending ack, close the dataset (which makes the commit durable)."""
        if not wait:
            self.dataset.hurry()  # a take waiting out an outage ends at once
        self._halt()
        try:
            with self._ack_lock:
                batch, self._later = self._later, None
            if batch is not None:
                self._commit(batch)
        finally:
            self.dataset.close(wait=wait)

    def __getattr__(self, name: str) -> Any:  # anything else: the dataset's (read-only use)
        return getattr(self.dataset, name)
