"""summary.json: one schema for every engine (the simulator, the lockstep engine, a real run), defined here once.

A summary is `SUMMARY_KEYS`, every one present in every engine's summary (null where the run has nothing to
say, e.g. no target), in this order, with the same meaning whichever engine wrote it; then the engine's own
keys. The rule for those: they follow the common ones, never reuse a common key's name, and are read only for
runs of that engine (the simulator's `virtual_time_s`, `sim_wall_s`, `device_steps`, `wall_profile_s`, ...; a
real run's `run_time_s`, `device_steps` by rank, `producer`, `bootstrap`, `resumed`, ...; a parameter-server
run's `ps` block). A tool that reads several engines' runs (compare, the end of `edgestream run`, the Python
API's rows) reads only the common keys.

Time: `time_s` is how long the run lasted at its engine's clock, and `clock` says which clock that is:
"virtual" -- modelled seconds (the simulator's virtual time; the lockstep engine's per-worker clock, which a
Compute advances by samples / speed and a Sleep by its seconds) -- or "wall" -- real seconds since the run
started (a real run's trainer time, the latest event's time; it continues over resumed sessions).
`time_to_target_s` and the eval lines' `time` are on the same clock. `wall_s` is always the wall seconds
the whole run took (start-up and writing the run directory included).

`build_summary` is the one builder: `runner.rundir.finish` calls it for every engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the keys of every engine's summary.json, in order (module doc); `COMMON_DOC` says what each means
SUMMARY_KEYS: tuple[str, ...] = (
    "run", "engine", "clock", "algorithm", "devices", "task", "target",
    "stop_reason", "interrupted", "interrupted_by",
    "time_s", "wall_s", "time_to_target_s",
    "final_accuracy", "best_accuracy", "final_metrics", "final_loss",
    "steps", "device_steps_total", "samples_trained",
    "buffer_max_samples", "dropped_total", "injected_total",
    "cnc_ratio", "floats_sent_total", "bytes_sent_total",
)

COMMON_DOC: dict[str, str] = {
    "run": "the run's name, <name>-<algorithm>-<run id> (its directory)",
    "engine": "the engine that ran it (edgestream.engine_names)",
    "clock": "what time_s and every time of the run count: virtual (modelled seconds) or wall (real seconds)",
    "algorithm": "the algorithm's name",
    "devices": "the number of devices (workers)",
    "task": "classification or regression",
    "target": "{metric, value} the run aimed at, or null",
    "stop_reason": "why it stopped: target_accuracy, target_metric, max_time_s, max_steps, finished, "
                   "interrupted, diverged, ...",
    "interrupted": "whether Ctrl-C or SIGTERM stopped it (what it reached is still summarised)",
    "interrupted_by": "the signal's name (SIGINT, SIGTERM) when interrupted, else null",
    "time_s": "how long the run lasted at the engine's clock (see clock)",
    "wall_s": "wall seconds the whole run took",
    "time_to_target_s": "when the target was first reached, on the engine's clock; null: not reached",
    "final_accuracy": "the last evaluation's accuracy (null for regression)",
    "best_accuracy": "the best evaluation's accuracy",
    "final_metrics": "the last evaluation's metrics (the task's)",
    "final_loss": "the last step's training loss",
    "steps": "the run's steps: the most any device took",
    "device_steps_total": "every device's steps added up",
    "samples_trained": "samples trained on, over every device",
    "buffer_max_samples": "the most samples a device's buffer held",
    "dropped_total": "samples dropped by truncation",
    "injected_total": "samples injected from other devices",
    "cnc_ratio": "share of exchanges that were compressed",
    "floats_sent_total": "floats sent, over every device",
    "bytes_sent_total": "bytes sent, over every device",
}
assert tuple(COMMON_DOC) == SUMMARY_KEYS

CLOCKS = ("virtual", "wall")

#: what the end of `edgestream run --json` prints: the same keys for every engine (summary.json holds all)
PRINTED_KEYS: tuple[str, ...] = (
    "engine", "clock", "time_s", "time_to_target_s", "final_accuracy", "final_metrics", "steps",
    "buffer_max_samples", "dropped_total", "floats_sent_total", "cnc_ratio", "stop_reason", "interrupted", "wall_s",
)

#: keys that summaries written before this schema used for time_s (read by `engine_time_s` only)
LEGACY_TIME_KEYS = ("virtual_time_s", "run_time_s")


def build_summary(aggregates: Mapping[str, Any], *, plan: Any, run: str, engine: str, clock: str, time_s: float,
                  **engine_keys: Any) -> dict[str, Any]:
    """The summary of one run: SUMMARY_KEYS in order, then `engine_keys` (the engine's own, module doc).

    aggregates: the event log's figures (`EventLog.summary`: targets, metrics, steps, buffer, traffic,
    wall_s). plan: the RunPlan (algorithm, devices, task and target unless the engine says otherwise).
    Common keys among `engine_keys` (stop_reason, interrupted, algorithm, devices, ...) fill the common
    slot; the rest follow it."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    target = {"metric": plan.target[0], "value": plan.target[1]} if plan.target else None
    common: dict[str, Any] = {
        "run": run, "engine": engine, "clock": clock, "algorithm": plan.algorithm.name, "devices": plan.world,
        "task": plan.task.name, "target": target, "stop_reason": "finished", "interrupted": False,
        "interrupted_by": None, "time_s": round(float(time_s), 6),
    }
    for key in SUMMARY_KEYS:
        if key in engine_keys:
            common[key] = engine_keys.pop(key)
        elif key not in common:
            common[key] = aggregates.get(key)
    rest = {k: v for k, v in aggregates.items() if k not in common}  # figures the log has beyond the schema
    return {**{k: common[k] for k in SUMMARY_KEYS}, **rest, **engine_keys}


def common_part(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The SUMMARY_KEYS of a summary (None where an older summary lacks one)."""
    return {k: summary.get(k) for k in SUMMARY_KEYS}


def engine_time_s(summary: Mapping[str, Any]) -> float | None:
    """How long the run lasted at its engine's clock: `time_s` (for a summary written before this schema, the
    simulator's virtual_time_s or a real run's run_time_s)."""
    for key in ("time_s", *LEGACY_TIME_KEYS):
        if summary.get(key) is not None:
            return float(summary[key])
    return None


def clock_of(summary: Mapping[str, Any]) -> str:
    """The clock of a summary's times: its `clock` (older summaries: virtual for the simulator, else wall)."""
    clock = summary.get("clock")
    if clock in CLOCKS:
        return str(clock)
    return "virtual" if summary.get("engine") == "sim" else "wall"
