"""A run's claim: one orchestrator per run directory for its whole life -- an exclusive, non-blocking flock on
`<run dir>/LOCK_FILE` (the holder's pid, host and start inside), taken before anything of the run starts and
given up at its end. A dead holder's lock is free (the kernel drops a flock with its process)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from edgestream.launch.errors import LaunchError

#: the run's claim: an exclusive flock held for the orchestrator's lifetime (pid, host inside)
LOCK_FILE = ".orchestrator.lock"


class RunClaim:
    """The claim on run directory `path` (of run `run_name`): `take()`, then `release()`."""

    def __init__(self, path: Path, run_name: str) -> None:
        self.path = path
        self.run_name = run_name
        self._fd: int | None = None
        self._created: list[Path] = []  # folders the claim created (removed if the run never wrote into them)

    def take(self) -> None:
        """Hold the run until `release`. Held by a live orchestrator (of this host, whichever run directory path
        it was given): LaunchError (exit 2) naming the run and the holder's pid and host."""
        missing = [p for p in (self.path, *self.path.parents) if not p.exists()]
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LaunchError(f"cannot create the run directory {self.path}: {exc.strerror}", 1) from None
        self._created = missing  # deepest first
        lock = self.path / LOCK_FILE
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                self._remove_created()
                raise LaunchError(f"run {self.run_name} is held by {holder} (lock {lock}); wait for it to end or "
                                  "stop it", 2) from None
            try:  # the file we locked may have been removed by a holder that just ended: lock the current one
                same = os.fstat(fd).st_ino == os.stat(lock).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "run": self.run_name,
                           "since": time.strftime("%Y-%m-%dT%H:%M:%S")})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, info.encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same (the holder is then named without its pid)
        self._fd = fd

    def release(self) -> None:
        """Give the claim up: remove the lock file (while still holding it), then unlock; folders the claim
        created are removed when the run never wrote anything."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            (self.path / LOCK_FILE).unlink()
        os.close(self._fd)
        self._fd = None
        self._remove_created()

    def _remove_created(self) -> None:
        for folder in self._created:  # only while empty: nothing of the run was written
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._created = []


def _holder(fd: int) -> str:
    deadline = time.monotonic() + 1.0  # the holder writes its pid just after it took the lock
    while True:
        with contextlib.suppress(OSError, ValueError):
            info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
            if info.get("pid"):
                return f"another orchestrator (pid {info['pid']} on {info.get('host', '?')}, since " \
                       f"{info.get('since', '?')})"
        if time.monotonic() > deadline:
            return "another orchestrator"
        time.sleep(0.02)
