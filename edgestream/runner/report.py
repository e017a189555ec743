"""How a run reads to a person, from its summary (summary.json) alone: whether and when it reached its target
(`target_text`), the comparison table of runs (`markdown_table`: one row per summary), the few lines a finished or
interrupted run ends with on the terminal (`end_lines`; the JSON stays in summary.json), and the plain progress
line of a run whose output is not a terminal (`progress_line`). Used by `edgestream run` (every engine),
`compare` and the demo: one wording."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from edgestream.runner.stop import reached
from edgestream.runner.summary import PRINTED_KEYS, clock_of, engine_time_s


def target_of(summary: Mapping[str, Any]) -> tuple[str, float] | None:
    """(metric, value) the run aimed at, as summary.json records it (None: no target)."""
    t = summary.get("target")
    if isinstance(t, Mapping) and t.get("metric") and t.get("value") is not None:
        return str(t["metric"]), float(t["value"])
    return None


def final_value(summary: Mapping[str, Any], metric: str) -> float | None:
    """The last evaluation's value of `metric` (final_metrics; final_accuracy for accuracy)."""
    v = (summary.get("final_metrics") or {}).get(metric)
    if v is None and metric == "accuracy":
        v = summary.get("final_accuracy")
    return None if v is None else float(v)


def target_text(summary: Mapping[str, Any]) -> str:
    """"reached at 12.3 s", "not reached (final 0.83 < 0.90)" (rmse: "final 0.41 > 0.20"), or "no target"."""
    t = summary.get("time_to_target_s")
    target = target_of(summary)
    if t is not None:
        return f"reached at {float(t):.1f} s"
    if target is None:
        return "no target"
    metric, value = target
    final = final_value(summary, metric)
    if final is None:
        return f"not reached (no evaluation of {metric})"
    if reached(metric, final, value):  # reached after the last time it was measured to: said as it is
        return f"reached (final {final:.3g})"
    sign = "<" if final < value else ">"
    return f"not reached (final {final:.3g} {sign} {value:.3g})"


def _time_unit(summary: Mapping[str, Any]) -> str:
    return "virtual s" if clock_of(summary) == "virtual" else "s"


def end_lines(summary: Mapping[str, Any], run_dir: Any) -> list[str]:
    """The terminal's summary of a run: its directory, algorithm and engine, why it stopped, steps and time, the
    final metric and the target."""
    target = target_of(summary)
    metric = target[0] if target else ("accuracy" if summary.get("final_accuracy") is not None else None)
    if metric is None and summary.get("final_metrics"):
        metric = next(iter(summary["final_metrics"]))
    final = final_value(summary, metric) if metric else None
    t = engine_time_s(summary)
    reason = summary.get("stop_reason") or "unknown"
    if summary.get("interrupted"):
        reason = f"interrupted ({summary.get('interrupted_by') or 'signal'}); continue or rerun it"
    lines = [f"run {run_dir}",
             f"  {summary.get('algorithm') or '?'} on {summary.get('devices') or '?'} devices, engine "
             f"{summary.get('engine') or '?'}; stopped: {reason}",
             f"  steps {summary.get('steps') or 0}, time {t:.1f} {_time_unit(summary)}" if t is not None
             else f"  steps {summary.get('steps') or 0}",
             f"  final {metric} {final:.4g}" if final is not None else "  no evaluation",
             f"  target {target[0]} {target[1]:g}: {target_text(summary)}" if target else "  no target"]
    return lines


def print_end(summary: Mapping[str, Any], run_dir: Any, as_json: bool = False) -> None:
    """The end of `edgestream run` on stdout, the same for every engine: the short human summary (`end_lines`),
    or with `as_json` one JSON line of the summary's PRINTED_KEYS (runner.summary; summary.json holds them all)."""
    if as_json:
        print(json.dumps({k: summary.get(k) for k in PRINTED_KEYS}), flush=True)
        return
    print("\n".join(end_lines(summary, run_dir)), flush=True)


def progress_line(label: str, time_s: float, total_s: float | None, steps: int, metric: str,
                  value: float | None, clock: str = "virtual", note: str = "") -> str:
    """One plain progress line, e.g. `tiny-ddl-20261122-211530-3fa2: virtual 12.0/60 s, steps 340, accuracy
    0.812`; `note` follows (`stream_note`: the prequential figure and the drifts)."""
    total = f"/{total_s:g}" if total_s else ""
    shown = f"{value:.3f}" if value is not None else "-"
    return f"{label}: {clock} {time_s:.1f}{total} s, steps {steps}, {metric} {shown}" + (f", {note}" if note else "")


def drift_line(rec: dict) -> str:
    """The line a drift detection is said in: `drift on device 2 at sample 1216 (seq 1215, step 18): adwin
    width=704 mean_new=0.448 ...`."""
    where = "all devices" if rec.get("device") is None else f"device {rec['device']}"
    at = f" at sample {rec['samples']}" if rec.get("samples") is not None else ""
    seq = f"seq {rec['seq']}, " if rec.get("seq") is not None else ""
    stat = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in (rec.get("statistic") or {}).items())
    return f"drift on {where}{at} ({seq}step {rec.get('step')}): {rec.get('detector')} {stat}".rstrip()


def stream_note(window: dict[str, float], metric: str, drifts: int | None) -> str:
    """`prequential <metric> 0.812 (window), drifts 2`: what a progress or status line says of stream learning
    (window: the all-devices window figures, edgestream.metrics.prequential.LivePool; drifts: detections so far,
    None without detectors); "" when the run has neither."""
    parts = []
    if metric in window:
        parts.append(f"prequential {metric} {window[metric]:.3f} (window)")
    if drifts is not None:
        parts.append(f"drifts {drifts}")
    return ", ".join(parts)


# ---------------------------------------------------------------- comparison tables

#: (summary key, header), common keys of summary.json only (edgestream.runner.summary), so runs of every engine
#: fill every column; time_to_target_s shows whether and when the run reached its target (runner.report), time_s
#: how long it ran at its engine's clock (virtual seconds for sim and lockstep, wall seconds for local)
COLUMNS = [("time_to_target_s", "target"), ("engine", "engine"), ("time_s", "time (s)"),
           ("final_accuracy", "final acc"), ("buffer_max_samples", "buffer max"), ("dropped_total", "dropped"),
           ("floats_sent_total", "floats sent"), ("cnc_ratio", "CNC"), ("steps", "steps"), ("wall_s", "wall (s)")]


def _fmt(v) -> str:
    if v is None:
        return "not reached"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
    if isinstance(v, int) and v >= 100_000:
        return f"{v:.3e}"
    return str(v)


def _cell(summary: dict, key: str) -> str:
    if key == "time_to_target_s":
        return target_text(summary)
    if key == "time_s":
        t = engine_time_s(summary)  # also a summary written before the common schema (virtual_time_s, run_time_s)
        return "-" if t is None else _fmt(t)
    return _fmt(summary.get(key))


def _prequential_cells(summary: dict) -> list[str]:
    """The prequential columns of a run: its task's primary metric over the last window and since the start (all
    devices), and its drift detections ("-" where the run has none of it)."""
    pq = summary.get("prequential") or {}
    window, cum = pq.get("window") or {}, pq.get("cumulative") or {}
    metric = next((m for m in ("accuracy", "rmse") if m in window), None)
    drift = summary.get("drift")
    return [_fmt(window.get(metric)) if metric else "-", _fmt(cum.get(metric)) if metric else "-",
            str(drift.get("detections", 0) + drift.get("all_devices", 0)) if drift else "-"]


def markdown_table(summaries: Mapping[str, dict], baseline: str | None = None) -> str:
    """Markdown table of summaries; with a baseline, a speedup column (baseline time / time). Runs with prequential
    evaluation add its columns (`_prequential_cells`)."""
    preq = any(s.get("prequential") for s in summaries.values())
    head = (["run"] + [h for _, h in COLUMNS] + (["preq window", "preq cumulative", "drifts"] if preq else [])
            + (["speedup vs " + baseline] if baseline else []))
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base_t = summaries.get(baseline, {}).get("time_to_target_s") if baseline else None
    for name, s in summaries.items():
        row = [name] + [_cell(s, k) for k, _ in COLUMNS] + (_prequential_cells(s) if preq else [])
        if baseline:
            t = s.get("time_to_target_s")
            row.append(f"{base_t / t:.2f}x" if base_t and t else "n/a")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
