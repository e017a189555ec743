"""A fork server for a local run's children: one process imports torch and the other heavy libraries
once, then forks each `python -m MODULE ...` child (`edgestream train` / `ps` / `produce`: `python -m
edgestream.cli ...`) from that warm state, so a trainer
reaches its first step without paying ~4 s of CPU for its imports (on a 2-core machine two trainers
and a producer importing at once cost most of a run's start-up).

The server (`python -m edgestream.forkserver`) is started by the orchestrator at the start of a
run, so its imports overlap the broker and topic set-up. Requests travel on a private socketpair
(SOCK_SEQPACKET, one JSON message each; the child's output file and the secrets pipe as passed file
descriptors, SCM_RIGHTS), never on disk or the network. A forked child is what `subprocess.Popen`
would have made: the leader of a new session, stdout and stderr on the log file, stdin on /dev/null,
exactly the environment and working directory asked for, SIGKILL when its parent (the server) dies,
and the server dies with the orchestrator, so no child outlives it. The server reaps each child and
reports its exit status (`os.waitstatus_to_exitcode`: negative for a signal, as Popen's returncode).

Of edgestream's own modules only the CLI and the config schema are preloaded (none of their modules
reads a setting at import); the rest are imported by each child once its environment is in place
(some read EDGESTREAM_* settings at import)."""

from __future__ import annotations

import contextlib
import ctypes
import io
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

#: imported once by the server, shared copy-on-write by every child (CPU, no CUDA initialised); of edgestream
#: only the CLI, the config schema (edgestream.config.load: the sections and their loading) and the optimizer
#: (edgestream.models.sgd: torch.optim.SGD less torch._dynamo, which no child imports unless it compiles), none
#: of whose modules reads a setting at import (tests/unit/test_forkserver.py)
PRELOAD = ("numpy", "torch", "torch.distributed", "torch.optim", "confluent_kafka", "pydantic", "typer", "yaml",
           "rich", "edgestream.cli", "edgestream.config.load", "edgestream.models.sgd")
_MAX_MSG = 1 << 20
_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1
READY_S = 60.0  # longer than a cold torch import on a loaded machine; after it, children are started as before


def _load_prctl():
    """libc's prctl, resolved in the parent (never dlopen between fork and exec); None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def _prctl(option: int, value) -> None:
    if _PRCTL is not None:
        _PRCTL(option, value, 0, 0, 0)


def _die_with_parent(parent: int) -> None:  # runs in the child between fork and exec
    """Ask for SIGKILL when the parent dies (Linux); exit at once if it already has."""
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def die_with_parent_preexec():
    """A `preexec_fn` for Popen: the child is SIGKILLed when this process dies (None off Linux)."""
    parent = os.getpid()
    return (lambda: _die_with_parent(parent)) if _PRCTL is not None else None


# --- the server ---------------------------------------------------------------------------------------------


def _child(req: dict, fds: list[int], sock: socket.socket, wake_r: int, wake_w: int) -> None:
    """In the forked child: become what Popen would have started, then run the edgestream CLI; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        os.close(wake_r)
        os.close(wake_w)
        server = os.getppid()
        os.setsid()
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != server:  # the server died before prctl took effect
            os._exit(1)
        out = fds[0]
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        for fd in (null, out):
            if fd > 2:
                os.close(fd)
        env = dict(req["env"])
        handover = req.get("handover_var")
        if handover:
            env[handover] = str(fds[1])  # the secrets pipe, at the number this process holds it
        os.environ.clear()
        os.environ.update(env)
        os.chdir(req["cwd"])
        # the path a new `python -m` would have: its working directory first, then PYTHONPATH
        sys.path[0] = os.getcwd()
        sys.path[1:1] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        module, args = req["module"], list(req["args"])
        _prctl(_PR_SET_NAME, f"es-{args[0] if module == 'edgestream.cli' and args else module}"[-15:].encode())
        threads = env.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:  # read by torch at its import
            sys.modules["torch"].set_num_threads(int(threads))
        if "numpy" in sys.modules:  # a new interpreter seeds numpy's global generator from the OS
            sys.modules["numpy"].random.seed()
        if env.get("PYTHONUNBUFFERED"):  # as a new interpreter would: every write reaches the file at once
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True,
                                          errors="backslashreplace")
        sys.argv = [module, *args]  # runpy puts the module's file first, as `python -m MODULE ARGS` does
        try:
            preloaded = sys.modules.get(module)
            if preloaded is not None and callable(getattr(preloaded, "main", None)):
                # what its `if __name__ == "__main__": main()` does, without running the module a second time
                sys.argv[0] = preloaded.__file__
                preloaded.main()
            else:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:  # as an interpreter ends on an unhandled SIGINT: killed by it
        with contextlib.suppress(BaseException):
            sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(sock: socket.socket) -> None:
    """Preload, say ready, then fork a child per request and report each one's exit status until the
    orchestrator closes its end."""
    for name in PRELOAD:
        with contextlib.suppress(Exception):
            __import__(name)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sock.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [], 1.0)
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        while True:  # reap: one status line per child
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            sock.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
        if sock not in ready:
            continue
        msg, fds, _, _ = socket.recv_fds(sock, _MAX_MSG, 4)
        if not msg:  # the orchestrator is gone or done: its children are signalled by it, not us
            return
        req = json.loads(msg)
        try:
            pid = os.fork()
        except OSError as exc:
            sock.send(json.dumps({"id": req["id"], "error": str(exc)}).encode())
            pid = -1
        if pid == 0:
            _child(req, fds, sock, wake_r, wake_w)
        for fd in fds:
            os.close(fd)
        if pid > 0:
            sock.send(json.dumps({"id": req["id"], "pid": pid}).encode())


def main() -> None:
    fd = int(sys.argv[1])
    sock = socket.socket(fileno=fd)
    serve(sock)


# --- the orchestrator's side --------------------------------------------------------------------------------


class ForkServerError(RuntimeError):
    """The fork server is not there (it failed to start, or died): start the child as a new process."""


class ForkedProc:
    """A child forked by the server, with what the orchestrator uses of a Popen: pid, poll(), wait()."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self._server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            self._server.wait_change(0.05)
        return self.returncode


class ForkServer:
    """The orchestrator's handle on its fork server: `ForkServer()` starts it (its imports run in the
    background), `spawn` forks a child from it, `close` ends it."""

    def __init__(self, drop_env: Sequence[str] = ()) -> None:
        """`drop_env`: variables left out of the server's environment (a forked child's /proc/<pid>/environ
        shows the server's environment as it was at its start; its own is what `spawn` was given). The
        server is SIGKILLed when this process dies."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if k not in drop_env}
        try:
            self._proc = subprocess.Popen([sys.executable or "python3", "-m", "edgestream.forkserver",
                                           str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True,
                                          preexec_fn=die_with_parent_preexec(), env=env)
        finally:
            theirs.close()
        self._sock = ours
        self.pid = self._proc.pid
        self._cond = threading.Condition()
        self._ready = False
        self._gone = False
        self._started: dict[int, dict] = {}
        self._exited: dict[int, int] = {}
        self._next = 0
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="fork-server-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while True:
                msg = self._sock.recv(_MAX_MSG)
                if not msg:
                    break
                m = json.loads(msg)
                with self._cond:
                    if "ready" in m:
                        self._ready = True
                    elif "exited" in m:
                        self._exited[m["exited"]] = m["code"]
                    elif "id" in m:
                        self._started[m["id"]] = m
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass
        with self._cond:
            self._gone = True
            self._cond.notify_all()

    def wait_ready(self, timeout: float = READY_S) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._gone, timeout)
            return self._ready and not self._gone

    def wait_change(self, timeout: float) -> None:
        with self._cond:
            self._cond.wait(timeout)

    def status(self, pid: int) -> int | None:
        """The child's exit status once the server reaped it; a child of a server that died is dead too
        (SIGKILL on its parent's death): -SIGKILL once the process is gone."""
        from edgestream.kafka.broker import pid_alive  # the orchestrator's side, where it is loaded already

        with self._cond:
            if pid in self._exited:
                return self._exited[pid]
            gone = self._gone
        if gone and not pid_alive(pid):
            return -int(signal.SIGKILL)
        return None

    def spawn(self, module: str, args: Sequence[str], out_fd: int, env: Mapping[str, str], cwd: str | Path | None,
              handover: tuple[str, int] | None = None) -> ForkedProc:
        """Fork `python -m <module> <args>` with stdout and stderr on `out_fd` and, with `handover` (VAR, fd), the
        file descriptor `fd` inherited and named in VAR. ForkServerError when the server cannot."""
        if not self.wait_ready():
            raise ForkServerError("the fork server did not start")
        with self._cond:
            self._next += 1
            rid = self._next
        req = {"id": rid, "module": module, "args": list(args), "env": dict(env), "cwd": str(cwd or os.getcwd()),
               "handover_var": handover[0] if handover else None}
        fds = [out_fd] + ([handover[1]] if handover else [])
        try:
            with self._send_lock:
                socket.send_fds(self._sock, [json.dumps(req).encode()], fds)
        except OSError as exc:
            raise ForkServerError(f"the fork server is gone ({exc.strerror})") from None
        with self._cond:
            self._cond.wait_for(lambda: rid in self._started or self._gone, READY_S)
            answer = self._started.pop(rid, None)
        if answer is None or "pid" not in answer:
            raise ForkServerError((answer or {}).get("error") or "the fork server did not answer")
        return ForkedProc(self, answer["pid"])

    def close(self) -> None:
        """End the server (its children were stopped by the ChildSet before)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


_PRESTARTED: ForkServer | None = None


def prestart(drop_env: Sequence[str] = ()) -> None:
    """Start this process's fork server before a run is even built (`edgestream run --engine local`: its
    imports overlap the config's loading); the run's ChildSet takes it (`take_prestarted`)."""
    global _PRESTARTED
    if _PRESTARTED is None:
        with contextlib.suppress(OSError):
            _PRESTARTED = ForkServer(drop_env)


def take_prestarted() -> ForkServer | None:
    global _PRESTARTED
    z, _PRESTARTED = _PRESTARTED, None
    return z



if __name__ == "__main__":
    main()
