"""A local run's children: one trainer per device, the parameter server of a PS-family run (restarted from its
checkpoint when it dies, a bounded number of times), and the producer, started with the trainers and held until
every trainer is ready. Each is forked from the run's fork server (launch/procs.py) with torchrun's environment
and its output in the run directory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgestream import settings
from edgestream.launch.procs import SECRET_ENV, SECRET_FD_ENV, Child, ChildSet, describe_status
from edgestream.producers.status import printed_summary
from edgestream.runner.rundir import is_ready

#: made in ranks/ once every trainer is ready: the producer, started with them, streams from then on
GO_FILE = "streams.go"
#: the producer's running counts (edgestream.producers.status): summary.json's fallback if it is killed
PRODUCER_STATUS = "producer.status.json"
#: seconds children get to exit after SIGTERM before SIGKILL
GRACE_S = settings.launch_grace_s()
#: the producer's own flush timeout at a stop (--flush-timeout): shorter than the time it gets, so it always
#: prints its summary (what the broker did not acknowledge by then is counted as unacknowledged)
PRODUCER_FLUSH_S = max(1.0, min(15.0, GRACE_S - 5.0))
#: times the orchestrator restarts a parameter server that died before the run ended
PS_RESTARTS = settings.ps_restarts()


def cli_cmd(*args: str) -> list[str]:
    """The edgestream command line for a child, with this interpreter."""
    return [sys.executable or "python3", "-m", "edgestream.cli", *args]


class RunChildren:
    """The children of run directory `path` (world `world` trainers); `set` is their ChildSet."""

    def __init__(self, path: Path, out: Path, world: int, *, ps_family: bool, resumed: bool,
                 echo: Callable[[str], None]) -> None:
        self.path, self.out, self.world = path, out, world
        self.ps_family, self.resumed, self.echo = ps_family, resumed, echo
        self.set = ChildSet()
        self.trainers: dict[int, Child] = {}
        self.producer: Child | None = None
        self.ps: Child | None = None
        self.ps_restarts = 0
        self.released = False                # the producer may stream: the go file made
        self.go_file = path / "ranks" / GO_FILE
        self._producer_out_at = 0            # where this session's producer began writing producer.out
        self._args: tuple[Path, list[str], dict[str, str]] | None = None

    def start(self, config_file: Path, bootstrap: str, run_id: str, topic_settings_json: str,
              secrets: bytes | None, producer: bool) -> None:
        """The parameter server (PS family: the workers wait for it), the trainers, then the producer (unless
        `producer` is False: external streams, the devices publish themselves)."""
        from edgestream.kafka.broker import free_port
        from edgestream.kafka.topic_settings import TOPIC_SETTINGS_ENV

        common = ["--bootstrap", bootstrap, "--run-id", run_id]
        env = {k: v for k, v in os.environ.items() if k not in (SECRET_ENV, SECRET_FD_ENV)}
        env["PYTHONUNBUFFERED"] = "1"
        env[TOPIC_SETTINGS_ENV] = topic_settings_json  # every child creates topics with the run's settings
        self.set.handover = (SECRET_FD_ENV, secrets) if secrets else None
        self._args = (config_file, common, env)
        for pattern in ("*.ready", "*.phase"):  # a resumed run's previous session
            for stale in (self.path / "ranks").glob(pattern):
                stale.unlink()
        port = free_port({int(bootstrap.rsplit(":", 1)[-1])} if bootstrap.rsplit(":", 1)[-1].isdigit() else None)
        threads = str(max(1, (os.cpu_count() or 1) // self.world))
        if self.ps_family:
            self.start_ps()
        for rank in range(self.world):
            tenv = dict(env, RANK=str(rank), WORLD_SIZE=str(self.world), LOCAL_RANK=str(rank),
                        LOCAL_WORLD_SIZE=str(self.world), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port))
            tenv.setdefault("OMP_NUM_THREADS", threads)
            cmd = cli_cmd("train", str(config_file), *common, "--out", str(self.out),
                          *(["--resume"] if self.resumed else []))
            self.trainers[rank] = self.set.start(f"trainer {rank}", cmd, self.path / "ranks" / f"{rank}.out",
                                                 env=tenv, device=rank)
        if producer:
            self._start_producer()

    def start_ps(self) -> None:
        config_file, common, env = self._args
        self.ps = self.set.start("parameter server", cli_cmd("ps", str(config_file), *common, "--out", str(self.out)),
                                 self.path / "ranks" / "ps.out", env=dict(env, OMP_NUM_THREADS="1"))

    def check_ps(self) -> str | None:
        """A parameter server that died while the workers still train is restarted (it continues from its
        checkpoint and replays the pushes after it), at most PS_RESTARTS times; past them, why the run fails."""
        if self.ps is None:
            return None
        code = self.ps.poll()
        if code is None or code == 0:
            return None
        if self.ps_restarts >= PS_RESTARTS:
            return (f"the parameter server {describe_status(code)} and was restarted {self.ps_restarts} time(s) "
                    f"already ({settings.PS_RESTARTS.name}={PS_RESTARTS})")
        self.ps_restarts += 1
        self.echo(f"the parameter server {describe_status(code)}: restarting it from its checkpoint "
                  f"({self.ps_restarts} of at most {PS_RESTARTS})")
        self.start_ps()
        return None

    def _start_producer(self) -> None:
        """Start the producer with the trainers: it imports, loads its data and connects meanwhile, then waits
        for ranks/GO_FILE (`release_producer`) before its first sample."""
        config_file, common, env = self._args
        status = self.path / PRODUCER_STATUS
        for stale in (status, self.go_file):  # an earlier session's: this producer writes its own
            with contextlib.suppress(OSError):
                stale.unlink()
        out = self.path / "producer.out"
        self._producer_out_at = out.stat().st_size if out.exists() else 0  # this session's lines start here
        self.producer = self.set.start("producer", cli_cmd("produce", str(config_file), *common,
                                                           "--flush-timeout", f"{PRODUCER_FLUSH_S:g}",
                                                           "--status-file", str(status),
                                                           "--start-after", str(self.go_file)),
                                       out, env=env)

    def release_producer(self) -> None:
        """Let the producer stream once every trainer is ready (rendezvous done, consumers open: it wrote
        ranks/<rank>.ready), so the streams begin when training can: the simulator's t = 0. A producer
        streaming from its own start would stream for the trainers' start-up time (seconds of torch
        imports) into a backlog the simulated run never has."""
        if self.released or self.producer is None or not all(is_ready(self.path / "ranks", r)
                                                             for r in range(self.world)):
            return
        self.go_file.touch()
        self.released = True

    def stop_producer(self, grace_s: float, hurry=None) -> tuple[dict | None, list[str]]:
        """SIGTERM the producer (it flushes and prints its summary), SIGKILL after `grace_s`; returns
        (its summary, [its name] if it had to be killed)."""
        if self.producer is None:
            return None, []
        killed = self.set.stop([self.producer], grace_s=grace_s, hurry=hurry)
        if not self.released:  # it never streamed: account() says why
            return None, killed
        return printed_summary(self.producer.out_path, self._producer_out_at), killed

    def poll_trainers(self, died: dict[int, float]) -> dict[int, int | None]:
        """{rank: exit status or None}; `died` gets the time each trainer was first seen exited."""
        codes = {r: c.poll() for r, c in self.trainers.items()}
        for r, code in codes.items():  # a trainer signalled on its own stopped cleanly (143/130): not a failure
            if code in (128 + signal.SIGTERM, 128 + signal.SIGINT) and self.stopped_by_signal(r):
                codes[r] = 0
        now = time.monotonic()
        for r, code in codes.items():
            if code is not None:
                died.setdefault(r, now)
        return codes

    def stopped_by_signal(self, rank: int) -> bool:
        """Whether trainer `rank`'s summary says a signal stopped it at a step boundary (its checkpoint
        written): `edgestream train` then exits 128 + the signal."""
        try:
            summary = json.loads((self.path / "ranks" / f"{rank}.summary.json").read_text())
        except (OSError, ValueError):
            return False
        return bool(summary.get("signal")) and summary.get("stop_reason") == "signal"

    def pids(self, broker_pid: int | None) -> dict[str, Any]:
        """pids.json's content: this orchestrator, the broker it started or found, and every child."""
        return {"orchestrator": os.getpid(), "broker": broker_pid,
                "producer": self.producer.pid if self.producer else None,
                "ps": self.ps.pid if self.ps else None,
                "trainers": {str(r): c.pid for r, c in sorted(self.trainers.items())},
                # the process the children were forked from (edgestream/forkserver.py); null: new processes
                "fork_server": self.set.fork_server.pid if self.set.fork_server is not None else None}
