"""Reused batch buffers: the consumer decodes each batch into one contiguous host buffer taken from a small
pool instead of a fresh allocation a batch (for a GPU: pinned memory, whose allocation is costly).

`BatchBuffers(shape, dtype, pin=False)`: `take(n)` returns a C-contiguous (n, *shape) array of the pool's
dtype backed by a reused buffer. A buffer is reused only when nothing refers to it any more:

- host batches (pin=False) are handed out: the batch's `x` is a view of the buffer (numpy, or a torch
  tensor made from it, sharing its memory), and every view, tensor, autograd-saved tensor or numpy
  array made from it holds a reference to the buffer (CPython's reference count). A buffer whose count
  shows such a holder is never written: a batch handed to the trainer stays valid for as long as the
  trainer (or a prefetch queue) holds it, however many batches are taken meanwhile;
- pinned staging buffers (pin=True) are read by an asynchronous host-to-device copy: `copied(buf)`
  records a CUDA event after the copy was queued, and the buffer is reused once that event has passed
  (and nothing on the host refers to it).

When every buffer is in use a fresh one is allocated (the pool keeps at most `slots`; the others are
ordinary pageable allocations freed with their batch): taking never overwrites a batch in use, and waits
only when every pinned buffer's copy is still queued on the GPU (then for one of those copies).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    import torch

#: buffers kept per pool: the batch being built, the one the trainer holds, and a prefetch queue's 1-2
SLOTS = 4


class _Slot:
    __slots__ = ("arr", "event", "pending", "pinned", "start", "end")

    def __init__(self, arr: np.ndarray, pinned: torch.Tensor | None) -> None:
        # pinned: the page-locked tensor that owns arr's memory (kept alive with it); event: recorded after
        # its last copy (one per slot, re-recorded), pending until that copy is done; [start, end): its
        # addresses (`copied` finds a copy's slot by them: read once, not through arr.ctypes each time)
        self.arr, self.pinned, self.event, self.pending = arr, pinned, None, False
        self.start = arr.__array_interface__["data"][0]
        self.end = self.start + max(1, arr.nbytes)


def _refs(arr: np.ndarray) -> int:
    return sys.getrefcount(arr)


class BatchBuffers:
    """A pool of (capacity, *shape) host buffers of `dtype` (numpy); `pin`: page-locked (CUDA) memory."""

    def __init__(self, shape: tuple[int, ...], dtype, pin: bool = False, slots: int = SLOTS) -> None:
        import torch

        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.pin = bool(pin) and torch.cuda.is_available()
        self.slots: list[_Slot] = []
        self.max_slots = slots
        self.fresh = 0  # batches that found every pooled buffer in use (a fresh allocation)
        self._free_refs = self._baseline()

    def _alloc(self, n: int) -> _Slot:
        import torch

        if self.pin:
            t = torch.empty((n, *self.shape), dtype=torch.from_numpy(np.empty(0, self.dtype)).dtype, pin_memory=True)
            return _Slot(t.numpy(), t)
        return _Slot(np.empty((n, *self.shape), self.dtype), None)

    def _baseline(self) -> int:
        """The reference count of a pooled buffer nobody else holds (the pool's own references)."""
        probe = _Slot(np.empty(0, self.dtype), None)
        self.slots.append(probe)
        try:
            return self._count(probe)
        finally:
            self.slots.pop()

    @staticmethod
    def _count(slot: _Slot) -> int:
        return _refs(slot.arr)

    def _free(self, slot: _Slot) -> bool:
        if self._count(slot) > self._free_refs:
            return False
        if slot.pending:
            if not slot.event.query():
                return False
            slot.pending = False
        return True

    def __del__(self) -> None:
        # pinned memory goes back to torch's cache, which knows nothing of the copies queued from it here
        for slot in self.slots:
            if slot.pending:
                try:
                    slot.event.synchronize()
                except Exception:  # noqa: BLE001 - a CUDA context already torn down at exit
                    return

    def take(self, n: int) -> np.ndarray:
        """A C-contiguous (n, *shape) array in a buffer nothing else uses (see the module docstring)."""
        for i, slot in enumerate(self.slots):
            if self._free(slot):
                if len(slot.arr) < n:  # a larger batch than before: this buffer grows
                    slot = self.slots[i] = self._alloc(n)
                return slot.arr[:n]
        if len(self.slots) < self.max_slots:
            slot = self._alloc(n)
            self.slots.append(slot)
            return slot.arr[:n]
        if self.pin:  # every staging buffer's copy still queued: wait for the first whose host side is free
            for slot in self.slots:
                if self._count(slot) <= self._free_refs and len(slot.arr) >= n:
                    if slot.pending:
                        slot.event.synchronize()
                    slot.pending = False
                    return slot.arr[:n]
        self.fresh += 1
        # (pageable memory, also for a pinned pool: a copy from it is done with the host side on return,
        # whereas freed pinned memory could be handed out again while its asynchronous copy still reads it)
        return np.empty((n, *self.shape), self.dtype)

    def take_tensor(self, n: int) -> torch.Tensor:
        """`take(n)` as a torch tensor sharing its memory (page-locked when the pool is: its copy to a GPU
        is asynchronous; call `copied` after queuing it)."""
        import torch

        return torch.from_numpy(self.take(n))

    def copied(self, x: torch.Tensor) -> None:
        """`x` (from `take_tensor`) was queued for an asynchronous copy on the current CUDA stream: its
        buffer is not reused before that copy is done (a CUDA event recorded now)."""
        import torch

        if not self.pin:
            return
        ptr = x.data_ptr()
        for slot in self.slots:
            if slot.start <= ptr < slot.end:
                if slot.event is None:
                    slot.event = torch.cuda.Event()
                slot.event.record()
                slot.pending = True
                return
