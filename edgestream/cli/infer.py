"""`edgestream infer RUN|MODEL_TOPIC --topic IN --out-topic OUT`: a run's latest model version on a stream
(edgestream.edge.infer, whose module doc says what is written and the delivery guarantee); this is the command
line. SIGTERM / SIGINT: the batch in hand is answered and committed, then it exits 0."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import typer

from edgestream.cli.common import bad_input


def infer_cmd(source: str = typer.Argument(..., help="the run (its topic <run>.models) or a models topic named "
                                                      "<run>.models"),
              topic: str = typer.Option(..., "--topic", help="the topic of the records to answer"),
              out_topic: str = typer.Option(..., "--out-topic", help="the topic the answers go to"),
              fmt: str = typer.Option("edgestream", "--format", help="the records' format (streams.format: "
                                      "edgestream, json, avro, raw, npy, or a decoder by import path)"),
              field: list[str] = typer.Option([], "--field", help="a format field NAME=VALUE (streams.input, "
                                              "target, target_from, schema, dtype); repeatable"),
              batch: int = typer.Option(64, "--batch", help="records per batch (one model version per batch)"),
              group: str | None = typer.Option(None, "--group", help="the input's consumer group (default "
                                               "<out topic>.infer: a restart goes on where it stopped)"),
              max_records: int | None = typer.Option(None, "--max-records", help="stop after answering so many"),
              bootstrap: str | None = typer.Option(None, "--bootstrap", help="HOST:PORT of the broker; default the "
                                                   "config's runtime.bootstrap, else the managed local broker"),
              config: Path | None = typer.Option(None, "--config", help="experiment YAML (its broker, TLS/SASL)"),
              outage_s: float = typer.Option(300.0, "--outage-s", help="how long to wait through a Kafka outage")
              ) -> None:
    """Answer every record of --topic with the run's latest model version, into --out-topic (JSON per record)."""
    from edgestream.cli.topics import _connect
    from edgestream.edge.infer import StreamInference
    from edgestream.edge.subscriber import ModelSubscriber
    from edgestream.kafka.topic_names import run_of_topic

    fields = {}
    for item in field:
        name, sep, value = item.partition("=")
        if not sep or name not in ("input", "target", "target_from", "schema", "dtype"):
            bad_input(f"--field: {item!r} is not allowed; must be NAME=VALUE with NAME one of input, target, "
                      "target_from, schema, dtype")
        fields[name] = value
    run = run_of_topic(source) or source
    bootstrap, security = _connect(bootstrap, config)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sub = ModelSubscriber(bootstrap, run, security=security, outage_s=outage_s)
    try:
        try:
            infer = StreamInference(bootstrap, sub, topic, out_topic, fmt=fmt, fields=fields, batch=batch, group=group,
                                    security=security)
        except ValueError as exc:
            bad_input(str(exc))
        typer.echo(f"answering {topic} -> {out_topic} with run {run}'s latest model version (waiting for one)",
                   err=True)
        try:
            stats = infer.run(stop.is_set, max_records=max_records)
        except ValueError as exc:  # a format that does not fit the version's input
            bad_input(" ".join(str(exc).split()))
        finally:
            infer.close()
    finally:
        sub.close()
    typer.echo(json.dumps({"answered": stats.answered, "errors": stats.errors, "batches": stats.batches,
                           "versions": stats.versions, "seconds": round(stats.seconds, 3),
                           "records_per_s": round(stats.answered / stats.seconds, 1) if stats.seconds else None}))
