"""Comparison tables: one markdown row per run summary."""

from __future__ import annotations

from collections.abc import Mapping

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
    from edgestream.runner.report import engine_time_s, target_text  # here: the runner package imports this one

    if key == "time_to_target_s":
        return target_text(summary)
    if key == "time_s":
        t = engine_time_s(summary)  # also a summary written before the common schema (virtual_time_s, run_time_s)
        return "-" if t is None else _fmt(t)
    return _fmt(summary.get(key))


def markdown_table(summaries: Mapping[str, dict], baseline: str | None = None) -> str:
    """Markdown table of summaries; with a baseline, a speedup column (baseline time / time)."""
    head = ["run"] + [h for _, h in COLUMNS] + (["speedup vs " + baseline] if baseline else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base_t = summaries.get(baseline, {}).get("time_to_target_s") if baseline else None
    for name, s in summaries.items():
        row = [name] + [_cell(s, k) for k, _ in COLUMNS]
        if baseline:
            t = s.get("time_to_target_s")
            row.append(f"{base_t / t:.2f}x" if base_t and t else "n/a")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
