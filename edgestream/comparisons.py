"""`run_compare`: the same config run once per algorithm (or variant) on one engine, side by side.

The engine is any registered one (edgestream.runner.engines): "sim" (virtual time) by default,
"local" for real runs through Kafka when the local orchestrator is installed. A comma list
(``sim,local``) runs every variant on each engine, labelled ``<variant>@<engine>``: simulated and real
runs of the same configs side by side (the parameter-server family included: real PS runs go through
the Kafka parameter server).

Variants: ``ddl,scadles`` or, with per-variant config overrides, ``scadles[algorithm.buffer=persist]`` or
``scadles[compression.name=adaptive-topk,compression.ratio=0.1]`` (KEY.PATH=VALUE as with --set; the
whole entry is the variant's label).

Batch rule (the config's algorithm.batch applies only when it suits the algorithm): rate-proportional
algorithms (scadles) take `rate` or `available` batch policies, every other algorithm takes `fixed`;
an unsuitable policy is replaced by the algorithm's default (scadles: rate 8..1024, others: fixed 64).
algorithm.params belong to the config's own algorithm and are dropped for the others. Variant
overrides apply last, so ``ddl[algorithm.batch.size=32]`` sets ddl's batch explicitly.

Output folder `<out>/<name>-compare-<run id>/`: one run directory per variant,
`<name>-<algorithm>-<run id>` (the compare's run id, plus `-v<i>` for the i-th variant where an algorithm
appears twice and `-<engine>` with several engines), compare.md (the
markdown table with the speedup of every variant over the first) and compare.png (accuracy vs
the engine's time, overlaid).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgestream.config import ConfigError, apply_override, validate_dict
from edgestream.metrics import accuracy_plot, read_events
from edgestream.runid import new_run_id
from edgestream.runner.engines import get_engine
from edgestream.runner.report import markdown_table, target_text
from edgestream.runner.summary import SUMMARY_KEYS, engine_time_s
from edgestream.sync.registry import get_algorithm
from edgestream.tasks import get_task


@dataclass
class Variant:
    """One compared run: its label, algorithm name and KEY.PATH=VALUE overrides."""

    label: str
    algorithm: str
    overrides: list[str] = field(default_factory=list)

    @property
    def short(self) -> str:
        """A plot legend label: the algorithm and its override values, e.g. scadles[truncate,topk]."""
        if not self.overrides:
            return self.algorithm
        values = ",".join(o.partition("=")[2] for o in self.overrides)
        text = f"{self.algorithm}[{values}]"
        return text if len(text) <= 48 else text[:45] + "...]"


def parse_variants(spec: str) -> list[Variant]:
    """``a,b[k=v,k=v],c`` -> Variants (commas inside brackets belong to the overrides)."""
    entries, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"--algorithms: unbalanced ']' in {spec!r}")
        if ch == "," and depth == 0:
            entries.append(cur)
            cur = ""
        else:
            cur += ch
    if depth != 0:
        raise ValueError(f"--algorithms: unbalanced '[' in {spec!r}")
    entries.append(cur)
    variants = []
    for raw in (e.strip() for e in entries):
        if not raw:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_\-]+|[A-Za-z_][\w.]*:[A-Za-z_][\w.]*)(?:\[(.*)\])?", raw)
        if m is None:
            raise ValueError(f"--algorithms: {raw!r} is not NAME or NAME[KEY.PATH=VALUE,...] (NAME: a registered "
                             "algorithm or an import path package.module:attribute)")
        overrides = [o.strip() for o in (m.group(2) or "").split(",") if o.strip()]
        variants.append(Variant(raw, m.group(1), overrides))
    if not variants:
        raise ValueError("--algorithms: give at least one algorithm")
    labels = [v.label for v in variants]
    if len(set(labels)) != len(labels):
        raise ValueError(f"--algorithms: repeated entries in {spec!r}")
    return variants


def batch_for(algorithm: str, batch: dict[str, Any] | None) -> dict[str, Any]:
    """The batch policy `algorithm` runs with, given the config's algorithm.batch (see module doc)."""
    return get_algorithm(algorithm).suited_batch(batch)


def variant_config(cfg: Any, variant: Variant) -> Any:
    """The ExperimentConfig of one variant of `cfg`; ConfigError lists problems of its overrides."""
    raw = copy.deepcopy(cfg.model_dump(mode="json"))
    algo = raw["algorithm"]
    if variant.algorithm != algo["name"]:
        algo["params"] = {}
    algo["batch"] = batch_for(variant.algorithm, algo.get("batch"))
    algo["name"] = variant.algorithm
    for item in variant.overrides:
        apply_override(raw, item)
    try:
        return validate_dict(raw, f"variant {variant.label}")
    except ConfigError as exc:
        raise ConfigError([f"{variant.label}: {p}" for p in exc.problems], exc.source) from None


def _time_words(engine: str) -> tuple[str, str]:
    """(what the engine's times are, a table title) for compare.md and the terminal table."""
    if engine == "sim":
        return "virtual seconds", "simulated, virtual time"
    if "," in engine:
        return ("the summary's time_s: virtual seconds for sim and lockstep, wall seconds for local",
                f"engines {engine}")
    return f"seconds of the {engine} engine", f"engine {engine}"


def run_compare(cfg: Any, variants: list[Variant], out: str | Path | None = None, run_id: str | None = None,
                progress: bool = True, base_dir: str | Path | None = None, engine: str = "sim",
                **options: Any) -> tuple[Path, dict[str, dict], str]:
    """Run every variant of `cfg` on `engine`; returns (compare folder, {label: summary}, markdown table).

    All variant configs are built (and validated), and the engine looked up (EngineUnavailable), before
    the first run starts. options go to the local engine's run function (bootstrap, ...; see runner.engines),
    base_dir to the in-process engines' (sim, lockstep)."""
    configs = [(v, variant_config(cfg, v)) for v in variants]
    engines = [e.strip() for e in engine.split(",") if e.strip()]
    if not engines or len(set(engines)) != len(engines):
        raise ValueError(f"--engine: {engine!r}: give one engine or a comma list of different ones")
    runners = {e: get_engine(e) for e in engines}
    parent = Path(out if out is not None else cfg.runtime.out)
    compare_id = run_id or new_run_id()
    folder = parent / f"{cfg.name}-compare-{compare_id}"
    folder.mkdir(parents=True, exist_ok=True)
    metric = get_task(cfg.task).primary  # what compare.png plots: accuracy, or rmse for a regression task
    summaries: dict[str, dict] = {}
    curves: dict[str, list[tuple[float, float]]] = {}
    labels = []
    repeated = {v.algorithm for v in variants if sum(w.algorithm == v.algorithm for w in variants) > 1}
    for i, (v, vcfg) in enumerate(configs, start=1):
        for eng, run in runners.items():
            label = v.label if len(engines) == 1 else f"{v.label}@{eng}"
            labels.append(label)
            # the run is <name>-<algorithm>-<compare id>: a variant number where an algorithm repeats, the engine
            # where several run; unique in the folder and (the compare id is new) on a broker
            rid = "-".join([compare_id] + ([f"v{i}"] if v.algorithm in repeated else [])
                           + ([eng] if len(engines) > 1 else []))
            # the in-process engines take base_dir; the local engine its own options (bootstrap, ...)
            opts = options if eng == "local" else ({"base_dir": base_dir} if base_dir is not None else {})
            path, summary = run(vcfg, out=folder, run_id=rid, progress=progress, **opts)
            summary["run_dir"] = str(path)
            summary["batch"] = vcfg.algorithm.batch.spec() if vcfg.algorithm.batch else None
            summaries[label] = summary
            short = v.short if len(engines) == 1 else f"{v.short}@{eng}"
            curves[short if short not in curves else label] = eval_curve(path, metric)
    baseline = labels[0]
    table = markdown_table(summaries, baseline=baseline)
    unit, _ = _time_words(engine)
    target = cfg.target()
    lines = [f"# {cfg.name}: {', '.join(summaries)}", "",
             f"{cfg.devices.count} devices, rates {cfg.devices.rates.spec()}, model {cfg.model.name}, "
             f"dataset {cfg.data.dataset}, target {f'{target[0]} {target[1]:g}' if target else 'none'}, "
             f"{_limits(cfg.stop)}; engine {engine}, times are {unit}.", "", table, ""]
    for label, s in summaries.items():
        t = engine_time_s(s)
        lines.append(f"- {label}: batch {s['batch']}, stop {s.get('stop_reason')}"
                     + (f" at {t:.4g} s" if t is not None else "") + f", run {Path(s['run_dir']).name}")
    if cfg.eval.prequential is not None:
        lines += ["", *_prequential_section(cfg, summaries, folder, engine)]
    (folder / "compare.md").write_text("\n".join(lines) + "\n")
    accuracy_plot(curves, folder / "compare.png", title=f"{cfg.name}: test {metric}")
    return folder, summaries, table


def _prequential_section(cfg: Any, summaries: dict[str, dict], folder: Path, engine: str) -> list[str]:
    """compare.md's lines on stream learning, and prequential.png: each run's all-devices prequential window
    metric over time with the drift scenario's first change marked; per run, how it came back after that change
    (edgestream.metrics.prequential.recovery) and its drift detections."""
    from edgestream.metrics.plots import prequential_plot
    from edgestream.metrics.prequential import recovery, window_curve
    from edgestream.tasks import DIRECTIONS

    metric = get_task(cfg.task).primary
    curves: dict[str, list[tuple[float, float]]] = {}
    starts: dict[str, float] = {}
    for label, s in summaries.items():
        records = read_events(Path(s["run_dir"]) / "events.jsonl")
        curves[label] = window_curve(records, metric)
        begun = [float(e["time"]) for e in records if e.get("kind") == "drift_start"]
        if begun:
            starts[label] = min(begun)
    unit, _ = _time_words(engine)
    lines = [f"## Stream learning: the prequential {metric} over each run's last {cfg.eval.prequential.window} "
             f"samples a device (all devices; prequential.png)", ""]
    marks = {}
    if starts:
        at = min(starts.values())
        marks = {f"drift begins ({at:.4g} s)": at}
        lines += [f"| run | {metric} before | worst after | final | back within 0.02 after ({unit}) | drifts |",
                  "|---|---|---|---|---|---|"]
        for label, curve in curves.items():
            drift = summaries[label].get("drift") or {}
            if label not in starts:  # the run never trained on a changed sample (it lagged behind its streams)
                lines.append(f"| {label} | - | - | - | its batches never reached the change (the run lagged "
                             f"{_lag_text(summaries[label])}) | {drift.get('detections', '-')} |")
                continue
            r = recovery(curve, starts[label], higher=DIRECTIONS.get(metric, True))
            back = ("never" if r["recovered_s"] is None else
                    r["recovered_s"] if r["dipped"] else "no dip (still learning when it came)")
            lines.append(f"| {label} | {r['before']} | {r['dip']} | {r['final']} | {back} | "
                         f"{drift.get('detections', '-')} |")
    else:
        lines.append("No drift scenario in these runs: prequential.png shows the window metric alone.")
    prequential_plot(curves, folder / "prequential.png", marks=marks, title=f"{cfg.name}: prequential {metric}",
                     xlabel=f"time ({unit})", ylabel=f"prequential {metric} (window, all devices)")
    return lines


def _lag_text(summary: dict) -> str:
    """How far a run was behind its streams, from its summary (its largest buffer)."""
    buf = summary.get("buffer_max_samples")
    return f"by up to {buf:,} buffered samples" if isinstance(buf, int) else "behind its streams"


def _limits(stop: Any) -> str:
    """The stop limits as compare.md states them: "max time 600.0 s", "max 50 steps", both, or "no time or
    step limit" (a continuous run: it ran until interrupted)."""
    parts = ([f"max time {stop.max_time_s} s"] if stop.max_time_s is not None else []) + \
        ([f"max {stop.max_steps} steps"] if stop.max_steps is not None else [])
    return ", ".join(parts) or "no time or step limit"


def eval_curve(run_dir: Path, metric: str) -> list[tuple[float, float]]:
    """(time, value) of `metric` at each evaluation in run_dir/events.jsonl (none when the file is missing)."""
    path = Path(run_dir) / "events.jsonl"
    if not path.is_file():
        return []
    return [(float(e["time"]), float(e[metric])) for e in read_events(path)
            if e.get("kind") == "eval" and e.get(metric) is not None]


def read_run_summaries(run_dirs: list[Path]) -> dict[str, dict]:
    """{run directory name: its summary.json, with `run_dir`} of finished runs; ValueError (one line, naming the
    directory) for one that is not a finished run directory, or for runs of different tasks or target metrics,
    which one table cannot compare."""
    summaries: dict[str, dict] = {}
    for d in (Path(p) for p in run_dirs):
        if not d.is_dir():
            raise ValueError(f"RUN_DIR {str(d)!r}: not a directory; give run directories <out>/<name>-<algorithm>-"
                             "<run id>")
        file = d / "summary.json"
        if not file.is_file():
            raise ValueError(f"RUN_DIR {str(d)!r}: no summary.json, so not a finished run; give run directories of "
                             "finished or interrupted runs (trainers started by hand: `edgestream collect RUN_DIR` "
                             "writes it)")
        try:
            s = json.loads(file.read_text())
        except ValueError:
            s = None
        if not isinstance(s, dict):
            raise ValueError(f"RUN_DIR {str(d)!r}: summary.json is not a JSON object")
        label = d.name if d.name not in summaries else str(d)
        if label in summaries:
            raise ValueError(f"RUN_DIR {str(d)!r}: given twice")
        summaries[label] = {**s, "run_dir": str(d)}
    tasks = {label: s.get("task") or "classification" for label, s in summaries.items()}
    if len(set(tasks.values())) > 1:
        raise ValueError("RUN_DIR: runs of different tasks cannot be compared in one table: "
                         + ", ".join(f"{k} ({v})" for k, v in tasks.items()) + "; give runs of one task")
    metrics = {label: (s.get("target") or {}).get("metric") for label, s in summaries.items()}
    if len({m for m in metrics.values() if m}) > 1:
        raise ValueError("RUN_DIR: runs measured to different target metrics cannot be compared in one table: "
                         + ", ".join(f"{k} ({v})" for k, v in metrics.items() if v) + "; give runs of one metric")
    return summaries


def compare_runs(run_dirs: list[Path], out: str | Path | None = None,
                 run_id: str | None = None) -> tuple[Path, dict[str, dict], str]:
    """Compare finished runs from their run directories, running nothing: returns (compare folder, {run name:
    summary}, markdown table). The folder, `<out>/<name>-compare-<run id>/` (`compare-<run id>` when the runs'
    names differ; out: default the first run's parent), gets compare.md (the table, whether and when each run
    reached its target, the first run as the speedup baseline) and compare.png (the task's metric against each
    run's engine time). ValueError (one line) as `read_run_summaries`."""
    summaries = read_run_summaries(run_dirs)
    if not summaries:
        raise ValueError("RUN_DIR: give at least one run directory")
    first = Path(next(iter(summaries.values()))["run_dir"])
    metric = get_task(next(iter(summaries.values())).get("task") or "classification").primary
    names = {yaml_name(Path(s["run_dir"])) or "" for s in summaries.values()}
    prefix = f"{names.pop()}-" if len(names) == 1 and "" not in names else ""
    folder = Path(out if out is not None else first.parent) / f"{prefix}compare-{run_id or new_run_id()}"
    folder.mkdir(parents=True, exist_ok=True)
    baseline = next(iter(summaries))
    table = markdown_table(summaries, baseline=baseline)
    engines = sorted({str(s.get("engine")) for s in summaries.values()})
    lines = [f"# {', '.join(summaries)}", "", f"finished runs compared (engines {', '.join(engines)}; sim times are "
             "virtual seconds); target: whether and when each run reached its own target.", "", table, ""]
    for label, s in summaries.items():
        t = engine_time_s(s)
        lines.append(f"- {label}: {s.get('algorithm')} on {s.get('devices')} devices, engine {s.get('engine')}, "
                     f"stop {s.get('stop_reason')}" + (f" at {t:.4g} s" if t is not None else "")
                     + f", run {s['run_dir']}")
    (folder / "compare.md").write_text("\n".join(lines) + "\n")
    accuracy_plot({label: eval_curve(Path(s["run_dir"]), metric) for label, s in summaries.items()},
                  folder / "compare.png", title=f"test {metric} of {len(summaries)} runs",
                  xlabel="time (s; virtual for simulated runs)", ylabel=f"test {metric}")
    return folder, summaries, table


def yaml_name(run_dir: Path) -> str | None:
    """The `name` in run_dir/config.yaml (None when it cannot be read)."""
    import yaml

    try:
        raw = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    name = raw.get("name") if isinstance(raw, dict) else None
    return str(name) if name else None


def compare_algorithms(cfg: Any, algorithms: list[str], out: str | Path | None = None,
                       console: Any = None, run_id: str | None = None, engine: str = "sim",
                       **options: Any) -> dict[str, Any]:
    """`run_compare` for a list of variant specs (e.g. ["ddl", "scadles"]), printing the table on a rich
    `console` (progress bars when it is a terminal); returns {"folder", "table", "runs": {label: `summary_row`}}
    (what `make demo` shows; the Python API's `edgestream.compare` returns the same rows)."""
    variants = parse_variants(",".join(algorithms))
    progress = bool(console is not None and getattr(console, "is_terminal", False))
    folder, summaries, table = run_compare(cfg, variants, out=out, run_id=run_id, progress=progress,
                                           engine=engine, **options)
    if console is not None:
        console.print(rich_table(summaries, variants[0].label, title=_time_words(engine)[1]))
        console.print(f"compare.md and compare.png in {folder}")
    return {"folder": str(folder), "table": table,
            "runs": {label: summary_row(s) for label, s in summaries.items()}}


#: the headline figures of a compared run (`summary_row`), common keys of every engine's summary
#: (runner.summary); time_s is the run's time at its engine's clock (`engine_time_s`)
ROW_KEYS = ("time_to_target_s", "final_accuracy", "final_metrics", "buffer_max_samples", "floats_sent_total",
            "cnc_ratio", "steps", "stop_reason", "time_s", "wall_s")
assert set(ROW_KEYS) <= set(SUMMARY_KEYS)


def summary_row(summary: dict) -> dict[str, Any]:
    """The ROW_KEYS of one run's summary (None where the summary lacks one; time_s also from a summary written
    before the common schema)."""
    return {k: engine_time_s(summary) if k == "time_s" else summary.get(k) for k in ROW_KEYS}


def rich_table(summaries: dict[str, dict], baseline: str, title: str = "simulated, virtual time") -> Any:
    """A compact rich Table of the headline figures (for terminals; compare.md has them all)."""
    from rich.table import Table

    table = Table(title=title)
    for col in ("run", "target", "time (s)", "final acc", "buffer max", "floats sent", "CNC", "speedup"):
        table.add_column(col, justify="left" if col == "run" else "right")
    base_t = summaries.get(baseline, {}).get("time_to_target_s")
    for label, s in summaries.items():
        t, ran = s.get("time_to_target_s"), engine_time_s(s)
        table.add_row(label, target_text(s),
                      f"{ran:.1f}" if ran is not None else "-",
                      f"{s.get('final_accuracy') or 0:.3f}", str(s.get("buffer_max_samples")),
                      f"{s.get('floats_sent_total') or 0:.3g}", f"{s.get('cnc_ratio') or 0:.2f}",
                      f"{base_t / t:.2f}x" if base_t and t else "n/a")
    return table
