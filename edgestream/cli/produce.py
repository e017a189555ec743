"""`edgestream produce`: stream every device's shard into Kafka at its rate."""

from __future__ import annotations

import logging
import math
import signal
import time
from pathlib import Path

import typer
from confluent_kafka import KafkaException

from edgestream import settings
from edgestream.cli import cluster
from edgestream.cli.common import default_broker_dir, load
from edgestream.kafka.admin import KafkaUnavailable, WaitInterrupted, wait_for_broker
from edgestream.kafka.jars import BrokerError
from edgestream.kafka.security import KafkaRefused
from edgestream.kafka.topic_names import new_run_id
from edgestream.producers.status import write_status


def _produce_fail(message: object, code: int) -> None:
    """One line on stderr, then exit `code` (2: bad input, 1: Kafka or broker trouble, 130: interrupted)."""
    typer.echo("error: " + " ".join(str(message).split()), err=True)
    raise typer.Exit(code)


def _produce_flags(duration: float | None, report_every: float, flush_timeout: float) -> None:
    checks = (("--duration", duration, duration is None or (math.isfinite(duration) and duration > 0),
               "a number of seconds > 0 (leave it out to stream until SIGINT/SIGTERM)"),
              ("--report-every", report_every, math.isfinite(report_every) and report_every >= 0,
               "a number of seconds >= 0 (0: no reports)"),
              ("--flush-timeout", flush_timeout, math.isfinite(flush_timeout) and flush_timeout >= 0,
               "a number of seconds >= 0"))
    for flag, value, ok, want in checks:
        if not ok:
            _produce_fail(f"{flag} {value:g}: must be {want}", 2)


def produce(config: Path = typer.Argument(..., help="experiment YAML file"),
            bootstrap: str = typer.Option(None, help="HOST:PORT; default runtime.bootstrap, else a managed broker"),
            run_id: str = typer.Option(None, help="run id (topics <name>-<algorithm>-<run id>.dev.<i>); "
                                       "default: a new one. "
                                       "An existing run continues where its topics end"),
            duration: float = typer.Option(None, help="seconds to stream; default: until SIGINT/SIGTERM"),
            devices: str = typer.Option(None, help="device range this process drives, e.g. 0-15 or 0-7,12"),
            report_every: float = typer.Option(5.0, help="seconds between effective-rate reports (0: none)"),
            flush_timeout: float = typer.Option(15.0, help="seconds to wait at stop for the broker to acknowledge "
                                                "what was sent; the rest is reported as unacknowledged"),
            status_file: Path = typer.Option(None, "--status-file", help="also write the running counts (produced, "
                                             "delivered, failed, unacknowledged, queued) as JSON to this file at "
                                             "every report"),
            start_after: Path = typer.Option(None, "--start-after", help="connect and load the data, then wait "
                                             "until this file exists before streaming (a local run's orchestrator "
                                             "creates it once every trainer is ready)"),
            set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Stream every device's shard into Kafka at its rate S_i(t); print a JSON summary at exit.

    A Kafka outage is waited out for runtime.kafka_outage_s (samples due meanwhile are queued and
    delivered when Kafka answers again); past it the producer stops streaming and says so.
    Exit 0 when the broker acknowledged everything sent; 1 (after the summary) when it did not, or on
    Kafka trouble; 2 on bad input; 130 when interrupted while waiting for the broker.
    """
    from edgestream.config import ConfigError  # lazy: +250 ms start-up
    from edgestream.producers import ResumeError, RunConfigConflict, parse_device_range  # lazy: +175 ms start-up
    from edgestream.producers.from_plan import stream_producer  # lazy: the producer, as above
    from edgestream.runner.plan import RunPlan  # lazy: +270 ms start-up

    _produce_flags(duration, report_every, flush_timeout)
    cfg = load(config, set_)
    if cfg.streams.external:  # the devices publish themselves (the testbed's producer service ends here)
        typer.echo(f"streams.source: external: the devices publish to {cfg.streams.topic} themselves; nothing to "
                   "produce", err=True)
        raise typer.Exit(0)
    try:
        plan = RunPlan.resolve(cfg)
        ids = parse_device_range(devices, plan.world)
        run = plan.run_name(run_id or new_run_id())
    except ValueError as exc:
        _produce_fail(exc, 2)
    stop = {"flag": False}

    def _on_signal(signum, frame):
        stop["flag"] = True

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = None
    bootstrap = bootstrap or cfg.runtime.bootstrap
    try:
        if bootstrap is None:
            broker = cluster.managed(default_broker_dir(), log=lambda m: typer.echo(m, err=True))
            if broker.running_pid() is None:
                typer.echo("no bootstrap given: starting the managed local broker (stopped at exit)", err=True)
                broker.start()
            else:
                broker = None
            bootstrap = cluster.managed(default_broker_dir()).read_state()["bootstrap"]
        typer.echo(f"run {run}: connecting to Kafka at {bootstrap}", err=True)
        wait_for_broker(bootstrap, plan.security, should_stop=lambda: stop["flag"])
        # an outage is said once on stderr, by the producer's `note` (not also raw by the outage's logger)
        logging.getLogger("edgestream.kafka.outage").addHandler(logging.NullHandler())
        producer = stream_producer(plan, bootstrap, run, ids, outage_s=cfg.runtime.kafka_outage_s,
                                   note=lambda m: typer.echo(m, err=True))
        if settings.topic_settings() is None and plan.topic_settings(bootstrap).warning():  # by hand: said here
            typer.echo(plan.topic_settings(bootstrap).warning(), err=True)
        resumed = {d: k for d, k in producer.start.items() if k}
        typer.echo(f"run {run}: devices {ids[0]}-{ids[-1]} -> {bootstrap}"
                   + (f"; continuing {len(resumed)} device stream(s) where their topics end (device "
                      f"{min(resumed)} at sample {resumed[min(resumed)]})" if resumed else ""), err=True)

        def _report(r: dict) -> None:
            if status_file is not None:
                write_status(status_file, r)
            eff = sorted(rate / target for _, target, rate in r["devices"] if target > 0)
            waiting = f" | waiting for Kafka {r['waiting_s']:.0f} s" if r.get("waiting_s") is not None else ""
            typer.echo(f"[{r['t']:7.1f}s] delivered {r['delivered']:,} queued {r['queued']:,} | effective/target "
                       f"min {eff[0]:.1%} median {eff[len(eff) // 2]:.1%}{waiting}", err=True)
            if len(r["devices"]) <= 16:
                typer.echo("    " + "  ".join(f"{d}:{rate:.0f}/{target:.0f}" for d, target, rate in r["devices"]),
                           err=True)

        while start_after is not None and not stop["flag"] and not start_after.exists():
            time.sleep(0.01)  # ready meanwhile: the streams begin the moment the trainers can train
        if status_file is not None:  # streaming begins: a status file says so (edgestream.producers.status)
            write_status(status_file, {"t": 0.0, "produced": 0, "delivered": 0, "failed": 0, "unacknowledged": 0,
                                       "queued": 0})
        summary = producer.run_for(duration, should_stop=lambda: stop["flag"], report=_report,
                                   report_every_s=report_every, flush_timeout_s=flush_timeout)
    except WaitInterrupted as exc:
        _produce_fail(exc, 130)
    except ConfigError as exc:
        for line in exc.problems:
            typer.echo(line, err=True)
        raise typer.Exit(2) from None
    except (RunConfigConflict, ValueError, FileNotFoundError) as exc:  # bad input found while building
        _produce_fail(exc, 2)
    except (BrokerError, KafkaUnavailable, KafkaRefused, ResumeError) as exc:
        _produce_fail(exc, 1)
    except KafkaException as exc:
        _produce_fail(f"Kafka at {bootstrap}: {exc.args[0].str() if exc.args else exc}", 1)
    finally:
        if broker is not None:
            broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(summary.to_json(), flush=True)
    if summary.error is not None:  # Kafka away past runtime.kafka_outage_s: it stopped streaming by itself
        left = (f"{summary.unacknowledged:,} of {summary.produced:,} samples sent were not acknowledged"
                if summary.unacknowledged else f"all {summary.produced:,} samples sent were acknowledged")
        _produce_fail(f"producer: {summary.error}; stopped streaming; {left} (the same --run-id continues after "
                      "the last sample in each topic)", 1)
    if not summary.complete:
        parts = []
        if summary.unacknowledged:
            parts.append(f"{summary.unacknowledged:,} of {summary.produced:,} samples sent were not acknowledged by "
                         f"{bootstrap} within {flush_timeout:g} s of stopping (the summary counts only acknowledged "
                         f"ones; the same --run-id continues after the last sample in each topic)")
        if summary.failed:
            parts.append(f"{summary.failed:,} samples failed ({summary.first_error})")
        _produce_fail("; ".join(parts), 1)

