"""Keep the parameter server's large buffers in the heap, so they are reused warm.

Every PS message of a big model allocates buffers of the model's size: the chunks a sender builds, the body
a reader reassembles, the tensors of an update. glibc serves an allocation above its mmap threshold (at
most 32 MiB by its dynamic rule) with a fresh mmap and returns it to the OS on free, so each such buffer
is page-faulted in again: for a 45 MB resnet18 that is ~11,000 faults, about 25 ms per copy on the 2-core
box, 3-4x the copy itself. Raising the mmap threshold (and the trim threshold above it) lets freed
buffers be reused from the heap: measured copy of 45 MB 35 ms -> 9 ms (docs/BENCHMARKS.md, "Parameter
server through Kafka").

The cost is memory: up to `trim` bytes of freed heap stay with the process instead of going back to the
OS. Applied once per process, by the PS and by each PS client, sized from the model; only where the C
library is glibc (elsewhere nothing changes). `EDGESTREAM_PS_MALLOC=default` leaves malloc alone.
"""

from __future__ import annotations

import ctypes
import logging

from edgestream import settings

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MIB = 1024 * 1024
_applied: int | None = None  # the mmap threshold set in this process, once set


def keep_large_buffers(model_bytes: int) -> int | None:
    """Raise this process's mmap threshold above a `model_bytes` message (and its trim threshold above
    that); returns the threshold in force, or None where it was left alone (not glibc, or
    EDGESTREAM_PS_MALLOC=default). Idempotent; a later call with a bigger model raises it further."""
    global _applied
    if settings.ps_malloc() == "default":
        return None
    # a whole reassembled body plus its meta; above 512 MiB a fresh mmap costs little next to the transfer
    want = min(512 * _MIB, max(32 * _MIB, int(model_bytes) + 4 * _MIB))
    if _applied is not None and _applied >= want:
        return _applied
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): its allocator's own rules apply
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if not (mallopt(_M_MMAP_THRESHOLD, want) and mallopt(_M_TRIM_THRESHOLD, min(2**31 - 1, 4 * want))):
        log.info("malloc: glibc refused an mmap threshold of %d MiB; buffers are page-faulted anew", want // _MIB)
        return None
    _applied = want
    log.info("malloc: buffers up to %d MiB are reused from the heap (EDGESTREAM_PS_MALLOC=default to leave "
             "malloc alone)", want // _MIB)
    return want
