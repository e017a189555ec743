"""The parameter server's checkpoint file, `checkpoints/ps.pt` (what it holds: ps/server.py's module doc): written
in a background thread so the PS goes on serving while the file is written (a 45 MB model took ~200 ms a write
on the 2-core box, on every serving thread's clock), each write through a temporary file and a rename; read back
with `weights_only=True`, its format and run checked (one line naming the file otherwise)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("edgestream.ps")

CHECKPOINT_FORMAT = 1


class PSError(RuntimeError):
    """A problem a user can fix; one line."""


def ps_checkpoint_path(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints" / "ps.pt"


class PSCheckpointFile:
    """Writes of one checkpoint file, at most one at a time, in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread: threading.Thread | None = None  # a write under way
        self._error: str | None = None

    def write(self, snap: dict[str, Any], *, wait: bool = False) -> None:
        """Write `snap` (a state the caller no longer changes) in the background, or before this returns with
        `wait` (at a stop). A write still under way is waited for first, so files land in order; a background
        write that failed raises PSError at the next write (with `wait`: logged, and this write attempted)."""
        if wait:  # the stop's checkpoint is attempted even after a background write failed
            try:
                self.join()
            except PSError as exc:
                log.error("%s", exc)
            self._write(snap)
            return
        self.join()
        self._thread = threading.Thread(target=self._write, args=(snap, True), daemon=True, name="ps-checkpoint")
        self._thread.start()

    def _write(self, snap: dict[str, Any], background: bool = False) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            torch.save(snap, tmp)
            os.replace(tmp, self.path)
        except Exception as exc:  # noqa: BLE001 - OSError, or torch's RuntimeError on a full disk
            error = f"{self.path}: cannot write the PS checkpoint: {type(exc).__name__}: {exc}"
            if not background:
                raise PSError(error) from None
            self._error = error

    def join(self) -> None:
        """Wait for a write under way; PSError when a background write failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise PSError(error)


def read_ps_checkpoint(path: Path, run_name: str) -> dict[str, Any]:
    """The checkpoint's state, checked: readable (weights only), this format, this run; else PSError."""
    try:
        st = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a damaged file: one line naming it
        raise PSError(f"{path}: not a readable PS checkpoint ({type(exc).__name__}); delete it to start the "
                      "PS from scratch") from None
    if not isinstance(st, dict) or st.get("format") != CHECKPOINT_FORMAT:
        raise PSError(f"{path}: PS checkpoint format {st.get('format') if isinstance(st, dict) else None!r}, "
                      f"this edgestream reads {CHECKPOINT_FORMAT}")
    if st.get("run") != run_name:
        raise PSError(f"{path}: a checkpoint of run {st.get('run')!r}, not {run_name!r}")
    return st
