"""All-reduce through shared memory for trainer ranks on one host (`runtime.shared_memory`).

Over gloo, a 100 KB all-reduce between two processes on one host takes ~0.5-1 ms: its ring sends the bytes
through loopback TCP in several rounds, and every round wakes a network thread and a worker thread on both
sides. For the small models of edge training that latency, not the bytes, is the all-reduce. Ranks that share
a host (the local engine's processes; a workstation with several edge trainers) can instead meet in memory:

* every rank owns a file in ``/dev/shm/edgestream-<token>/`` -- a header (its weights) and two data slots
  (collective c uses slot c % 2) -- and a FIFO it is woken through; once every rank has every file it needs
  open (mapped), the names are removed, so nothing is left even by a killed rank;
* collective c: a rank copies its tensors into its slot c % 2 and its weight into its header, then posts
  (rank, c) into every peer's FIFO -- the pipe's lock orders the copy before a peer's reads on any CPU,
  weakly ordered ones (ARM: Jetson) included; it then sleeps on its own FIFO until every peer has posted c,
  and sums the slots **in rank order** with `sync/reduction.reduce_all`'s arithmetic (t_0 + t_1 + ...; a
  weighted mean w_0 t_0 + w_1 t_1 + ... divided by the weights' sum), so every rank computes the same bits,
  and they are the exact mode's (tests/unit/test_collectives.py);
* a slot is written again two collectives later, which no rank can start before every rank has read it (a
  rank starts c + 1 only once it finished c; a peer writes slot c % 2 again at c + 2, after all posted c + 1);
  a rank therefore reads a started collective before it starts the next one.

Whether the ranks share memory is found out, not assumed: rank 0's random token reaches every rank over the
process group, each rank creates its files and holds a lock on its own lock file for its life, and only when
every rank sees every other rank's files and finds their locks held (two all-reduces of an ok flag, so every
rank decides alike) is memory used. Trainer containers with their own /dev/shm, ranks on other hosts, a full
/dev/shm (space is reserved with posix_fallocate, never found missing by a SIGBUS) or no /dev/shm: the group
keeps gloo, every rank alike. A peer that dies while a rank waits for it releases its lock: the waiting rank
sees that within `CHECK_S` and raises a `RuntimeError` naming the peer (as gloo's closed connection does);
a peer that neither dies nor posts within the collectives' timeout is a `RuntimeError` too, and either error
ends every later collective of that rank (its peers' slots may be unread). (A child forked after the join
without exec would hold the rank's lock too: a dead rank would then be seen only at the timeout; the trainer
forks none.) The names go once
every rank has opened them (and the folder with them), the memory with the last process that maps it; a folder
left by a group killed while it started (no lock held in it) is removed by the next group that starts on the host.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import mmap
import os
import secrets
import select
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

#: where the groups' files live (a tmpfs on Linux); no such folder: gloo
ROOT = Path("/dev/shm")
PREFIX = "edgestream-"
#: header bytes before a segment's two slots: (unused), the two slots' weights (float64), a magic
HEADER = 64
MAGIC = 0x65_64_67_65_73_74_72_6D  # "edgestrm"
#: a post in a peer's FIFO: (this rank, its collective's sequence number)
_POST = struct.Struct("<qq")
#: a waiting rank checks its peers' locks at least this often (seconds)
CHECK_S = 0.05
#: the largest all-reduce (bytes of one rank's tensors) that goes through memory; larger ones stay on gloo
MAX_BYTES = 256 * 2**20
#: a group's files older than this whose locks nobody holds are a killed group's: removed (seconds)
STALE_S = 60.0


def _capacity(nbytes: int) -> int:
    """The slot size for a payload of `nbytes`: the next power of two of at least 64 KiB (few sizes, so few
    files however the payload varies)."""
    cap = 1 << 16
    while cap < nbytes:
        cap <<= 1
    return cap


def _held(path: Path) -> bool:
    """Whether some process holds the lock of the lock file `path` (a live rank); False when it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        return _held_fd(fd)
    finally:
        os.close(fd)


def _held_fd(fd: int) -> bool:
    """Whether the lock of the lock file open as `fd` (this process's own open of it) is held by its owner."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def sweep(root: Path = ROOT, stale_s: float = STALE_S) -> list[Path]:
    """Remove the folders of groups whose ranks are all gone (no lock held) and that are older than
    `stale_s`; returns what was removed."""
    removed = []
    try:
        folders = [p for p in root.iterdir() if p.name.startswith(PREFIX) and p.is_dir()]
    except OSError:
        return removed
    now = time.time()
    for folder in folders:
        try:
            newest = max([folder.stat().st_mtime] + [p.stat().st_mtime for p in folder.iterdir()])
            if now - newest < stale_s:  # a group making its files (a new capacity's) is never swept
                continue
            if any(_held(lock) for lock in folder.glob("*.lock")):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        except OSError:
            continue
    return removed


class _Segment:
    """One rank's file of slots of `cap` bytes, mapped."""

    def __init__(self, path: Path, cap: int, create: bool) -> None:
        self.path, self.cap = path, cap
        size = HEADER + 2 * cap
        fd = os.open(path, (os.O_RDWR | os.O_CREAT | os.O_EXCL) if create else os.O_RDWR, 0o600)
        try:
            if create:
                os.posix_fallocate(fd, 0, size)  # the pages exist now: never a SIGBUS on a full tmpfs later
            elif os.fstat(fd).st_size < size:
                raise OSError(errno.EAGAIN, f"{path} is not fully created yet")
            self.mm = mmap.mmap(fd, size)  # a peer's too (read-write, though only its owner writes: torch views)
        except OSError:
            if create:  # no room (ENOSPC): the file made above goes too
                path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        self.words = np.frombuffer(self.mm, dtype=np.int64, count=HEADER // 8)  # header as int64 words
        self.floats = np.frombuffer(self.mm, dtype=np.float64, count=HEADER // 8)
        if create:
            self.words[3] = MAGIC
        elif int(self.words[3]) != MAGIC:
            raise OSError(errno.EAGAIN, f"{path} has no header yet")
        data = torch.frombuffer(self.mm, dtype=torch.uint8, offset=HEADER, count=2 * cap)
        self.slots = (data[:cap], data[cap:])

    def view(self, slot: int, dtype: torch.dtype, numel: int) -> Tensor:
        return self.slots[slot][:numel * dtype.itemsize].view(dtype)

    def close(self) -> None:
        # no tensor viewing the mapping outlives it: results are fresh tensors (a sum's clone, a mean's cat), and
        # the reducer refuses work once closed (torch.frombuffer does not pin the mapping: a view would dangle)
        self.words = self.floats = None  # type: ignore[assignment]
        self.slots = ()  # type: ignore[assignment]
        try:
            self.mm.close()
        except BufferError:  # the numpy header views of a caller still alive: the mapping goes with them
            pass


class ShmWork:
    """Collective `seq` of a `ShmReducer`, started: `is_completed()` without waiting, `wait()` waits for every
    peer's post and computes the result (rank-order sum, divided for a weighted mean) into `result`."""

    def __init__(self, reducer: ShmReducer, seq: int, cap: int, dtype: torch.dtype, numel: int,
                 sizes: list[int] | None) -> None:
        # sizes: the element counts of a weighted mean's tensors (None: a sum)
        self.reducer, self.seq, self.cap, self.dtype, self.numel, self.sizes = reducer, seq, cap, dtype, numel, sizes
        self.result: Tensor | None = None
        self.error: Exception | None = None

    def is_completed(self) -> bool:
        return self.result is not None or self.error is not None or self.reducer._posted(self.seq)

    def wait(self) -> bool:
        if self.error is not None:
            raise self.error
        if self.result is None:
            try:
                self.reducer._wait(self.seq)
                self.result = self.reducer._sum(self.seq, self.cap, self.dtype, self.numel, self.sizes)
            except RuntimeError as exc:  # raised to whoever waits for this collective, each time
                self.error = exc
                raise
        return True


class ShmReducer:
    """This rank's side of a group's shared-memory all-reduce (module doc); made by `ShmReducer.join`."""

    def __init__(self, rank: int, world: int, folder: Path, timeout_s: float) -> None:
        self.rank, self.world, self.folder, self.timeout_s = rank, world, folder, float(timeout_s)
        self.peers = [r for r in range(world) if r != rank]
        self._lock_fd: int | None = None
        self._fifo: int | None = None
        self._wake: dict[int, int] = {}
        self._locks: dict[int, int] = {}  # the peers' lock files, open: whether each peer still lives
        self._own: dict[int, _Segment] = {}
        self._theirs: dict[int, list[_Segment | None]] = {}
        self._refused: set[int] = set()
        self._broken: RuntimeError | None = None  # a lost or silent peer: every later collective fails with it
        self.uniform_threads = True  # every rank computes with as many torch threads (see join)
        self.seq = 0
        self._seen = [0] * world  # each peer's newest post (its collective's sequence number), from the FIFO
        self._inflight: ShmWork | None = None
        self._closed = False

    # ------------------------------------------------------------------ joining
    @classmethod
    def join(cls, rank: int, world: int, group: Any = None, timeout_s: float = 1800.0,
             root: Path = ROOT) -> ShmReducer | None:
        """Collective over `group` (every rank calls it at the same point): the reducer when every rank
        shares memory with every other, else None on every rank (the group keeps its backend)."""
        token = torch.zeros(1, dtype=torch.int64)
        if rank == 0:
            sweep(root)
            token[0] = secrets.randbits(62)
        dist.broadcast(token, 0 if group is None else dist.get_global_rank(group, 0), group=group)
        folder = root / f"{PREFIX}{int(token[0]):x}"
        me = cls(rank, world, folder, timeout_s)
        ok = me._create()
        if _agree(ok, group) and _agree(me._connect(), group):
            # every rank holds every file it needs open: the names can go (a killed rank leaves nothing)
            for kind in ("fifo", "lock"):
                (folder / f"r{rank}.{kind}").unlink(missing_ok=True)
            me._remove_folder(group)
            # a weighted mean's fused adds round a kernel's chunk tails apart from its vector bodies, and the chunks
            # follow the torch thread count: ranks computing with different counts keep weighted means on gloo
            threads = torch.tensor([torch.get_num_threads(), -torch.get_num_threads()], dtype=torch.int64)
            dist.all_reduce(threads, op=dist.ReduceOp.MAX, group=group)
            me.uniform_threads = int(threads[0]) == -int(threads[1])
            atexit.register(me.close)
            return me
        me.close()
        return None

    def _create(self) -> bool:
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
            lock = self.folder / f"r{self.rank}.lock"
            self._lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fifo = self.folder / f"r{self.rank}.fifo"
            os.mkfifo(fifo, 0o600)
            # read-write: the open never blocks, and the FIFO always has a reader (writes never fail with EPIPE)
            self._fifo = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
            self._waiter = select.poll()
            self._waiter.register(self._fifo, select.POLLIN)
            return True
        except OSError:
            return False

    def _connect(self) -> bool:
        try:
            for r in self.peers:
                self._locks[r] = os.open(self.folder / f"r{r}.lock", os.O_RDONLY)
                if not _held_fd(self._locks[r]):
                    return False
                self._wake[r] = os.open(self.folder / f"r{r}.fifo", os.O_RDWR | os.O_NONBLOCK)
            return True
        except OSError:
            return False

    # ------------------------------------------------------------------ slots
    def ready_for(self, nbytes: int, group: Any = None) -> int | None:
        """The slot capacity for a payload of `nbytes` once every rank has its files of that size (a
        collective the first time a capacity is needed: every rank asks at the same all-reduce, since the
        payloads are the same size on every rank), or None: this size stays on the backend, on every rank."""
        if nbytes > MAX_BYTES:
            return None
        cap = _capacity(nbytes)
        if cap in self._theirs:
            return cap
        if cap in self._refused:
            return None
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
            self._own[cap] = _Segment(self.folder / f"r{self.rank}-{cap}.seg", cap, create=True)
            ok = True
        except OSError:
            ok = False
        if _agree(ok, group):
            theirs: list[_Segment | None] = [None] * self.world
            try:
                for r in self.peers:
                    theirs[r] = _Segment(self.folder / f"r{r}-{cap}.seg", cap, create=False)
                ok = True
            except OSError:
                ok = False
            if _agree(ok, group):
                theirs[self.rank] = self._own[cap]
                self._theirs[cap] = theirs
                self._own[cap].path.unlink(missing_ok=True)  # every rank has it mapped: the name can go
                self._remove_folder(group)
                return cap
            for seg in theirs:
                if seg is not None and seg is not self._own.get(cap):
                    seg.close()
        own = self._own.pop(cap, None)
        if own is not None:
            own.close()
            own.path.unlink(missing_ok=True)
        self._refused.add(cap)
        self._remove_folder(group)  # every rank refused at this same point: a collective, as above
        return None

    def _remove_folder(self, group: Any) -> None:
        """Once every rank removed its names: rank 0 removes the folder, the others wait for it (so no rank makes
        a file in it meanwhile; the next capacity's files make it again)."""
        _agree(True, group)
        if self.rank == 0:
            try:
                self.folder.rmdir()
            except OSError:
                pass
        _agree(True, group)

    # ------------------------------------------------------------------ a collective
    def start(self, tensors: list[Tensor], cap: int, weight: float | None = None) -> ShmWork:
        """Post this rank's `tensors` (one floating dtype, `cap` from `ready_for`) for the next collective;
        weight: a weighted mean (each rank's tensors times its weight, divided by the weights' sum), None: a sum."""
        if self._closed:
            raise RuntimeError("shared-memory all-reduce: used after close()")
        if self._broken is not None:  # a peer was lost: its slot may still be unread, so nothing is posted again
            raise self._broken
        if self._inflight is not None:  # read before the next post lets a peer reuse its slot
            try:
                self._inflight.wait()
            except RuntimeError:  # its own error (a total weight <= 0), raised when it is waited for ...
                if self._broken is not None:  # ... unless a peer was lost: then nothing more is posted
                    raise
        self.seq += 1
        seq, slot = self.seq, self.seq & 1
        own = self._own[cap]
        dtype = tensors[0].dtype
        numel = sum(t.numel() for t in tensors)
        flat = own.view(slot, dtype, numel)
        if numel and len(tensors) > 1 and len({t.device for t in tensors}) == 1:
            parts = [t.detach().reshape(-1) for t in tensors]
            if tensors[0].device.type == "cpu":
                torch.cat(parts, out=flat)
            else:  # one GPU (gloo groups of ranks sharing it): joined there by one kernel, brought over in one copy
                flat.copy_(torch.cat(parts))  # (a copy to pageable memory waits for the GPU: once, not per tensor)
        elif numel:  # one tensor, or tensors on several devices: copied one by one
            pos = 0
            for t in tensors:
                n = t.numel()
                flat[pos:pos + n].copy_(t.detach().reshape(-1))
                pos += n
        own.floats[1 + slot] = 1.0 if weight is None else float(weight)
        # the post travels through each peer's FIFO, not as a word in memory: the pipe's lock orders this rank's
        # writes above before the peer's reads of them on any CPU (x86's stores are ordered anyway, ARM's are not)
        message = _POST.pack(self.rank, seq)
        for r, fd in self._wake.items():
            deadline = time.monotonic() + self.timeout_s
            while True:
                try:
                    os.write(fd, message)  # 16 bytes, atomic (< PIPE_BUF): posts never interleave
                    break
                except BlockingIOError:  # a full FIFO (never with at most two collectives unread): wait for room
                    if time.monotonic() > deadline:
                        raise self._fail(f"peer rank {r} did not read its posts within {self.timeout_s:g} s") from None
                    waiter = select.poll()
                    waiter.register(fd, select.POLLOUT)
                    waiter.poll(CHECK_S * 1000)
        work = ShmWork(self, seq, cap, dtype, numel, None if weight is None else [t.numel() for t in tensors])
        self._inflight = work
        return work

    def _read_posts(self) -> None:
        """Note the posts waiting in this rank's FIFO (each peer's newest collective), without blocking."""
        seen = self._seen
        while True:
            try:
                data = os.read(self._fifo, 4096)  # whole posts: the FIFO holds whole 16-byte posts, 4096 = 256 of them
            except BlockingIOError:
                return
            for rank, seq in _POST.iter_unpack(data):
                if seq > seen[rank]:
                    seen[rank] = seq
            if len(data) < 4096:
                return

    def _posted(self, seq: int) -> bool:
        self._read_posts()
        seen = self._seen
        return all(seen[r] >= seq for r in self.peers)

    def _fail(self, why: str) -> RuntimeError:
        """The error of a lost or silent peer, kept: every later collective of this rank fails with it."""
        self._broken = RuntimeError(f"shared-memory all-reduce: {why}")
        return self._broken

    def _wait(self, seq: int) -> None:
        if self._closed:
            raise RuntimeError("shared-memory all-reduce: used after close()")
        deadline = time.monotonic() + self.timeout_s
        while not self._posted(seq):
            if self._waiter.poll(CHECK_S * 1000):  # poll, not select: any fd number
                continue
            late = [r for r in self.peers if self._seen[r] < seq]
            gone = [r for r in late if not _held_fd(self._locks[r])]
            if gone:
                raise self._fail(f"peer rank {gone[0]} ended while rank {self.rank} waited for it (collective {seq})")
            if time.monotonic() > deadline:
                raise self._fail(f"peer rank {late[0]} did not post collective {seq} within {self.timeout_s:g} s")

    def _sum(self, seq: int, cap: int, dtype: torch.dtype, numel: int, sizes: list[int] | None) -> Tensor:
        slot = seq & 1
        views = [seg.view(slot, dtype, numel) for seg in self._theirs[cap]]  # type: ignore[union-attr]
        if sizes is None:  # a sum: ((t_0 + t_1) + t_2) + ...
            out = views[0].clone()
            for view in views[1:]:
                out += view
            return out
        # reduce_all's arithmetic, tensor by tensor (16-bit floats round a kernel's vector tail differently, so
        # one flat op would not give its bits): w_0 t_0, then + w_i t_i (one fused add each), then / sum_i w_i
        weights = [float(seg.floats[1 + slot]) for seg in self._theirs[cap]]  # type: ignore[union-attr]
        total = float(sum(weights))
        if total <= 0:
            raise RuntimeError("weighted_mean all-reduce with total weight <= 0")
        parts = [list(torch.split(view, sizes)) for view in views]
        acc = torch._foreach_mul(parts[0], weights[0])
        for part, w in zip(parts[1:], weights[1:], strict=True):
            torch._foreach_add_(acc, part, alpha=w)
        torch._foreach_div_(acc, total)
        return torch.cat(acc) if acc else views[0].clone()

    # ------------------------------------------------------------------ the end
    def close(self) -> None:
        """Unmap and remove this rank's files (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for segs in self._theirs.values():
            for r, seg in enumerate(segs):
                if seg is not None and r != self.rank:
                    seg.close()
        for seg in self._own.values():
            seg.close()
            seg.path.unlink(missing_ok=True)
        self._own.clear()
        self._theirs.clear()
        for fd in [*self._wake.values(), *self._locks.values(), self._fifo]:
            if fd is not None:
                os.close(fd)
        self._wake.clear()
        self._locks.clear()
        self._fifo = None
        (self.folder / f"r{self.rank}.fifo").unlink(missing_ok=True)
        if self._lock_fd is not None:
            (self.folder / f"r{self.rank}.lock").unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = None
        try:
            self.folder.rmdir()  # the last rank out removes the folder
        except OSError:
            pass


def _agree(ok: bool, group: Any) -> bool:
    """Whether every rank of `group` says ok (an all-reduce of the flags: every rank gets the same answer)."""
    flag = torch.tensor([1 if ok else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag[0])
