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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgestream.kafka.lifecycle import cleanup_after_run
from edgestream.launch.claim import LOCK_FILE, RunClaim
from edgestream.launch.errors import LaunchError
from edgestream.launch.procs import SECRET_ENV, SECRET_FD_ENV, tail_lines
from edgestream.launch.resume import check_resume_checkpoints, resume_target
from edgestream.launch.run_children import GRACE_S, PRODUCER_FLUSH_S, PRODUCER_STATUS, RunChildren
from edgestream.launch.run_topics import create_run_topics, record_topics
from edgestream.launch.tail import RanksTail
from edgestream.launch.view import LiveState, View
from edgestream.launch.watch import Outcome, Signals, watch
from edgestream.producers.status import account
from edgestream.runid import check_run_id, new_run_id
from edgestream.runner.engines import check_runs
from edgestream.runner.plan import RunPlan
from edgestream.runner.rundir import record_session, write_local_rundir
from edgestream.trainer.gpus import check_local

#: seconds the producer gets to flush and print its summary after SIGTERM
PRODUCER_STOP_S = 40.0
#: broker reachability attempts (wait_for_broker backoff 0.5, 1 s: about 8 s before giving up)
BROKER_ATTEMPTS = 3
#: where an orchestrator of an earlier version left the revealed config (removed when found)
SECRET_FILE = ".child-config.yaml"


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
        self.ps_family = self.plan.algorithm.family == "ps"
        self.kids = RunChildren(self.path, self.out, self.world, ps_family=self.ps_family, resumed=self.resumed,
                                echo=self.echo)  # the producer, the trainers, the PS (launch/run_children.py)
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
        data = self.kids.pids(self.broker_pid)
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

    def _connect(self, signals: Signals) -> str:
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

    def _take_hold(self) -> None:
        """The run's mark on the broker, for its concurrent users (launch/hold.py); best effort."""
        from confluent_kafka import KafkaException

        from edgestream.launch.hold import RunHold

        with contextlib.suppress(KafkaException):
            self._hold = RunHold(self.bootstrap, self.run_name, self.path, self.plan.security)

    def _name_kafka_outage(self, outcome: Outcome) -> None:
        """When a child ended because Kafka did not answer within runtime.kafka_outage_s (first the one
        that failed first), the run's error line is that child's line, and says how to go on."""
        from edgestream.launch.outage import kafka_failure, resume_hint

        found = kafka_failure([outcome.child, *self.kids.trainers.values(), self.kids.ps, self.kids.producer])
        if found is not None:
            outcome.child, outcome.reason = found
            outcome.hint = resume_hint(self.path, self.world, self.plan.checkpoint_every,
                                       self.plan.checkpoint_every_s)

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
        outcome = Outcome()
        view: View | None = None
        producer_summary = None
        with Signals() as signals:
            try:
                # the fork server imports torch while the broker and topics are set up
                self.kids.set.warm((SECRET_ENV, SECRET_FD_ENV))
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
                self._take_hold()
                self.kids.start(config_file, self.bootstrap, self.run_id, self.topic_settings.to_json(), self._secrets,
                                producer=not self.plan.external)  # external streams: the devices publish themselves
                self._write_pids()
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
                outcome = watch(self.kids, signals, state, view, RanksTail(self.path / "ranks", offsets), self.echo,
                                on_restart=self._write_pids)
                if outcome.kind == "failed":  # Kafka silent past runtime.kafka_outage_s: named, with how to go on
                    self._name_kafka_outage(outcome)
                state.status = outcome.reason
                t_stop = time.monotonic()
                outcome.stopped = [c.name for c in self.kids.set.running() if c is not outcome.child]
                # the trainers first, while the producer still streams (a trainer waiting for data
                # sees the stop at its next step); then the producer flushes and prints its summary
                first = 1 if outcome.kind == "signal" else 0
                hurry = lambda: signals.count > first  # noqa: E731 - a second Ctrl-C: SIGKILL now
                outcome.killed = self.kids.set.stop(list(self.kids.trainers.values()), grace_s=GRACE_S, hurry=hurry)
                ps = self.kids.ps
                if ps is not None:  # it exits by itself once every worker was told to stop
                    deadline = time.monotonic() + (GRACE_S if outcome.kind == "done" else 0.0)
                    while ps.poll() is None and time.monotonic() < deadline and not hurry():
                        time.sleep(0.05)
                    outcome.killed += self.kids.set.stop([ps], grace_s=GRACE_S, hurry=hurry)
                grace = PRODUCER_STOP_S if outcome.kind == "done" else max(GRACE_S, PRODUCER_FLUSH_S + 5.0)
                producer_summary, killed = self.kids.stop_producer(grace, hurry)
                outcome.killed += killed
                # with the meta and PS topics the children created
                record_topics(self.path, self.bootstrap, self.run_name, self.topic_settings, self.plan.security)
                outcome.stop_s = time.monotonic() - t_stop
            finally:
                if view is not None:
                    view.close()
                self._console = None
                self.kids.set.close()
        return self._finish(outcome, t0, previous_wall, producer_summary)

    def _cleanup(self, finished: bool) -> None:
        """runtime.cleanup: delete-on-success (kafka/lifecycle.py): a finished run's topics and groups go, after
        this orchestrator left its hold group; a run that did not finish keeps them for --resume, said."""
        if self.cfg.runtime.cleanup == "delete-on-success":
            if finished and self._hold is not None:
                self._hold.close()
                self._hold = None
            cleanup_after_run(self.bootstrap, self.run_name, finished, self.plan.security, self.echo)

    def _finish(self, outcome: Outcome, t0: float, previous_wall: float, producer_summary: dict | None
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
            if any(self.kids.stopped_by_signal(r) for r in self.kids.trainers):
                # a trainer's own SIGTERM/SIGINT stopped the group (its peers stopped on its vote): not
                # finished, it resumes
                reason = "signal"
        extra = {"run_dir": str(self.path), "bootstrap": self.bootstrap, "resumed": self.resumed,
                 "session_wall_s": round(wall, 3),
                 "children_stop_s": round(outcome.stop_s, 3) if outcome.stop_s is not None else None,
                 "children_killed": outcome.killed,
                 "producer": ({"source": f"none: external streams ({self.cfg.streams.topic})"} if self.plan.external
                              else account(producer_summary, self.path / PRODUCER_STATUS, started=self.kids.released))}
        if self.ps_family:
            extra["ps"] = {**(ps_summary or {"status": "no summary (the parameter server did not finish)"}),
                           "restarts": self.kids.ps_restarts}
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
