"""`edgestream infer RUN|MODEL_TOPIC --topic IN --out-topic OUT`: a run's latest model version on a stream
(edgestream.edge.infer, whose module doc says what is written and the delivery guarantee); this is the command
line. `--config CFG --run-id ID --device I`: the run of a config and device I's own stream (the testbed's
`devices` profile: each device scores the versions on its own data, `--report-s`). SIGTERM / SIGINT: the batch in
hand is answered and committed, then it exits 0."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import typer

from edgestream.cli.common import bad_input


def infer_cmd(source: str | None = typer.Argument(None, help="the run (its topic <run>.models) or a models topic "
                                                           "named <run>.models; or give --config and --run-id"),
              topic: str | None = typer.Option(None, "--topic", help="the topic of the records to answer (default, "
                                               "with --device: that device's stream of the run)"),
              out_topic: str | None = typer.Option(None, "--out-topic", help="the topic the answers go to "
                                                   "(default, with --device: <run>.answers.<device>)"),
              device: int | None = typer.Option(None, "--device", help="answer this device's own stream (with "
                                                "--config and --run-id: the run's topic layout says where)"),
              run_id: str | None = typer.Option(None, "--run-id", help="with --config: the run is the config's "
                                                "<name>-<algorithm>-<run id>"),
              overrides: list[str] = typer.Option([], "--set", help="a config override key.path=value"),
              fmt: str = typer.Option("edgestream", "--format", help="the records' format (streams.format: "
                                      "edgestream, json, avro, raw, npy, or a decoder by import path)"),
              field: list[str] = typer.Option([], "--field", help="a format field NAME=VALUE (streams.input, "
                                              "target, target_from, schema, dtype); repeatable"),
              batch: int = typer.Option(64, "--batch", help="records per batch (one model version per batch)"),
              group: str | None = typer.Option(None, "--group", help="the input's consumer group (default "
                                               "<out topic>.infer: a restart goes on where it stopped)"),
              max_records: int | None = typer.Option(None, "--max-records", help="stop after answering so many"),
              report_s: float | None = typer.Option(None, "--report-s", help="every so many seconds, one JSON line "
                                                    "per version: records scored and accuracy / rmse on them"),
              bootstrap: str | None = typer.Option(None, "--bootstrap", help="HOST:PORT of the broker; default the "
                                                   "config's runtime.bootstrap, else the managed local broker"),
              config: Path | None = typer.Option(None, "--config", help="experiment YAML (its broker, TLS/SASL; with "
                                                 "--run-id, the run)"),
              outage_s: float = typer.Option(300.0, "--outage-s", help="how long to wait through a Kafka outage")
              ) -> None:
    """Answer every record of a topic with the run's latest model version, into another topic (JSON per record)."""
    from confluent_kafka import KafkaException

    from edgestream.cli.common import check_run_id
    from edgestream.cli.topics import _connect
    from edgestream.edge.infer import StreamInference
    from edgestream.edge.subscriber import ModelSubscriber
    from edgestream.kafka.admin import KafkaUnavailable
    from edgestream.kafka.topic_names import run_of_topic

    fields = {}
    for item in field:
        name, sep, value = item.partition("=")
        if not sep or name not in ("input", "target", "target_from", "schema", "dtype"):
            bad_input(f"--field: {item!r} is not allowed; must be NAME=VALUE with NAME one of input, target, "
                      "target_from, schema, dtype")
        fields[name] = value
    check_run_id(run_id)
    if (source is None) == (run_id is None) or (run_id is not None and config is None):
        bad_input("RUN: give the run (or its models topic), or --config with --run-id, not both")
    bootstrap, security = _connect(bootstrap, config)
    plan = None
    if run_id is not None:
        from edgestream.cli.common import load
        from edgestream.runner.plan import RunPlan

        plan = RunPlan.resolve(load(config, overrides, notes=False))
        run = plan.run_name(run_id)
    else:
        run = run_of_topic(source) or source
    if topic is None:
        if device is None or plan is None:
            bad_input("--topic: required (or --device with --config and --run-id: the device's own stream)")
        topic = plan.layout(run, bootstrap).stream(device)[0]
    if out_topic is None:
        if device is None:
            bad_input("--out-topic: required (default only with --device: <run>.answers.<device>)")
        out_topic = f"{run}.answers.{device}"
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sub = ModelSubscriber(bootstrap, run, security=security, outage_s=outage_s)
    try:
        try:
            infer = StreamInference(bootstrap, sub, topic, out_topic, fmt=fmt, fields=fields, batch=batch, group=group,
                                    security=security, echo=lambda line: typer.echo(line, err=True))
        except ValueError as exc:
            bad_input(str(exc))
        typer.echo(f"answering {topic} -> {out_topic} with run {run}'s latest model version (waiting for one)",
                   err=True)

        def report(figures: list[dict]) -> None:
            for f in figures:
                typer.echo(json.dumps({"time": round(time.time(), 3), "topic": topic, **f}))

        try:
            stats = infer.run(stop.is_set, max_records=max_records, report_s=report_s,
                              report=report if report_s else None)
        except ValueError as exc:  # a format that does not fit the version's input
            bad_input(" ".join(str(exc).split()))
        except (RuntimeError, KafkaException, KafkaUnavailable, TimeoutError) as exc:  # Kafka trouble: one line
            typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
            raise typer.Exit(1) from None
        finally:
            infer.close()
    finally:
        sub.close()
    typer.echo(json.dumps({"answered": stats.answered, "errors": stats.errors, "batches": stats.batches,
                           "versions": stats.versions, "seconds": round(stats.seconds, 3),
                           "records_per_s": round(stats.answered / stats.seconds, 1) if stats.seconds else None}))
