"""The local engine's run directory: the trainers write `ranks/<rank>.jsonl` (+ .log, .summary.json);
the orchestrator merges them into the files every engine writes (DESIGN.md "Run directory"):
events.jsonl (sorted by time), summary.json (`engine: local`), accuracy.png and buffer.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgestream.launch.tail import parse_line as _parse_line
from edgestream.launch.tail import rank_files
from edgestream.metrics import EventLog, accuracy_plot, buffer_plot
from edgestream.runner.run import buffer_series

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
        chunk = [r for r in (_parse_line(ln) for ln in data[a:b].split(b"\n") if ln.strip()) if r is not None]
        if out and chunk:
            first_step = min((r["step"] for r in chunk if r.get("kind", "step") == "step" and _is_int(r.get("step"))),
                             default=None)
            first_time = min((float(r["time"]) for r in chunk if isinstance(r.get("time"), (int, float))),
                             default=None)
            out = [r for r in out if not _rolled_back(r, first_step, first_time)]
        out += chunk
    return out


def merged_events(ranks_dir: Path) -> list[dict]:
    """Every rank's records (sessions stitched, see rank_events), sorted by time (ties: step lines
    before eval lines, then by rank and file order)."""
    sessions = read_sessions(ranks_dir)
    items = []
    for rank, path in rank_files(ranks_dir).items():
        for i, rec in enumerate(rank_events(path, sessions.get(rank))):
            items.append(((float(rec.get("time") or 0.0), rec.get("kind") == "eval", rank, i), rec))
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


def write_local_rundir(path: Path, cfg: Any, run: str, *, wall_s: float, stop_reason: str,
                       extra: dict[str, Any] | None = None) -> dict:
    """Merge ranks/*.jsonl into events.jsonl, then write summary.json and the plots; returns the summary."""
    records = merged_events(path / "ranks")
    log = EventLog(path / "events.jsonl")
    try:
        for rec in records:
            if rec.get("kind") == "eval":
                log.evaluation(rec.get("time") or 0.0, rec.get("step"), rec.get("accuracy"), rec.get("loss"))
            else:
                log.step(**{k: v for k, v in rec.items() if k != "kind"})
    finally:
        log.close()
    ranks = read_rank_summaries(path / "ranks")
    times = [float(r["time"]) for r in records if isinstance(r.get("time"), (int, float))]
    summary = log.summary(target_accuracy=cfg.stop.target_accuracy, wall_s=wall_s, engine="local", run=run,
                          algorithm=cfg.algorithm.name, devices=cfg.devices.count, stop_reason=stop_reason,
                          run_time_s=round(max(times), 6) if times else 0.0,
                          device_steps={str(r): s.get("steps") for r, s in ranks.items()},
                          rank_stop_reasons={str(r): s.get("stop_reason") for r, s in ranks.items()},
                          **(extra or {}))
    (path / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    label = cfg.algorithm.name
    accuracy_plot({label: log.evals}, path / "accuracy.png", title=run, xlabel="time (s)")
    buffer_plot({label: buffer_series(records)}, path / "buffer.png", title=run)
    return summary


def collect_rundir(path: Path, cfg: Any) -> dict:
    """The run directory of trainers that ran without the orchestrator (the docker-compose testbed, torchrun
    across machines): from ranks/*, write config.yaml (secrets masked) if missing, events.jsonl,
    summary.json and the plots, as `edgestream run --engine local` does at its stop. The stop reason is
    rank 0's; wall_s the longest rank's. Returns the summary."""
    path = Path(path)
    ranks_dir = path / "ranks"
    if not ranks_dir.is_dir() or not rank_files(ranks_dir):
        raise FileNotFoundError(f"{path}: no ranks/<rank>.jsonl to collect (is it a run directory?)")
    if not (path / "config.yaml").exists():
        (path / "config.yaml").write_text(cfg.to_yaml())
    ranks = read_rank_summaries(ranks_dir)
    reason = (ranks.get(0) or {}).get("stop_reason") or ("incomplete" if len(ranks) < cfg.devices.count else "unknown")
    wall = max((float(s.get("wall_s") or 0.0) for s in ranks.values()), default=0.0)
    missing = [r for r in range(cfg.devices.count) if r not in ranks]
    return write_local_rundir(path, cfg, path.name, wall_s=wall, stop_reason=reason,
                              extra={"collected": True, "ranks_without_summary": missing})
