"""`edgestream status`: a run as the broker sees it (read-only)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from edgestream.cli.common import bad_input, load
from edgestream.kafka.admin import wait_for_broker
from edgestream.kafka.security import KafkaRefused


def status_cmd(run: str = typer.Argument(..., help="run id, or the run name <name>-<algorithm>-<run id>"),
               bootstrap: str = typer.Option(None, "--bootstrap", help="HOST:PORT of the broker; default the "
                                             "config's runtime.bootstrap"),
               config: Path = typer.Option(None, "--config", help="experiment YAML: its runtime.bootstrap and "
                                           "runtime.kafka_client (TLS/SASL settings)"),
               interval: float = typer.Option(2.0, "--interval", help="seconds between the two reads that give the "
                                              "producer rates"),
               watch: bool = typer.Option(False, "--watch", help="repeat every --interval until Ctrl-C"),
               run_dir: Path = typer.Option(None, "--run-dir", help="the run's directory (default: runtime.out/<run> "
                                            "of --config, else runs/<run>, when it exists): adds the prequential "
                                            "figures and drift detections from its rank files"),
               as_json: bool = typer.Option(False, "--json", help="one JSON line per reading")) -> None:
    """A run as the broker sees it, from any host that reaches the broker: per device the samples produced,
    the producer's rate, the trainer's acknowledged offset and the consumer lag (samples, and seconds of data:
    now minus the produce time of the oldest unacknowledged sample); the DLQ's count; the
    parameter server's push rate. Read-only."""
    from edgestream.kafka.status import StatusError, format_status, run_status  # lazy: +160 ms start-up

    if not interval >= 0 or (watch and interval <= 0):
        bad_input(f"--interval: {interval} is not allowed; must be > 0 seconds (>= 0 without --watch)")
    security: dict = {}
    if config is not None:
        cfg = load(config)
        security = dict(cfg.runtime.kafka_client or {})
        bootstrap = bootstrap or cfg.runtime.bootstrap
    if not bootstrap:
        bad_input("--bootstrap: required (or --config with runtime.bootstrap)")
    try:
        wait_for_broker(bootstrap, security, attempts=2)
    except KafkaRefused as exc:  # it answers, but refuses these credentials or is not trusted
        bad_input(str(exc))
    except Exception as exc:  # noqa: BLE001 -- any failure to reach it is one line
        bad_input(f"--bootstrap {bootstrap}: no Kafka broker answers ({exc})")
    folder = run_dir if run_dir is not None else _run_folder(run, config)
    try:
        while True:
            st = run_status(bootstrap, run, interval_s=interval, security=security)
            learning = _learning(folder)
            if learning is not None:
                st["learning"] = learning
            typer.echo(json.dumps(st) if as_json else format_status(st) + _learning_text(learning))
            if not watch:
                return
            if not as_json:
                typer.echo("")
    except StatusError as exc:
        bad_input(f"error: {exc}")
    except KeyboardInterrupt:
        return


def _run_folder(run: str, config: Path | None) -> Path | None:
    """The run's directory on this host: runtime.out/<run> of the config, else runs/<run> (None: not here)."""
    bases = []
    if config is not None:
        bases.append(Path(load(config).runtime.out))
    bases.append(Path("runs"))
    for base in bases:
        if (base / run / "ranks").is_dir() or (base / run / "events.jsonl").is_file():
            return base / run
    return None


def _learning(folder: Path | None) -> dict | None:
    """Stream learning's figures from the run directory's rank files (or its merged events.jsonl)."""
    if folder is None or not _prequential(folder):
        return None  # a run without prequential evaluation: nothing to read
    from edgestream.metrics.events import read_events
    from edgestream.metrics.prequential import learning_of
    from edgestream.runner.rundir import merged_events

    try:
        if (folder / "ranks").is_dir():
            records = merged_events(folder / "ranks")
        else:
            records = read_events(folder / "events.jsonl")
    except (OSError, ValueError):
        return None
    return learning_of(records)


def _prequential(folder: Path) -> bool:
    """Whether the run directory's config.yaml (its resolved config) evaluates prequentially (`eval.prequential`)."""
    import yaml

    try:
        cfg = yaml.safe_load((folder / "config.yaml").read_text()) or {}
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and bool((cfg.get("eval") or {}).get("prequential"))


def _learning_text(learning: dict | None) -> str:
    """The status lines of stream learning: the all-devices prequential figures, per device, the drifts."""
    if learning is None:
        return ""
    from edgestream.runner.report import drift_line

    def figs(d: dict) -> str:
        return ", ".join(f"{k} {v:.4f}" for k, v in d.items()) or "-"

    lines = ["", f"prequential (all devices): window {figs(learning['window'])}; since the start "
             f"{figs(learning['cumulative'])}"]
    for d, f in learning["devices"].items():
        lines.append(f"  device {d}: {f['samples']:,} samples scored, window {figs(f['window'])}")
    lines.append(f"drift detections: {learning['drifts']}"
                 + (f" ({', '.join(f'{k}: {v}' for k, v in learning['drifts_per_device'].items())})"
                    if learning["drifts"] else ""))
    lines += [f"  {drift_line(d)}" for d in learning["recent_drifts"]]
    return "\n".join(lines)

