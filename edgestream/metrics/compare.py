"""Comparison tables: one markdown row per run summary."""

from __future__ import annotations

from collections.abc import Mapping

#: (summary key, header); time_to_target_s shows whether and when the run reached its target (runner.report)
COLUMNS = [("time_to_target_s", "target"), ("final_accuracy", "final acc"),
           ("buffer_max_samples", "buffer max"), ("dropped_total", "dropped"),
           ("floats_sent_total", "floats sent"), ("cnc_ratio", "CNC"), ("steps", "steps"), ("wall_s", "wall (s)")]


def _fmt(v) -> str:
    if v is None:
        return "not reached"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
    if isinstance(v, int) and v >= 100_000:
        return f"{v:.3e}"
    return str(v)


def markdown_table(summaries: Mapping[str, dict], baseline: str | None = None) -> str:
    """Markdown table of summaries; with a baseline, a speedup column (baseline time / time)."""
    from edgestream.runner.report import target_text  # here: the runner package imports this one

    head = ["run"] + [h for _, h in COLUMNS] + (["speedup vs " + baseline] if baseline else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base_t = summaries.get(baseline, {}).get("time_to_target_s") if baseline else None
    for name, s in summaries.items():
        row = [name] + [target_text(s) if k == "time_to_target_s" else _fmt(s.get(k)) for k, _ in COLUMNS]
        if baseline:
            t = s.get("time_to_target_s")
            row.append(f"{base_t / t:.2f}x" if base_t and t else "n/a")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
