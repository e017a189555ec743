"""The run directory, the same for every engine (DESIGN.md "Run directory"), written by this one module.

`<out>/<name>-<algorithm>-<run id>/`: config.yaml (resolved; secrets masked, see ExperimentConfig.to_yaml),
events.jsonl, summary.json (one schema for every engine: edgestream.runner.summary), a plot of the
task's primary metric vs engine time (accuracy.png; rmse.png for regression) and buffer.png (buffer
samples, max over devices, vs step; log scale).

* `write_run` writes it for an engine that runs inside this process (the simulator, the lockstep engine): it
  opens the events, builds and runs the engine, and adds the engine's time and own figures to the summary.
* A real run's trainers write `ranks/<rank>.jsonl` (+ .log, .summary.json); `write_local_rundir`
  merges them into the same files (the orchestrator at every stop), `collect_rundir` does it for
  trainers that ran without the orchestrator (compose testbed, torchrun across machines).
* `finish` writes summary.json (`runner.summary.build_summary`: the same keys for every engine) and the plots
  from an `EventLog`, for all of them.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from edgestream.metrics.events import EventLog, read_events
from edgestream.runid import new_run_id
from edgestream.runner.summary import build_summary


class RunDir:
    """Create and fill one run's directory."""

    def __init__(self, out: str | Path, run: str) -> None:
        self.path = Path(out) / run
        self.path.mkdir(parents=True, exist_ok=True)
        self.events_path = self.path / "events.jsonl"
        self.summary_path = self.path / "summary.json"

    def write_config(self, yaml_text: str) -> None:
        (self.path / "config.yaml").write_text(yaml_text)

    def write_summary(self, summary: dict) -> None:
        self.summary_path.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")

    def read_summary(self) -> dict:
        return json.loads(self.summary_path.read_text())


class InProcessEngine(Protocol):
    """What `write_run` needs of an engine object: run to the end (writing step and eval lines to the
    EventLog it was built with), then its summary figures: `time_s` (how long the run lasted at its clock,
    runner.summary) and stop_reason, then its own keys (runner.summary's rule)."""

    def run(self) -> Any: ...

    def extra_summary(self, wall_s: float) -> dict[str, Any]: ...


def buffer_series(events: Iterable[dict]) -> list[tuple[int, float]]:
    """(step, max buffer_samples over devices) from step lines, in step order."""
    per_step: dict[int, float] = {}
    for e in events:
        if e.get("kind") == "step" and e.get("buffer_samples") is not None and e.get("step") is not None:
            s = int(e["step"])
            per_step[s] = max(per_step.get(s, 0.0), float(e["buffer_samples"]))
    return sorted(per_step.items())


def finish(path: Path, plan: Any, log: EventLog, records: Iterable[dict], *, engine: str, run: str, wall_s: float,
           clock: str, time_s: float, **extra: Any) -> dict:
    """Write summary.json (the one schema of runner.summary: the EventLog's aggregates, the run's clock and
    time_s, then the engine's own keys `extra`) and the two plots; returns the summary."""
    from edgestream.metrics.plots import accuracy_plot, buffer_plot  # matplotlib: at the end of a run only
    from edgestream.metrics.tensorboard import log_mlflow, write_tensorboard

    task = plan.task
    records = list(records)
    if plan.prequential is not None:  # pooled over the devices' counters (edgestream.metrics.prequential)
        from edgestream.metrics.prequential import summary_of

        extra["prequential"], drift = summary_of(task, records, plan.prequential[1] is not None,
                                                 detecting=getattr(plan.cfg, "drift", None) is not None)
        if drift is not None:
            extra["drift"] = drift
    aggregates = log.summary(target=plan.target, wall_s=wall_s, engine=engine)
    summary = build_summary(aggregates, plan=plan, run=run, engine=engine, clock=clock, time_s=time_s, **extra)
    RunDir(path.parent, path.name).write_summary(summary)
    label = plan.algorithm.name
    metric = task.primary
    xlabel = "virtual time (s)" if clock == "virtual" else "time (s)"
    accuracy_plot({label: log.series(metric)}, path / f"{metric}.png", title=run, xlabel=xlabel,
                  ylabel=f"test {metric}")
    buffer_plot({label: buffer_series(records)}, path / "buffer.png", title=run)
    rates = plan.rate_model
    write_tensorboard(path, records, label=f"{label}@{engine}",  # `tensorboard --logdir runs/`
                      rate_of=lambda device, t: rates.rate(device, max(0.0, t)))
    log_mlflow(path, records, summary)  # only where mlflow is installed and MLFLOW_TRACKING_URI is set
    return summary


def write_run(plan: Any, engine: str, build: Callable[[EventLog], InProcessEngine], *, out: str | Path | None = None,
              run_id: str | None = None, clock: str = "virtual") -> tuple[Path, dict]:
    """The run directory of an in-process engine (see module doc): build(events) makes the engine,
    which then runs; summary.json gets `engine`, `run`, `clock`, the wall time and the engine's extra_summary
    (called with the engine's own run wall time; its `time_s` is the run's time on `clock`)."""
    cfg = plan.cfg
    run = plan.run_name(run_id or new_run_id())
    parent = Path(out if out is not None else cfg.runtime.out)
    existed = (parent / run).exists()
    rd = RunDir(parent, run)
    rd.write_config(cfg.to_yaml())
    t_start = time.perf_counter()
    events = EventLog(rd.events_path)
    try:
        eng = build(events)
    except BaseException:  # the config cannot run here (e.g. more devices than samples): leave no debris
        events.close()
        if not existed:
            shutil.rmtree(rd.path, ignore_errors=True)
        raise
    interrupted: KeyboardInterrupt | None = None
    t_run = time.perf_counter()
    try:
        with sigterm_interrupts():
            eng.run()
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the summary of what the run reached, then re-raised
        interrupted = exc
    finally:
        group = getattr(eng, "group", None)  # an in-process engine's workers (runner.group.WorkerGroup)
        if group is not None:
            group.write_unfinished()
        events.close()
    run_wall = time.perf_counter() - t_run
    try:
        extra = eng.extra_summary(run_wall)
    except Exception:  # noqa: BLE001 - an engine stopped mid-step may not say everything; the events do
        if interrupted is None:
            raise
        extra = {}
    records = read_events(rd.events_path)
    time_s = extra.pop("time_s", None)
    if time_s is None:  # the latest event's time (an engine stopped mid-step)
        time_s = max((float(r["time"]) for r in records if isinstance(r.get("time"), (int, float))), default=0.0)
    if interrupted is not None:
        extra.update(stop_reason="interrupted", interrupted=True, interrupted_by=_signal_name(interrupted))
    summary = finish(rd.path, plan, events, records, engine=engine, run=run, wall_s=time.perf_counter() - t_start,
                     clock=clock, time_s=time_s, **extra)
    if interrupted is not None:
        raise RunInterrupted(rd.path, summary, getattr(interrupted, "signum", signal.SIGINT)) from interrupted
    return rd.path, summary


class Terminated(KeyboardInterrupt):
    """SIGTERM during an in-process run, raised in the main thread as Ctrl-C's KeyboardInterrupt is."""

    signum = signal.SIGTERM


class RunInterrupted(KeyboardInterrupt):
    """An in-process run stopped by SIGINT or SIGTERM after its run directory was written: summary.json says
    `interrupted: true`, stop_reason "interrupted" and what the run reached. `path`, `summary`, `signum`."""

    def __init__(self, path: Path, summary: dict, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.path, self.summary, self.signum = path, summary, int(signum)


def _signal_name(exc: BaseException) -> str:
    return signal.Signals(getattr(exc, "signum", signal.SIGINT)).name


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside: SIGTERM raises `Terminated` (a KeyboardInterrupt) in the main thread, so a run stopped by
    `kill` writes its summary as one stopped by Ctrl-C does. Elsewhere (another thread, or a handler the
    program set itself) nothing changes."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        yield
        return

    def _raise(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------- a real run's rank files

RANK_FILE = re.compile(r"^(\d+)\.jsonl$")
#: the parameter server's file (edgestream.ps.server): its eval lines join events.jsonl
PS_FILE = "ps.jsonl"


def rank_files(ranks_dir: Path) -> dict[int, Path]:
    """rank -> ranks/<rank>.jsonl, for the files that exist."""
    if not ranks_dir.is_dir():
        return {}
    out = {}
    for p in ranks_dir.iterdir():
        m = RANK_FILE.match(p.name)
        if m:
            out[int(m.group(1))] = p
    return dict(sorted(out.items()))


def write_phase(ranks_dir: Path, rank: int, phase: str | None) -> None:
    """ranks/<rank>.phase: what a starting trainer is doing ("opening the device stream"), read by the
    orchestrator's status line (`starting_phase`); `None` (the trainer is ready) removes it. Best effort: a
    run never fails for its status line."""
    path = ranks_dir / f"{rank}.phase"
    try:
        if phase is None:
            path.unlink(missing_ok=True)
        else:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(phase)
            tmp.replace(path)
    except OSError:
        pass


def is_ready(ranks_dir: Path, rank: int) -> bool:
    """Whether trainer `rank` wrote ranks/<rank>.ready (rendezvous done, device stream open)."""
    return (ranks_dir / f"{rank}.ready").exists()


def starting_phase(ranks_dir: Path, world: int) -> str:
    """What the trainers of a starting run are doing, grouped: "rendezvous x2" or "importing x1, opening
    the device stream x1" (no phase file and not ready yet: its Python is still importing); "waiting for
    the first batch" once every trainer is ready."""
    count: dict[str, int] = {}
    for rank in range(world):
        if is_ready(ranks_dir, rank):
            continue
        try:
            phase = (ranks_dir / f"{rank}.phase").read_text().strip() or "importing"
        except OSError:
            phase = "importing"
        count[phase] = count.get(phase, 0) + 1
    return ", ".join(f"{p} x{n}" for p, n in count.items()) if count else "waiting for the first batch"


def parse_line(line: bytes) -> dict | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


SESSIONS = "sessions.json"


def read_sessions(ranks_dir: Path) -> dict[int, list[int]]:
    """rank -> byte offsets in ranks/<rank>.jsonl where each later session (a resume) began."""
    try:
        raw = json.loads((ranks_dir / SESSIONS).read_text())
        return {int(r): [int(o) for o in offs] for r, offs in raw.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def record_session(ranks_dir: Path, world: int) -> dict[int, int]:
    """Before a resumed session starts: note where each rank file ends (the new session's lines follow),
    in ranks/sessions.json; returns rank -> that offset."""
    sessions = read_sessions(ranks_dir)
    now = {}
    for rank in range(world):
        p = ranks_dir / f"{rank}.jsonl"
        now[rank] = p.stat().st_size if p.exists() else 0
        if now[rank] > 0:
            sessions.setdefault(rank, []).append(now[rank])
    tmp = ranks_dir / (SESSIONS + ".tmp")
    tmp.write_text(json.dumps({str(r): offs for r, offs in sorted(sessions.items())}) + "\n")
    tmp.replace(ranks_dir / SESSIONS)
    return now


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _rolled_back(r: dict, first_step: int | None, first_time: float | None) -> bool:
    """Whether an earlier session's record falls after the checkpoint a later session resumed from."""
    after_step = first_step is not None and _is_int(r.get("step")) and r["step"] >= first_step
    if r.get("kind") == "eval":
        t = r.get("time")
        return after_step or (first_time is not None and isinstance(t, (int, float)) and t >= first_time)
    return after_step


def rank_events(path: Path, starts: list[int] | None = None) -> list[dict]:
    """One rank file's records in file order, sessions stitched together: a resumed trainer restarts
    from its last checkpoint (its step count and time continue from there), so the lines an earlier
    session wrote after that checkpoint were rolled back. `starts`: byte offsets where later sessions
    begin (ranks/sessions.json); each drops the earlier lines with a step >= its first step, and
    earlier eval lines at or after its first time."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    bounds = [0, *sorted(o for o in (starts or []) if 0 < o < len(data)), len(data)]
    out: list[dict] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        chunk = [r for r in (parse_line(ln) for ln in data[a:b].split(b"\n") if ln.strip()) if r is not None]
        if out and chunk:
            first_step = min((r["step"] for r in chunk if r.get("kind", "step") == "step" and _is_int(r.get("step"))),
                             default=None)
            first_time = min((float(r["time"]) for r in chunk if isinstance(r.get("time"), (int, float))),
                             default=None)
            out = [r for r in out if not _rolled_back(r, first_step, first_time)]
        out += chunk
    return out


def merged_events(ranks_dir: Path) -> list[dict]:
    """Every rank's records (sessions stitched, see rank_events) and the parameter server's eval lines,
    sorted by time (ties: step lines before eval lines, then by rank and file order)."""
    sessions = read_sessions(ranks_dir)
    items = []
    for rank, path in rank_files(ranks_dir).items():
        for i, rec in enumerate(rank_events(path, sessions.get(rank))):
            items.append(((float(rec.get("time") or 0.0), rec.get("kind") == "eval", rank, i), rec))
    for i, rec in enumerate(rank_events(ranks_dir / PS_FILE)):  # a PS run is scored at the PS
        if rec.get("kind") == "eval":
            items.append(((float(rec.get("time") or 0.0), True, -1, i), rec))
    items.sort(key=lambda x: x[0])
    return [rec for _, rec in items]


def read_rank_summaries(ranks_dir: Path) -> dict[int, dict]:
    """rank -> ranks/<rank>.summary.json (written by a trainer at a normal exit), for those present."""
    out = {}
    for p in sorted(ranks_dir.glob("*.summary.json")) if ranks_dir.is_dir() else []:
        try:
            out[int(p.name.split(".")[0])] = json.loads(p.read_text())
        except (ValueError, OSError):
            continue
    return dict(sorted(out.items()))


def steps_reached(records: Iterable[dict]) -> dict[int, int]:
    """device -> the steps it reached by its step lines (the last one's step + 1: the lines count from
    step 0), for a rank that ended without its summary (a failed or killed trainer)."""
    out: dict[int, int] = {}
    for r in records:
        if r.get("kind", "step") == "step" and _is_int(r.get("device")) and _is_int(r.get("step")):
            out[r["device"]] = max(out.get(r["device"], 0), r["step"] + 1)
    return out


def write_local_rundir(path: Path, plan: Any, run: str, *, wall_s: float, stop_reason: str,
                       extra: dict[str, Any] | None = None) -> dict:
    """Merge ranks/*.jsonl into events.jsonl, then write summary.json and the plots; returns the summary.
    `device_steps`: each rank's steps, by its summary or by its step lines (`steps_reached`), whichever
    went further: a rank that failed or was killed wrote no summary, or only an earlier session's."""
    records = merged_events(path / "ranks")
    if getattr(plan.cfg, "drift", None) is not None:  # the all-devices detector over the merged step lines
        from edgestream.runner.watch import with_group_detections

        records = with_group_detections(plan, records)
    log = EventLog(path / "events.jsonl")
    try:
        for rec in records:
            if rec.get("kind") == "eval":
                log.evaluation(rec.get("time") or 0.0, rec.get("step"),
                               **{k: v for k, v in rec.items() if k not in ("kind", "time", "step")})
            elif rec.get("kind", "step") == "step":
                log.step(**{k: v for k, v in rec.items() if k != "kind"})
            else:  # e.g. a trainer's "wait" for Kafka: kept, not counted as a step
                log.record(rec["kind"], **{k: v for k, v in rec.items() if k != "kind"})
    finally:
        log.close()
    ranks = read_rank_summaries(path / "ranks")
    times = [float(r["time"]) for r in records if isinstance(r.get("time"), (int, float))]
    run_time = round(max(times), 6) if times else 0.0
    reached = steps_reached(records)
    # time_s: the trainers' time (wall seconds since the run started); run_time_s: the same, this engine's
    # own key from before the common schema (runner.summary), kept for the tools that read it
    return finish(path, plan, log, records, engine="local", run=run, wall_s=wall_s, clock="wall", time_s=run_time,
                  stop_reason=stop_reason, run_time_s=run_time,
                  device_steps={str(r): max(int((ranks.get(r) or {}).get("steps") or 0), reached.get(r, 0))
                                for r in sorted(set(range(plan.world)) | set(ranks))},
                  rank_stop_reasons={str(r): s.get("stop_reason") for r, s in ranks.items()}, **(extra or {}))


def collect_rundir(path: Path, plan: Any) -> dict:
    """The run directory of trainers that ran without the orchestrator (the docker-compose testbed, torchrun
    across machines): from ranks/*, write config.yaml (secrets masked) if missing, events.jsonl,
    summary.json and the plots, as `edgestream run --engine local` does at its stop. The stop reason is
    rank 0's; wall_s the longest rank's. Returns the summary."""
    path = Path(path)
    ranks_dir = path / "ranks"
    if not ranks_dir.is_dir() or not rank_files(ranks_dir):
        raise FileNotFoundError(f"{path}: no ranks/<rank>.jsonl to collect (is it a run directory?)")
    if not (path / "config.yaml").exists():
        (path / "config.yaml").write_text(plan.cfg.to_yaml())
    ranks = read_rank_summaries(ranks_dir)
    reason = (ranks.get(0) or {}).get("stop_reason") or ("incomplete" if len(ranks) < plan.world else "unknown")
    wall = max((float(s.get("wall_s") or 0.0) for s in ranks.values()), default=0.0)
    missing = [r for r in range(plan.world) if r not in ranks]
    extra: dict[str, Any] = {"collected": True, "ranks_without_summary": missing}
    ps = ranks_dir / "ps.summary.json"
    if ps.is_file():  # a parameter-server run: the PS's figures, and its stop reason when it stopped the run
        try:
            extra["ps"] = json.loads(ps.read_text())
        except (ValueError, OSError):
            extra["ps"] = None
        if reason in ("finished", "unknown") and extra["ps"] and extra["ps"].get("stop_reason"):
            reason = extra["ps"]["stop_reason"]
    return write_local_rundir(path, plan, path.name, wall_s=wall, stop_reason=reason, extra=extra)
