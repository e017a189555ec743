"""`edgestream models list|show|pull RUN`: a run's model versions (docs/model-format.md), from its run directory
(RUN is a folder) or from its models topic (RUN is a run name; `--topic` for another topic). The reading is
edgestream.edge.versions'; this is the command line."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from edgestream.cli.common import bad_input, console

models_app = typer.Typer(help="A run's model versions: list, show one's metadata, pull one's files.",
                         no_args_is_help=True)

RUN_HELP = "a run directory (its models/v<N>/), or a run name (its topic <run>.models on the broker)"
BOOTSTRAP_HELP = "HOST:PORT of the broker (RUN a run name); default the config's runtime.bootstrap, else the " \
                 "managed local broker"


def _versions(run: str, bootstrap: str | None, config: Path | None, topic: str | None) -> tuple[str, dict, list]:
    """(where, version -> ModelVersion, refusals) of RUN; exit 2 with one line when there is nothing to read."""
    from edgestream.edge import versions

    path = Path(run)
    if path.is_dir() and topic is None:
        got, refused = versions.from_dir(path)
        if not got and not refused:
            bad_input(f"RUN: {run} holds no model versions (models/v<N>/; the run's config needs `publish:`)")
        return str(path / "models"), got, refused
    if path.exists() and topic is None:
        bad_input(f"RUN: {run!r} is not allowed; it is a file, not a run directory or a run name")
    from confluent_kafka import KafkaException

    from edgestream.cli.topics import _connect
    from edgestream.kafka.topic_names import models_topic

    bootstrap, security = _connect(bootstrap, config)
    topic = topic or models_topic(run)
    try:
        got, refused = versions.from_topic(bootstrap, topic, run, security)
    except (KafkaException, TimeoutError) as exc:
        err = exc.args[0] if exc.args else exc
        bad_input(f"RUN: {getattr(err, 'str', lambda: str(err))()}")
    return topic, got, refused


def _pick(got: dict, version: int | None, where: str):
    if not got:
        bad_input(f"no whole model version in {where}")
    if version is None:
        return got[max(got)]
    if version not in got:
        bad_input(f"VERSION: {version} is not in {where} (there: {', '.join(map(str, sorted(got)))})")
    return got[version]


def _primary(meta: dict) -> str:
    held = (meta.get("metrics") or {}).get("heldout") or {}
    for k in ("accuracy", "rmse"):
        if held.get(k) is not None:
            return f"{k} {held[k]:.4f}"
    return "-"


@models_app.command("list")
def list_cmd(run: str = typer.Argument(..., help=RUN_HELP),
             bootstrap: str | None = typer.Option(None, "--bootstrap", help=BOOTSTRAP_HELP),
             config: Path | None = typer.Option(None, "--config", help="experiment YAML (its broker and TLS/SASL)"),
             topic: str | None = typer.Option(None, "--topic", help="the models topic, when not <run>.models"),
             as_json: bool = typer.Option(False, "--json", help="one JSON object per version")) -> None:
    """The versions of RUN: number, step, run time, held-out figure, files."""
    where, got, refused = _versions(run, bootstrap, config, topic)
    for line in refused:
        typer.echo(f"refused: {line}", err=True)
    if as_json:
        for v, mv in sorted(got.items()):
            m = mv.meta
            typer.echo(json.dumps({"version": v, "step": m.get("step"), "run_time_s": m.get("run_time_s"),
                                   "metrics": m.get("metrics"), "files": {f["name"]: f["size"] for f in m["files"]},
                                   "onnx_error": m.get("onnx_error")}))
        return
    from rich.table import Table

    table = Table(title=f"model versions in {where}")
    for col in ("version", "step", "run time s", "held-out", "files"):
        table.add_column(col)
    for v, mv in sorted(got.items()):
        m = mv.meta
        files = ", ".join(f"{f['name']} ({f['size'] / 1024:.0f} KiB)" for f in m["files"])
        table.add_row(str(v), str(m.get("step")), f"{m.get('run_time_s', 0):.1f}", _primary(m), files)
    console.print(table)


@models_app.command("show")
def show_cmd(run: str = typer.Argument(..., help=RUN_HELP),
             version: int | None = typer.Argument(None, help="the version (default: the latest)"),
             bootstrap: str | None = typer.Option(None, "--bootstrap", help=BOOTSTRAP_HELP),
             config: Path | None = typer.Option(None, "--config", help="experiment YAML (its broker and TLS/SASL)"),
             topic: str | None = typer.Option(None, "--topic", help="the models topic, when not <run>.models")) -> None:
    """A version's metadata (JSON: input, outputs, metrics, files and their SHA-256)."""
    where, got, _ = _versions(run, bootstrap, config, topic)
    typer.echo(json.dumps(_pick(got, version, where).meta, indent=1, sort_keys=True))


@models_app.command("pull")
def pull_cmd(run: str = typer.Argument(..., help=RUN_HELP),
             version: int | None = typer.Argument(None, help="the version (default: the latest)"),
             out: Path = typer.Option(Path("."), "--out", help="folder to write v<N>/ into"),
             bootstrap: str | None = typer.Option(None, "--bootstrap", help=BOOTSTRAP_HELP),
             config: Path | None = typer.Option(None, "--config", help="experiment YAML (its broker and TLS/SASL)"),
             topic: str | None = typer.Option(None, "--topic", help="the models topic, when not <run>.models")) -> None:
    """A version's files (model.onnx, model.safetensors) and meta.json, checked, into OUT/v<N>/."""
    from edgestream.edge.model_format import META_FILE

    where, got, _ = _versions(run, bootstrap, config, topic)
    mv = _pick(got, version, where)
    if out.exists() and not out.is_dir():
        bad_input(f"--out: {str(out)!r} is not allowed; it exists and is not a folder")
    dest = out / f"v{mv.version}"
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in mv.files.items():
        (dest / name).write_bytes(data)
    (dest / META_FILE).write_text(json.dumps(mv.meta, indent=1, sort_keys=True) + "\n")
    typer.echo(f"version {mv.version} (step {mv.meta.get('step')}) of {where} -> {dest}: "
               f"{', '.join([*mv.files, META_FILE])}")
