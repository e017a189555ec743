"""Child processes of a local run: each in its own process group, its output in a log file, and
stopped as a group (SIGTERM, then SIGKILL) so that no process outlives the orchestrator.

Three layers keep orphans away:
- every child is the leader of a new session/process group (`start_new_session`), so a terminal's
  Ctrl-C reaches only the orchestrator, which decides how to stop them, and `killpg` reaches whatever
  a child started in turn;
- `ChildSet.stop` (called from the orchestrator's `finally`) and an `atexit` hook kill every group
  still alive;
- on Linux each child asks the kernel for SIGKILL when the orchestrator dies (PR_SET_PDEATHSIG), which
  covers the one case no handler can: the orchestrator itself killed with SIGKILL.

The edgestream children (trainers, parameter server, producer) are forked from the run's fork server
(edgestream/forkserver.py: torch imported once, not once per child), which keeps all of the above: a forked
child leads its own session, and dies with the server, which dies with the orchestrator.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edgestream import settings
from edgestream.forkserver import (
    ForkedProc,
    ForkServer,
    ForkServerError,
    die_with_parent_preexec,
    take_prestarted,
)

#: the environment variable naming a file descriptor that holds runtime.kafka_client's secret values (a
#: JSON object): the orchestrator hands them to each child on an inherited pipe (`ChildSet.handover`),
#: which the child reads to its end and closes at start (edgestream.launch.command.child_secrets), so
#: they are never on disk nor in any environment
SECRET_FD_ENV = settings.KAFKA_SECRETS_FD.name
#: the values themselves in the environment (how earlier versions handed them over): still read, with a
#: warning, since a process's environment stays readable in /proc/<pid>/environ for its whole life
SECRET_ENV = settings.KAFKA_SECRETS.name


@dataclass
class Child:
    """One child process: `name` ("producer", "trainer 1"), the device it trains (None: not a
    trainer), its Popen and the file its stdout and stderr go to."""

    name: str
    device: int | None
    proc: subprocess.Popen | ForkedProc
    out_path: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def group_alive(self) -> bool:
        """Whether any process of this child's group still exists (the child, or what it started)."""
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


def describe_status(code: int) -> str:
    """'exit status 3' or 'killed by SIGKILL' for a Popen return code."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def filled_pipe(data: bytes) -> int:
    """The read end of a new pipe that already holds `data` (its write end closed, so a reader gets
    `data` and then end of file): nothing waits for the reader, and nothing is left anywhere once the
    read end is closed in every process. The pipe grows to fit `data` where the kernel allows (Linux);
    ValueError when it cannot hold it."""
    r, w = os.pipe()
    try:
        if len(data) > 4096 and hasattr(fcntl, "F_SETPIPE_SZ"):
            with contextlib.suppress(OSError):
                fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, len(data))
        os.set_blocking(w, False)
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(w, view):]
            except BlockingIOError:
                raise ValueError(f"{len(data)} bytes do not fit in a pipe") from None
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return r


class ChildSet:
    """The children of one run, started and stopped together.

    `handover`: (VAR, data) that every child started from then on gets on an inherited pipe
    (`filled_pipe`), the pipe's file descriptor number in its environment variable VAR: how the run's
    secrets reach the children without being on disk or in an environment (a process's environment
    stays readable in /proc/<pid>/environ for its whole life); a restarted child gets a new pipe.

    `warm()` starts a fork server (edgestream/forkserver.py) that imports torch and the other heavy libraries
    once while the run sets up; from then on each `python -m edgestream.cli ...` child is forked from it
    (other commands, and every command when the server cannot start, are started as new processes)."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self.handover: tuple[str, bytes] | None = None
        self.fork_server: ForkServer | None = None
        ref = weakref.ref(self)
        self._atexit = lambda: (lambda s: s.kill_all() if s is not None else None)(ref())
        atexit.register(self._atexit)

    def warm(self, secret_env: Sequence[str] = ()) -> None:
        """Start the fork server now (its imports run while the caller goes on), without the variables
        `secret_env` in its environment; idempotent."""
        if self.fork_server is None:
            try:
                self.fork_server = take_prestarted() or ForkServer(drop_env=secret_env)
            except OSError:
                self.fork_server = None

    def _fork(self, cmd: Sequence[str], out, env: dict, cwd, fds: tuple[int, ...]) -> ForkedProc | None:
        """`cmd` forked from the fork server when it is `python -m MODULE ...` of this interpreter and the
        server is up; None otherwise (then it is started as a new process)."""
        if self.fork_server is None or len(cmd) < 3 or list(cmd[:2]) != [sys.executable, "-m"]:
            return None
        handover = (self.handover[0], fds[0]) if fds and self.handover is not None else None
        if handover is not None:
            env = {k: v for k, v in env.items() if k != handover[0]}
        try:
            return self.fork_server.spawn(cmd[2], list(cmd[3:]), out.fileno(), env, cwd, handover)
        except ForkServerError:
            self.fork_server.close()
            self.fork_server = None
            return None

    def start(self, name: str, cmd: Sequence[str], out_path: Path, env: Mapping[str, str] | None = None,
              device: int | None = None, cwd: str | Path | None = None) -> Child:
        """Start `cmd` as the leader of a new process group, stdout and stderr appended to `out_path`
        (and the `handover`, if any, on a pipe)."""
        out_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(env if env is not None else os.environ)
        fds: tuple[int, ...] = ()
        if self.handover is not None:
            var, data = self.handover
            fds = (filled_pipe(data),)
            env[var] = str(fds[0])
        try:
            with open(out_path, "ab") as out:
                proc = self._fork(cmd, out, env, cwd, fds)
                if proc is None:
                    proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True,
                                            preexec_fn=die_with_parent_preexec(), pass_fds=fds)
        finally:
            for fd in fds:  # the child holds its own copy now
                os.close(fd)
        child = Child(name, device, proc, out_path)
        self.children.append(child)
        return child

    def running(self) -> list[Child]:
        return [c for c in self.children if c.poll() is None]

    def stop(self, children: Sequence[Child] | None = None, grace_s: float = 10.0,
             hurry: Callable[[], bool] | None = None) -> list[str]:
        """SIGTERM each child's group, wait up to `grace_s` for them to exit (or until `hurry()`, e.g. a
        second Ctrl-C), then SIGKILL the groups still alive (stragglers and grandchildren alike) and
        reap. Returns the names of the children that had to be killed."""
        todo = list(self.children if children is None else children)
        for c in todo:
            if c.poll() is None:
                c.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while (time.monotonic() < deadline and any(c.poll() is None for c in todo)
               and not (hurry is not None and hurry())):
            time.sleep(0.05)
        killed = [c.name for c in todo if c.poll() is None]
        self.kill_all(todo)
        return killed

    def kill_all(self, children: Sequence[Child] | None = None) -> None:
        """SIGKILL every group still alive and reap the children (no zombie, no orphan)."""
        for c in (self.children if children is None else children):
            c.signal_group(signal.SIGKILL)
            if c.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.proc.wait(timeout=10)

    def close(self) -> None:
        """Kill what is left, end the fork server and drop the atexit hook."""
        self.kill_all()
        if self.fork_server is not None:
            self.fork_server.close()
            self.fork_server = None
        atexit.unregister(self._atexit)


def tail_lines(path: Path, n: int = 10, max_bytes: int = 64 * 1024) -> list[str]:
    """The last `n` non-empty lines of a text file (reads at most `max_bytes` from its end)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    lines = [ln.rstrip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-n:]
