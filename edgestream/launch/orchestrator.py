"""`run_local`: one real run on this machine — broker, topics, the producer and one trainer per device
as child processes, a live view, a clean stop, and the same run directory the simulator writes.

Life of a run (`<out>/<name>-<algorithm>-<run id>/`):
1. the broker: `bootstrap` (or runtime.bootstrap), else the managed local broker (started here and
   stopped at the end when it was not already running); it must answer, else one line naming the
   address (LaunchError, exit 1);
2. the run's topics (`prepare_run_topics`: kafka.topics resolved, or create: false checked; topics.json),
   config.yaml (secrets shown as ***);
3. the children, each the leader of its own process group, stdout+stderr to a file in the run dir:
   `edgestream produce` (producer.out) and `edgestream train` for rank i = device i (ranks/<i>.out)
   with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, a free
   MASTER_PORT); their pids in pids.json;
4. the live view, fed by tailing ranks/*.jsonl;
5. the stop: all trainers exit 0 (the stop condition; then the producer gets SIGTERM and prints its
   summary), a child dies (every other child is stopped; LaunchError names the device and the tail of
   its log), or SIGINT/SIGTERM reaches the orchestrator (forwarded as SIGTERM to every child group,
   SIGKILL after a grace period). No child outlives `run_local` in any case (see procs.py).
6. events.jsonl (the rank files merged by time), summary.json (`engine: local`), accuracy.png,
   buffer.png — written at every stop, so a failed or interrupted run can be inspected and resumed.

`resume=RUN_DIR` continues a run: same run id, the producer continues each stream where its topic
ends, the trainers get `--resume` (checkpoint and committed offsets), the rank files grow on.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgestream import settings
from edgestream.kafka.lifecycle import cleanup_after_run
from edgestream.kafka.topic_settings import TOPIC_SETTINGS_ENV
from edgestream.launch.claim import LOCK_FILE, RunClaim
from edgestream.launch.errors import LaunchError
from edgestream.launch.procs import SECRET_ENV, SECRET_FD_ENV, Child, ChildSet, describe_status, tail_lines
from edgestream.launch.resume import check_resume_checkpoints, resume_target
from edgestream.launch.run_topics import create_run_topics, record_topics
from edgestream.launch.tail import JsonlTail, RanksTail
from edgestream.launch.view import LiveState, View
from edgestream.producers.status import account, printed_summary
from edgestream.runid import check_run_id, new_run_id
from edgestream.runner.engines import check_runs
from edgestream.runner.plan import RunPlan
from edgestream.runner.rundir import PS_FILE, is_ready, record_session, starting_phase, write_local_rundir
from edgestream.trainer.gpus import check_local

#: seconds the other trainers get to finish after the first one stopped at the agreed stop condition
STRAGGLER_S = settings.launch_straggler_s()
#: seconds children get to exit after SIGTERM before SIGKILL
GRACE_S = settings.launch_grace_s()
#: seconds the producer gets to flush and print its summary after SIGTERM
PRODUCER_STOP_S = 40.0
#: the producer's own flush timeout at a stop (--flush-timeout): shorter than the time it gets, so it always
#: prints its summary (what the broker did not acknowledge by then is counted as unacknowledged)
PRODUCER_FLUSH_S = max(1.0, min(15.0, GRACE_S - 5.0))
#: made in ranks/ once every trainer is ready: the producer, started with them, streams from then on
GO_FILE = "streams.go"
#: the producer's running counts (edgestream.producers.status): summary.json's fallback if it is killed
PRODUCER_STATUS = "producer.status.json"
#: broker reachability attempts (wait_for_broker backoff 0.5, 1 s: about 8 s before giving up)
BROKER_ATTEMPTS = 3
#: where an orchestrator of an earlier version left the revealed config (removed when found)
SECRET_FILE = ".child-config.yaml"
#: times the orchestrator restarts a parameter server that died before the run ended
PS_RESTARTS = settings.ps_restarts()


def _python() -> str:
    return sys.executable or "python3"


def cli_cmd(*args: str) -> list[str]:
    """The edgestream command line for a child, with this interpreter."""
    return [_python(), "-m", "edgestream.cli", *args]


@dataclass
class _Outcome:
    """How the children's phase ended: 'done', 'failed' (a child died) or 'signal'."""

    kind: str = "running"
    reason: str = ""
    child: Child | None = None
    signum: int | None = None
    stopped: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)   # children still alive GRACE_S after SIGTERM
    stop_s: float | None = None                        # seconds from SIGTERM to the last child gone
    hint: str = ""                                     # how to go on (a Kafka outage: launch/outage.py)


class _Signals:
    """SIGINT/SIGTERM set a flag (the main loop acts on it); restored at exit. Only in the main thread."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on)
        return self

    def _on(self, signum, frame) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _secret_masked(cfg: Any) -> list[str]:
    from edgestream.config import SECRET_MASK, is_secret_key

    return [k for k, v in cfg.runtime.kafka_client.items() if is_secret_key(k) and v == SECRET_MASK]


class LocalRun:
    """One local run; `run()` returns (run directory, summary) or raises LaunchError."""

    def __init__(self, cfg: Any, *, out: str | Path | None = None, run_id: str | None = None,
                 bootstrap: str | None = None, resume: str | Path | None = None, progress: bool = True,
                 echo: Callable[[str], None] | None = None, broker_dir: str | Path | None = None) -> None:
        if _secret_masked(cfg):
            raise LaunchError(f"runtime.kafka_client {', '.join(_secret_masked(cfg))}: the value is *** (a config.yaml "
                              "from a run directory shows secrets masked); give the original config file", 2)
        self.cfg = cfg
        self.plan = RunPlan.resolve(cfg)
        check_runs("local", self.plan.algorithm)
        problem = check_local(self.plan.world, cfg.runtime.gpus, collectives=self.plan.algorithm.family != "ps")
        if problem:  # GPUs this host lacks, or an NCCL that cannot work: before anything starts
            raise LaunchError(problem, 2)
        if resume is not None:
            out_dir, run_id = resume_target(Path(resume), self.plan)
            self.resumed = True
        else:
            out_dir = Path(out if out is not None else cfg.runtime.out)
            run_id = check_run_id(run_id) if run_id is not None else new_run_id()
            self.resumed = False
        self.run_id = run_id
        self.run_name = self.plan.run_name(run_id)
        self.out = Path(out_dir).absolute()
        self.path = self.out / self.run_name
        self.bootstrap = bootstrap or cfg.runtime.bootstrap
        self.progress = progress
        self.broker_dir = Path(broker_dir) if broker_dir is not None else None
        self.world = self.plan.world
        self._echo = echo or (lambda m: print(m, file=sys.stderr, flush=True))
        self._console = None
        self.children = ChildSet()
        self.producer: Child | None = None
        self._released = False  # the producer may stream: _go_file made
        self._go_file = self.path / "ranks" / GO_FILE
        self._producer_out_at = 0             # where this session's producer began writing producer.out
        self.trainers: dict[int, Child] = {}
        self.ps: Child | None = None          # the parameter server of a PS-family run
        self.ps_restarts = 0
        self.ps_family = self.plan.algorithm.family == "ps"
        self.broker = None          # the managed LocalBroker when this run started it
        self.broker_pid: int | None = None
        self.claim = RunClaim(self.path, self.run_name)  # held while this LocalRun runs (launch/claim.py)
        self._secrets: bytes | None = None    # runtime.kafka_client's secret values, for the children's pipe
        self._hold = None                     # this run's mark on the broker (launch/hold.py)
        self._disk_trouble: str | None = None  # a write of the run directory the disk refused
        self.topic_settings = None            # the run's kafka.topics resolved (kafka/topic_settings.py)

    # ------------------------------------------------------------ helpers
    def echo(self, msg: str) -> None:
        if self._console is not None:
            self._console.print(msg, markup=False, highlight=False, soft_wrap=True)
        else:
            self._echo(msg)

    def _check_fresh(self) -> None:
        if self.resumed:  # another live orchestrator of this run was refused by the claim
            check_resume_checkpoints(self.path, self.plan, self.run_name, self.echo)
            return
        if self.path.exists() and any(p.name != LOCK_FILE for p in self.path.iterdir()):
            raise LaunchError(f"run directory {self.path} exists; continue it with --resume {self.path}, or choose "
                              "another --run-id", 2)

    def _write_pids(self) -> None:
        data = {"orchestrator": os.getpid(), "broker": self.broker_pid,
                "producer": self.producer.pid if self.producer else None,
                "ps": self.ps.pid if self.ps else None,
                "trainers": {str(r): c.pid for r, c in sorted(self.trainers.items())},
                # the process the children were forked from (edgestream/forkserver.py); null: started as new processes
                "fork_server": self.children.fork_server.pid if self.children.fork_server is not None else None}
        tmp = self.path / "pids.json.tmp"
        try:
            tmp.write_text(json.dumps(data, indent=2) + "\n")
            tmp.replace(self.path / "pids.json")
        except OSError as exc:  # a full disk: the run goes on; the failure names it
            self._note_disk(tmp, exc)

    def _note_disk(self, path: Path, exc: OSError) -> None:
        if self._disk_trouble is None:
            self._disk_trouble = f"writing {path} failed: {exc.strerror or exc}"

    def _disk_line(self) -> str:
        """'; <out>: no space left on device (...)' when the run's folder is full or a write failed, else ''."""
        full = False
        with contextlib.suppress(OSError):
            st = os.statvfs(self.path if self.path.exists() else self.out)
            full = st.f_bavail * st.f_frsize < 64 * 1024
        if not full and self._disk_trouble is None:
            return ""
        what = "no space left on device" if full else "a write failed"
        return f"; {self.out}: {what}" + (f" ({self._disk_trouble})" if self._disk_trouble else "")

    def _connect(self, signals: _Signals) -> str:
        """The bootstrap address of an answering broker (starting the managed one if none was given)."""
        from edgestream.kafka.admin import KafkaUnavailable, WaitInterrupted, wait_for_broker
        from edgestream.kafka.jars import BrokerError
        from edgestream.kafka.security import KafkaRefused

        if self.bootstrap is None:
            from edgestream.kafka.cluster import managed
            from edgestream.kafka.jars import cache_dir

            broker = managed(self.broker_dir or cache_dir() / "broker", log=self.echo)  # or its cluster
            pid = broker.running_pid()
            if pid is None:
                self.echo(f"no bootstrap given: starting the managed local broker in {broker.data_dir} "
                          "(stopped at the end)")
                try:
                    broker.start()
                except BrokerError as exc:
                    raise LaunchError(f"the managed local broker did not start: {exc}".splitlines()[0], 1) from None
                self.broker, pid = broker, broker.pid
            self.broker_pid = pid
            self.bootstrap = broker.read_state()["bootstrap"]
        try:
            wait_for_broker(self.bootstrap, self.plan.security, attempts=BROKER_ATTEMPTS,
                            should_stop=lambda: signals.signum is not None)
        except KafkaRefused as exc:  # a wrong password, an untrusted certificate: no wait cures it
            raise LaunchError(str(exc), 1) from None
        except KafkaUnavailable:
            raise LaunchError(f"no Kafka broker answered at {self.bootstrap}; check the address (--bootstrap or "
                              "runtime.bootstrap), or leave it unset to use the managed local broker", 1) from None
        except WaitInterrupted:
            raise LaunchError(f"interrupted while waiting for a Kafka broker at {self.bootstrap}",
                              128 + (signals.signum or signal.SIGINT)) from None
        return self.bootstrap

    def _child_config(self) -> Path:
        """config.yaml (secrets masked): the record, and the file the children read. Secret
        runtime.kafka_client values reach neither the disk nor an environment: each child gets them (JSON)
        on an inherited pipe whose descriptor number is in SECRET_FD_ENV (ChildSet.handover), reads and
        closes it at start (`edgestream.launch.command.child_secrets` puts them in place of the masks)."""
        from edgestream.config import is_secret_key

        with contextlib.suppress(OSError):  # left in clear by an earlier version's orchestrator
            (self.path / SECRET_FILE).unlink()
        try:
            (self.path / "config.yaml").write_text(self.cfg.to_yaml())
        except OSError as exc:
            raise LaunchError(f"{self.path / 'config.yaml'}: cannot write the run's config ({exc.strerror}); "
                              f"the out folder is {self.out}", 1) from None
        secrets = {k: v for k, v in self.cfg.runtime.kafka_client.items() if is_secret_key(k)}
        self._secrets = json.dumps(secrets).encode() if secrets else None
        return self.path / "config.yaml"

    def _start_children(self, config_file: Path) -> None:
        from confluent_kafka import KafkaException

        from edgestream.kafka.broker import free_port
        from edgestream.launch.hold import RunHold

        with contextlib.suppress(KafkaException):  # the run's mark on the broker, for its concurrent users
            self._hold = RunHold(self.bootstrap, self.run_name, self.path, self.plan.security)
        common = ["--bootstrap", self.bootstrap, "--run-id", self.run_id]
        env = {k: v for k, v in os.environ.items() if k not in (SECRET_ENV, SECRET_FD_ENV)}
        env["PYTHONUNBUFFERED"] = "1"
        env[TOPIC_SETTINGS_ENV] = self.topic_settings.to_json()  # every child creates topics with the run's
        self.children.handover = (SECRET_FD_ENV, self._secrets) if self._secrets else None
        self._producer_args = (config_file, common, env)
        for pattern in ("*.ready", "*.phase"):  # a resumed run's previous session
            for stale in (self.path / "ranks").glob(pattern):
                stale.unlink()
        port = free_port({int(self.bootstrap.rsplit(":", 1)[-1])} if self.bootstrap.rsplit(":", 1)[-1].isdigit()
                         else None)
        threads = str(max(1, (os.cpu_count() or 1) // self.world))
        if self.ps_family:  # the workers wait for it (hello), so it starts first
            self._start_ps()
        for rank in range(self.world):
            tenv = dict(env, RANK=str(rank), WORLD_SIZE=str(self.world), LOCAL_RANK=str(rank),
                        LOCAL_WORLD_SIZE=str(self.world), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port))
            tenv.setdefault("OMP_NUM_THREADS", threads)
            cmd = cli_cmd("train", str(config_file), *common, "--out", str(self.out),
                          *(["--resume"] if self.resumed else []))
            self.trainers[rank] = self.children.start(f"trainer {rank}", cmd, self.path / "ranks" / f"{rank}.out",
                                                      env=tenv, device=rank)
        if not self.plan.external:  # external streams: the devices publish themselves, no producer
            self._start_producer()
        self._write_pids()

    def _start_ps(self) -> None:
        config_file, common, env = self._producer_args
        self.ps = self.children.start("parameter server", cli_cmd("ps", str(config_file), *common, "--out",
                                                                  str(self.out)),
                                      self.path / "ranks" / "ps.out", env=dict(env, OMP_NUM_THREADS="1"))

    def _check_ps(self) -> _Outcome | None:
        """A parameter server that died while the workers still train is restarted (it continues from its
        checkpoint and replays the pushes after it), at most PS_RESTARTS times."""
        if self.ps is None:
            return None
        code = self.ps.poll()
        if code is None or code == 0:
            return None
        if self.ps_restarts >= PS_RESTARTS:
            return _Outcome("failed", f"the parameter server {describe_status(code)} and was restarted "
                            f"{self.ps_restarts} time(s) already ({settings.PS_RESTARTS.name}={PS_RESTARTS})",
                            child=self.ps)
        self.ps_restarts += 1
        self.echo(f"the parameter server {describe_status(code)}: restarting it from its checkpoint "
                  f"({self.ps_restarts} of at most {PS_RESTARTS})")
        self._start_ps()
        self._write_pids()
        return None

    def _start_producer(self) -> None:
        """Start the producer with the trainers: it imports, loads its data and connects meanwhile, then waits
        for ranks/GO_FILE (`_release_producer`) before its first sample."""
        config_file, common, env = self._producer_args
        status = self.path / PRODUCER_STATUS
        for stale in (status, self._go_file):  # an earlier session's: this producer writes its own
            with contextlib.suppress(OSError):
                stale.unlink()
        out = self.path / "producer.out"
        self._producer_out_at = out.stat().st_size if out.exists() else 0  # this session's lines start here
        self.producer = self.children.start("producer", cli_cmd("produce", str(config_file), *common,
                                                                "--flush-timeout", f"{PRODUCER_FLUSH_S:g}",
                                                                "--status-file", str(status),
                                                                "--start-after", str(self._go_file)),
                                            out, env=env)

    def _release_producer(self) -> None:
        """Let the producer stream once every trainer is ready (rendezvous done, consumers open: it wrote
        ranks/<rank>.ready), so the streams begin when training can: the simulator's t = 0. A producer
        streaming from its own start would stream for the trainers' start-up time (seconds of torch
        imports) into a backlog the simulated run never has."""
        if self._released or self.producer is None or not all(is_ready(self.path / "ranks", r)
                                                              for r in range(self.world)):
            return
        self._go_file.touch()
        self._released = True

    # ------------------------------------------------------------ the children's phase
    def _poll_trainers(self, died: dict[int, float]) -> dict[int, int | None]:
        """{rank: exit status or None}; `died` gets the time each trainer was first seen exited."""
        codes = {r: c.poll() for r, c in self.trainers.items()}
        for r, code in codes.items():  # a trainer signalled on its own stopped cleanly (143/130): not a failure
            if code in (128 + signal.SIGTERM, 128 + signal.SIGINT) and self._stopped_by_signal(r):
                codes[r] = 0
        now = time.monotonic()
        for r, code in codes.items():
            if code is not None:
                died.setdefault(r, now)
        return codes

    def _stopped_by_signal(self, rank: int) -> bool:
        """Whether trainer `rank`'s summary says a signal stopped it at a step boundary (its checkpoint
        written): `edgestream train` then exits 128 + the signal."""
        try:
            summary = json.loads((self.path / "ranks" / f"{rank}.summary.json").read_text())
        except (OSError, ValueError):
            return False
        return bool(summary.get("signal")) and summary.get("stop_reason") == "signal"

    def _watch(self, signals: _Signals, state: LiveState, view: View, tail: RanksTail) -> _Outcome:
        first_done: float | None = None
        died: dict[int, float] = {}
        ps_tail = JsonlTail(self.path / "ranks" / PS_FILE) if self.ps_family else None
        while True:
            self._release_producer()
            state.add(tail.read())
            if ps_tail is not None:
                state.add_ps(ps_tail.read())
            for line in state.pop_warnings():  # a trainer's lag warning (once per growth episode)
                self.echo(line)
            view.update()
            if signals.signum is not None:
                return _Outcome("signal", f"interrupted by {signal.Signals(signals.signum).name}",
                                signum=signals.signum)
            codes = self._poll_trainers(died)
            failed = [r for r, code in codes.items() if code is not None and code != 0]
            if failed:
                # when one trainer dies its peers fail soon after (a collective loses them): let them
                # settle (polling often, to see who went when), then name the first to die; among those
                # seen in the same poll, one killed by a signal, else the lowest rank
                settle = time.monotonic() + 0.5
                while time.monotonic() < settle:
                    time.sleep(0.02)
                    codes = self._poll_trainers(died)
                failed = [r for r, code in codes.items() if code is not None and code != 0]
                failed.sort(key=lambda r: (died[r], codes[r] >= 0, r))
                r = failed[0]
                also = "; ".join(f"device {o} {describe_status(codes[o])}" for o in failed[1:])
                return _Outcome("failed", f"device {r} (trainer rank {r}) {describe_status(codes[r])}"
                                + (f" (also {also})" if also else ""), child=self.trainers[r])
            pcode = self.producer.poll() if self.producer else None
            if all(code == 0 for code in codes.values()):
                return _Outcome("done", "finished")
            ps_failed = self._check_ps()
            if ps_failed is not None:
                return ps_failed
            if pcode is not None:
                return _Outcome("failed", f"the producer exited early ({describe_status(pcode)})", child=self.producer)
            if first_done is None and any(code == 0 for code in codes.values()):
                first_done = time.monotonic()
                state.status = "stopping"
            if first_done is not None and time.monotonic() - first_done > STRAGGLER_S:
                late = min(r for r, code in codes.items() if code is None)
                return _Outcome("failed", f"device {late} (trainer rank {late}) did not stop within {STRAGGLER_S:g} s "
                                f"of the others", child=self.trainers[late])
            if state.status == "starting" and any(d.step is not None for d in state.devices.values()):
                state.status = "training"
            elif state.status == "starting":  # what the trainers are doing meanwhile (ranks/<rank>.phase)
                state.phase = starting_phase(self.path / "ranks", self.world)
            time.sleep(0.1 if self._released else 0.01)  # the streams go the moment every trainer is ready

    def _name_kafka_outage(self, outcome: _Outcome) -> None:
        """When a child ended because Kafka did not answer within runtime.kafka_outage_s (first the one
        that failed first), the run's error line is that child's line, and says how to go on."""
        from edgestream.launch.outage import kafka_failure, resume_hint

        found = kafka_failure([outcome.child, *self.trainers.values(), self.ps, self.producer])
        if found is not None:
            outcome.child, outcome.reason = found
            outcome.hint = resume_hint(self.path, self.world, self.plan.checkpoint_every,
                                       self.plan.checkpoint_every_s)

    def _stop_producer(self, grace_s: float, hurry=None) -> tuple[dict | None, list[str]]:
        """SIGTERM the producer (it flushes and prints its summary), SIGKILL after `grace_s`; returns
        (its summary, [its name] if it had to be killed)."""
        if self.producer is None:
            return None, []
        killed = self.children.stop([self.producer], grace_s=grace_s, hurry=hurry)
        if not self._released:  # it never streamed: account() says why
            return None, killed
        return printed_summary(self.producer.out_path, self._producer_out_at), killed

    # ------------------------------------------------------------ the run
    def run(self) -> tuple[Path, dict]:
        self.claim.take()  # one orchestrator per run, for its whole life (the run directory's lock)
        try:
            return self._run()
        finally:
            if self._hold is not None:
                self._hold.close()
                self._hold = None
            self.claim.release()
            if self.broker is not None:  # the managed broker this run started: after runtime.cleanup
                self.broker.stop()

    def _run(self) -> tuple[Path, dict]:
        t0 = time.monotonic()
        previous_wall = 0.0
        if self.resumed:
            with contextlib.suppress(ValueError, OSError):
                previous_wall = float(json.loads((self.path / "summary.json").read_text()).get("wall_s") or 0.0)
        outcome = _Outcome()
        view: View | None = None
        producer_summary = None
        with _Signals() as signals:
            try:
                # the fork server imports torch while the broker and topics are set up
                self.children.warm((SECRET_ENV, SECRET_FD_ENV))
                self._check_fresh()
                self._connect(signals)
                self.topic_settings = create_run_topics(self.plan, self.bootstrap, self.run_name, self.path,
                                                        self.resumed)
                if self.topic_settings.warning():  # unreplicated on a cluster of several brokers
                    self.echo(self.topic_settings.warning())
                self.path.mkdir(parents=True, exist_ok=True)
                (self.path / "ranks").mkdir(exist_ok=True)
                record_topics(self.path, self.bootstrap, self.run_name, self.topic_settings, self.plan.security)
                offsets = record_session(self.path / "ranks", self.world) if self.resumed else {}
                config_file = self._child_config()
                if signals.signum is not None:
                    raise LaunchError(f"interrupted by {signal.Signals(signals.signum).name} before the run started",
                                      128 + signals.signum)
                self._start_children(config_file)
                state = LiveState(self.run_name + (" (resumed)" if self.resumed else ""), self.world)
                live = self.progress and sys.stderr.isatty()
                if live:
                    from rich.console import Console

                    self._console = Console(stderr=True)
                view = View(state, live=live, echo=self.echo if self.progress else None, console=self._console)
                if not live and self.progress:
                    what = (f"{self.world} trainer(s) started on external streams ({self.cfg.streams.topic})"
                            if self.plan.external else f"producer and {self.world} trainer(s) started")
                    self.echo(f"run {self.run_name}: {what} (pids in {self.path / 'pids.json'}); Kafka at "
                              f"{self.bootstrap}")
                outcome = self._watch(signals, state, view, RanksTail(self.path / "ranks", offsets))
                if outcome.kind == "failed":  # Kafka silent past runtime.kafka_outage_s: named, with how to go on
                    self._name_kafka_outage(outcome)
                state.status = outcome.reason
                t_stop = time.monotonic()
                outcome.stopped = [c.name for c in self.children.running() if c is not outcome.child]
                # the trainers first, while the producer still streams (a trainer waiting for data
                # sees the stop at its next step); then the producer flushes and prints its summary
                first = 1 if outcome.kind == "signal" else 0
                hurry = lambda: signals.count > first  # noqa: E731 - a second Ctrl-C: SIGKILL now
                outcome.killed = self.children.stop(list(self.trainers.values()), grace_s=GRACE_S, hurry=hurry)
                if self.ps is not None:  # it exits by itself once every worker was told to stop
                    deadline = time.monotonic() + (GRACE_S if outcome.kind == "done" else 0.0)
                    while self.ps.poll() is None and time.monotonic() < deadline and not hurry():
                        time.sleep(0.05)
                    outcome.killed += self.children.stop([self.ps], grace_s=GRACE_S, hurry=hurry)
                grace = PRODUCER_STOP_S if outcome.kind == "done" else max(GRACE_S, PRODUCER_FLUSH_S + 5.0)
                producer_summary, killed = self._stop_producer(grace, hurry)
                outcome.killed += killed
                # with the meta and PS topics the children created
                record_topics(self.path, self.bootstrap, self.run_name, self.topic_settings, self.plan.security)
                outcome.stop_s = time.monotonic() - t_stop
            finally:
                if view is not None:
                    view.close()
                self._console = None
                self.children.close()
        return self._finish(outcome, t0, previous_wall, producer_summary)

    def _cleanup(self, finished: bool) -> None:
        """runtime.cleanup: delete-on-success (kafka/lifecycle.py): a finished run's topics and groups go, after
        this orchestrator left its hold group; a run that did not finish keeps them for --resume, said."""
        if self.cfg.runtime.cleanup == "delete-on-success":
            if finished and self._hold is not None:
                self._hold.close()
                self._hold = None
            cleanup_after_run(self.bootstrap, self.run_name, finished, self.plan.security, self.echo)

    def _finish(self, outcome: _Outcome, t0: float, previous_wall: float, producer_summary: dict | None
                ) -> tuple[Path, dict]:
        wall = time.monotonic() - t0
        reason = outcome.reason
        ranks_dir = self.path / "ranks"
        ps_summary = None
        if self.ps_family:
            with contextlib.suppress(ValueError, OSError):
                ps_summary = json.loads((ranks_dir / "ps.summary.json").read_text())
        if outcome.kind == "done":
            with contextlib.suppress(ValueError, OSError):
                reason = json.loads((ranks_dir / "0.summary.json").read_text()).get("stop_reason") or reason
            if ps_summary and ps_summary.get("stop_reason") and reason in ("finished", None):
                reason = ps_summary["stop_reason"]
            if any(self._stopped_by_signal(r) for r in self.trainers):  # a trainer's own SIGTERM/SIGINT stopped
                reason = "signal"  # the group (its peers stopped on its vote): not finished, it resumes
        extra = {"run_dir": str(self.path), "bootstrap": self.bootstrap, "resumed": self.resumed,
                 "session_wall_s": round(wall, 3),
                 "children_stop_s": round(outcome.stop_s, 3) if outcome.stop_s is not None else None,
                 "children_killed": outcome.killed,
                 "producer": ({"source": f"none: external streams ({self.cfg.streams.topic})"} if self.plan.external
                              else account(producer_summary, self.path / PRODUCER_STATUS, started=self._released))}
        if self.ps_family:
            extra["ps"] = {**(ps_summary or {"status": "no summary (the parameter server did not finish)"}),
                           "restarts": self.ps_restarts}
        if outcome.kind == "signal":  # what the run reached stays in the summary, marked (--resume continues it)
            reason = "interrupted"
            extra.update(interrupted=True, interrupted_by=signal.Signals(outcome.signum or signal.SIGINT).name)
        try:
            summary = write_local_rundir(self.path, self.plan, self.run_name, wall_s=previous_wall + wall,
                                         stop_reason=reason, extra=extra)
        except OSError as exc:  # a full or read-only disk: named below, after the run's own outcome
            self._note_disk(Path(exc.filename) if exc.filename else self.path, exc)
            summary = {**extra, "stop_reason": reason}
        disk = self._disk_line()
        # a run its trainers stopped on a signal of their own (stop_reason "signal") did not finish: it resumes
        self._cleanup(outcome.kind == "done" and reason != "signal" and self._disk_trouble is None)
        if outcome.kind == "failed":
            child = outcome.child
            detail = []
            if child is not None:
                logs = [child.out_path]
                if child.device is not None:
                    logs.append(self.path / "ranks" / f"{child.device}.log")
                for p in logs:
                    lines = tail_lines(p, 10)
                    if lines:
                        detail.append(f"last lines of {p}:")
                        detail += ["  " + ln for ln in lines]
                    if not disk and any("no space left on device" in ln.lower() for ln in lines):
                        # the child's failed write freed its partial file again before the folder was looked at
                        disk = f"; {self.out}: no space left on device (the last lines of {p} say so)"
            stopped = f"; stopped {', '.join(outcome.stopped)}" if outcome.stopped else ""
            raise LaunchError(f"{outcome.reason}{disk}{stopped}{outcome.hint}; run directory {self.path}", 1, detail,
                              self.path)
        if outcome.kind == "signal":
            raise LaunchError(f"{outcome.reason}{disk}: stopped every child; run directory {self.path} (continue with "
                              f"--resume {self.path})", 128 + (outcome.signum or signal.SIGINT), run_dir=self.path)
        if self._disk_trouble is not None:
            raise LaunchError(f"the run finished but its run directory is incomplete{disk}; run directory "
                              f"{self.path}", 1, run_dir=self.path)
        return self.path, summary


def run_local(cfg: Any, out: str | Path | None = None, run_id: str | None = None, progress: bool = True,
              base_dir: str | Path | None = None, *, bootstrap: str | None = None, resume: str | Path | None = None,
              echo: Callable[[str], None] | None = None, broker_dir: str | Path | None = None
              ) -> tuple[Path, dict]:
    """Run `cfg` for real on this machine and write its run directory; returns (path, summary).

    Same leading parameters as the simulator's run (`base_dir` is unused: config paths are absolute
    once loaded). LaunchError (one line, `.detail`, `.code`) when the run could not start or finish.
    """
    return LocalRun(cfg, out=out, run_id=run_id, bootstrap=bootstrap, resume=resume, progress=progress,
                    echo=echo, broker_dir=broker_dir).run()
