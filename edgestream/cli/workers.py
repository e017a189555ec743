"""`edgestream train` and `edgestream ps`: the processes that join a run by hand (one trainer; the parameter
server), each given the run id and the broker."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import typer

from edgestream.cli.common import bad_input, load
from edgestream.kafka.security import KafkaRefused, check_not_refused
from edgestream.runid import check_run_id


def _broker_and_run(cfg, bootstrap: str | None, run_id: str, what: str) -> str:
    """The broker address of a process that joins a run (trainer, parameter server): --bootstrap or
    runtime.bootstrap; a missing address or a bad --run-id exits 2 with one line."""
    bootstrap = bootstrap or cfg.runtime.bootstrap
    if bootstrap is None:
        bad_input(f"error: --bootstrap: required (or set runtime.bootstrap): {what}")
    try:
        check_run_id(run_id)
    except ValueError as exc:
        bad_input(f"error: --run-id: {exc}")
    return bootstrap


def _not_refused(bootstrap: str, client: dict) -> None:
    """Exit 1 with one line when Kafka refuses these credentials or is not trusted (a process started by
    hand: not the outage wait)."""
    try:
        check_not_refused(bootstrap, client)
    except KafkaRefused as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


# ---------------------------------------------------------------- train (one real trainer process)
def train_cmd(config: Path = typer.Argument(..., help="experiment YAML file"),
              run_id: str = typer.Option(..., "--run-id", help="the run id the producer streams under"),
              bootstrap: str = typer.Option(None, help="HOST:PORT of the broker; default runtime.bootstrap"),
              out: Path = typer.Option(None, "--out", help="parent of the run directory; default runtime.out"),
              resume: bool = typer.Option(False, "--resume", help="continue from this rank's checkpoint"),
              digest: bool = typer.Option(True, "--digest/--no-digest",
                                          help="log a hash of the parameters each step (replica checks)"),
              set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Train device RANK of CONFIG for real (torchrun environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
    LOCAL_RANK). Writes ranks/<rank>.jsonl, .log, .summary.json and checkpoints under the run directory."""
    from edgestream.trainer import TrainerError, train  # lazy: +1.6 s start-up (torch)

    cfg = load(config, set_, notes=False)  # warnings: `run` / `config validate` show them
    bootstrap = _broker_and_run(cfg, bootstrap, run_id, "the broker the producer streams to")
    _not_refused(bootstrap, cfg.runtime.kafka_client)
    try:
        summary = train(cfg, run_id=run_id, bootstrap=bootstrap, out=out if out is not None else cfg.runtime.out,
                        resume=resume, digest=digest)
    except TrainerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    print(json.dumps(summary))
    if summary.get("signal"):  # SIGTERM / SIGINT: stopped at a step boundary with its checkpoint; 143 / 130
        raise typer.Exit(128 + int(signal.Signals[summary["signal"]]))


# ---------------------------------------------------------------- ps (the parameter server of a real run)
def ps_cmd(config: Path = typer.Argument(..., help="experiment YAML file (a parameter-server algorithm)"),
           run_id: str = typer.Option(..., "--run-id", help="the run id the workers train under"),
           bootstrap: str = typer.Option(None, help="HOST:PORT of the broker; default runtime.bootstrap"),
           out: Path = typer.Option(None, "--out", help="parent of the run directory; default runtime.out"),
           set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Serve the parameter server of run <name>-<algorithm>-RUN_ID through Kafka (workers push to <run>.ps.push, replies
    go to <run>.ps.pull.<i>) until every worker was told to stop. Restarted, it continues from
    checkpoints/ps.pt and replays the pushes after it. Writes ranks/ps.jsonl, ps.log, ps.summary.json."""
    from edgestream.ps.serve import PSError, serve  # lazy: +1.9 s start-up (torch)

    cfg = load(config, set_, notes=False)
    bootstrap = _broker_and_run(cfg, bootstrap, run_id, "the broker the workers reach")
    _not_refused(bootstrap, cfg.runtime.kafka_client)
    try:
        summary = serve(cfg, run_id=run_id, bootstrap=bootstrap, out=out if out is not None else cfg.runtime.out)
    except PSError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2 if str(exc).startswith("algorithm.name") else 1) from None
    print(json.dumps(summary))
    if summary.get("status") == "stopped":
        raise typer.Exit(143)

