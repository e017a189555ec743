"""The local engine's run directory: the trainers write `ranks/<rank>.jsonl` (+ .log, .summary.json);
the orchestrator merges them into the files every engine writes (DESIGN.md "Run directory"):
events.jsonl (sorted by time), summary.json (`engine: local`), accuracy.png and buffer.png."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from edgestream.launch.tail import rank_files, read_rank_file
from edgestream.metrics import EventLog, accuracy_plot, buffer_plot


def rank_events(path: Path) -> list[dict]:
    """One rank file's records in file order, with times made monotonic across restarts: a resumed
    trainer counts its time from its own start again, so a record whose time falls below the last
    one's is shifted by the time the earlier sessions reached (each session starts where the last ended)."""
    out, offset, last = [], 0.0, 0.0
    for rec in read_rank_file(path):
        t = rec.get("time")
        if isinstance(t, (int, float)):
            if t + offset < last - 1e-9:
                offset = last
            rec["time"] = round(float(t) + offset, 6)
            last = rec["time"]
        out.append(rec)
    return out


def merged_events(ranks_dir: Path) -> list[dict]:
    """Every rank's records, sorted by time (ties: step lines before eval lines, then by device)."""
    items = []
    for rank, path in rank_files(ranks_dir).items():
        for i, rec in enumerate(rank_events(path)):
            items.append(((float(rec.get("time") or 0.0), rec.get("kind") == "eval", rank, i), rec))
    items.sort(key=lambda x: x[0])
    return [rec for _, rec in items]


def buffer_series(events: Iterable[dict]) -> list[tuple[int, float]]:
    """(step, max buffer_samples over devices) from step lines, in step order."""
    per_step: dict[int, float] = {}
    for e in events:
        if e.get("kind", "step") == "step" and e.get("buffer_samples") is not None and e.get("step") is not None:
            s = int(e["step"])
            per_step[s] = max(per_step.get(s, 0.0), float(e["buffer_samples"]))
    return sorted(per_step.items())


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
