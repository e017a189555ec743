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
    try:
        while True:
            st = run_status(bootstrap, run, interval_s=interval, security=security)
            typer.echo(json.dumps(st) if as_json else format_status(st))
            if not watch:
                return
            if not as_json:
                typer.echo("")
    except StatusError as exc:
        bad_input(f"error: {exc}")
    except KeyboardInterrupt:
        return

