"""The `edgestream` command (typer). Thin: every command calls into the package."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

from edgestream import cli_cluster
from edgestream.algorithm_names import COLLECTIVE, PS
from edgestream.cli_topics import topics_app
from edgestream.kafka.jars import DEFAULT_KAFKA_VERSION, BrokerError, cache_dir
from edgestream.profiles.select import ENTRY_HELP, cli_overrides, profile_help

app = typer.Typer(help="edgestream: train models on data streaming in from heterogeneous edge devices "
                       "through Apache Kafka.", no_args_is_help=True, add_completion=False)
config_app = typer.Typer(help="Validate and show experiment configs.", no_args_is_help=True)
broker_app = typer.Typer(help="Run a managed local Apache Kafka broker (KRaft; one node, or --nodes N).",
                         no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(broker_app, name="broker")
app.add_typer(topics_app, name="topics")

console = Console()


def default_broker_dir() -> Path:
    return cache_dir() / "broker"


def _load(config: Path, overrides: list[str] | None = None, *, notes: bool = True):
    """load_config, or exit 2 with one line per problem (what `config validate` prints)."""
    from edgestream.launch.command import load_or_exit

    return load_or_exit(config, overrides, notes=notes)


# ---------------------------------------------------------------- config
@config_app.command("validate")
def config_validate(files: list[Path] = typer.Argument(..., help="experiment YAML file(s)"),
                    set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable), "
                                                   "applied to every FILE")) -> None:
    """Exit 0 when every FILE is a valid config; otherwise exit 2 after checking them all, with one line
    per problem (each naming its file). Checks what `run` checks before it starts: the schema, the
    plugins the config names, the dataset, the model built on the data's shape, the rate model."""
    from edgestream.config import ConfigError, load_config
    from edgestream.config_check import check_runnable
    from edgestream.runner.plan import optimizer_notes

    bad = 0
    for file in files:
        try:
            cfg = load_config(file, set_ or [])
            problems = check_runnable(cfg)
            if problems:
                raise ConfigError(problems, str(file))
        except ConfigError as exc:
            bad += 1
            for line in exc.problems:  # with several files, every line names its file
                several = len(files) > 1 and not line.startswith(str(file))
                typer.echo(f"{file}: {line}" if several else line, err=True)
            continue
        for line in optimizer_notes(cfg):
            typer.echo(f"{file}: warning: {line}" if len(files) > 1 else f"warning: {line}", err=True)
        typer.echo(f"{file}: valid")
    if bad:
        if len(files) > 1:
            typer.echo(f"{bad} of {len(files)} config(s) invalid", err=True)
        raise typer.Exit(2)


@config_app.command("show")
def config_show(file: Path = typer.Argument(..., help="experiment YAML file"),
                set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Print the fully resolved config (defaults filled in, paths absolute, secrets shown as ***).
    runtime.out is shown as the folder a run started here would use (it resolves against the current
    directory); comment lines at the end say how kafka.topics resolves against a cluster (null's rule)."""
    from edgestream.kafka.topic_settings import config_rules

    cfg = _load(file, set_)
    cfg.runtime.out = str(Path(cfg.runtime.out).absolute())
    sys.stdout.write(cfg.to_yaml())
    sys.stdout.write("".join(line + "\n" for line in config_rules(cfg.kafka.topics)))  # how kafka.topics resolves


# ---------------------------------------------------------------- plugins
@app.command("plugins")
def plugins_list(kind: str = typer.Argument(None, help="models, datasets, algorithms, compressors, tasks or "
                                            "decoders (default: all)"),
                 as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """List what each pluggable kind offers and where it comes from: built-ins and installed entry points
    (group edgestream.<kind>). Any 'package.module:attribute' import path works too."""
    from edgestream.api import list_plugins
    from edgestream.plugins import REGISTRIES

    try:
        listing = list_plugins(kind)
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    kinds = list(listing)
    if as_json:
        print(json.dumps(listing, indent=1))
        return
    for k in kinds:
        print(f"{k} (entry-point group {REGISTRIES[k].group!r}; or an import path 'package.module:attribute'):")
        width = max((len(a["name"]) for a in listing[k]), default=0)
        src = max((len(a["source"]) for a in listing[k]), default=0)
        for a in listing[k]:
            print(f"  {a['name']:<{width}}  {a['source']:<{src}}  {a['target']}"
                  + (f"  -- {a['summary']}" if a["summary"] else ""))


# ---------------------------------------------------------------- broker
def _broker(data_dir: Path | None, port: int | None = None, version: str = DEFAULT_KAFKA_VERSION,
            host: str = "127.0.0.1", advertised_host: str | None = None, security: str | None = None):
    from edgestream.kafka.broker import LocalBroker

    return LocalBroker(data_dir or default_broker_dir(), port=port, kafka_version=version,
                       log=lambda m: typer.echo(m, err=True), host=host, advertised_host=advertised_host,
                       security=security)


@broker_app.command("start")
def broker_start(port: int = typer.Option(9092, min=1, max=65535, help="PLAINTEXT port (on --host); with --nodes N, "
                                          "node i listens on PORT+i-1"),
                 nodes: int = typer.Option(None, "--nodes", min=1, max=9, help="a KRaft cluster of N nodes (one data "
                                           "dir each under DATA_DIR, replication min(3,N)); default 1, or what "
                                           "DATA_DIR holds"),
                 host: str = typer.Option("127.0.0.1", "--host",
                                          help="address the client listener binds (0.0.0.0: every interface)"),
                 advertised_host: str = typer.Option(None, "--advertised-host",
                                                     help="address clients are told to connect to (what other "
                                                          "hosts reach this one by); default --host"),
                 data_dir: Path = typer.Option(None, help="instance dir (storage, logs, state); "
                                               "default ~/.cache/edgestream/broker"),
                 kafka_version: str = typer.Option(DEFAULT_KAFKA_VERSION, help="Apache Kafka version (Maven Central)"),
                 security: str = typer.Option(None, "--security", help="none | sasl-ssl (SCRAM-SHA-512 over TLS; CA, "
                                              "keystores and passwords made in DATA_DIR/security); default: what "
                                              "DATA_DIR was started with, else none")
                 ) -> None:
    """Start a broker in the background and print its bootstrap address (with --security sasl-ssl, the
    client settings a run needs on stderr)."""
    import time

    from edgestream.kafka.security import client_lines

    if cli_cluster.wants_cluster(data_dir or default_broker_dir(), nodes):
        return cli_cluster.start(data_dir or default_broker_dir(), nodes, port=port, host=host,
                                 advertised_host=advertised_host, kafka_version=kafka_version, security=security)
    try:
        broker = _broker(data_dir, port, kafka_version, host=host, advertised_host=advertised_host, security=security)
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if broker.running_pid() is not None:
        st = broker.read_state()
        typer.echo(f"already running: {st.get('bootstrap')} (pid {st.get('pid')}, {broker.data_dir})")
        return
    t0 = time.monotonic()
    try:
        broker.start()
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"started Kafka {kafka_version} in {time.monotonic() - t0:.1f} s (pid {broker.pid}, "
               f"data dir {broker.data_dir})", err=True)
    for line in client_lines(broker.data_dir, broker.bootstrap) if broker.security == "sasl-ssl" else []:
        typer.echo(line, err=True)
    print(broker.bootstrap)


@broker_app.command("status")
def broker_status(data_dir: Path = typer.Option(None, help="instance dir; default ~/.cache/edgestream/broker"),
                  as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Say whether the broker of DATA_DIR runs and answers, and its security mode (exit 0 if it answers,
    1 if not)."""
    from edgestream.kafka.security import describe

    if cli_cluster.is_cluster_dir(data_dir or default_broker_dir()):
        return cli_cluster.status(data_dir or default_broker_dir(), as_json)
    st = _broker(data_dir).status()
    if as_json:
        print(json.dumps(st))
    elif st["running"]:
        typer.echo(f"running: {st['bootstrap']} (pid {st['pid']}, Kafka {st['kafka_version']}, "
                      f"{'answering' if st['answering'] else 'NOT answering'}, {st['data_dir']}); "
                      f"security: {describe(st.get('security'))}")
    else:
        typer.echo(f"not running ({st['data_dir']})")
    raise typer.Exit(0 if st["running"] and st["answering"] else 1)


@broker_app.command("stop")
def broker_stop(data_dir: Path = typer.Option(None, help="instance dir; default ~/.cache/edgestream/broker"),
                timeout: float = typer.Option(30.0, help="seconds to wait for a graceful stop before SIGKILL")) -> None:
    """Stop the broker of DATA_DIR, every node of a cluster (graceful, then by pid). The data stays for the next
    start."""
    if cli_cluster.is_cluster_dir(data_dir or default_broker_dir()):
        return cli_cluster.stop(data_dir or default_broker_dir(), timeout)
    broker = _broker(data_dir)
    if broker.stop(timeout=timeout):
        typer.echo(f"stopped ({broker.data_dir})")
    else:
        typer.echo(f"not running ({broker.data_dir})")


@broker_app.command("fetch")
def broker_fetch(kafka_version: str = typer.Option(DEFAULT_KAFKA_VERSION, help="Apache Kafka version")) -> None:
    """Resolve the broker jars from Maven Central into the cache (done once; start does it too)."""
    from edgestream.kafka.jars import resolve_jars

    try:
        path = resolve_jars(kafka_version, log=lambda m: typer.echo(m, err=True))
    except BrokerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    print(path)


# ---------------------------------------------------------------- produce
def _produce_fail(message: object, code: int) -> None:
    """One line on stderr, then exit `code` (2: bad input, 1: Kafka or broker trouble, 130: interrupted)."""
    typer.echo("error: " + " ".join(str(message).split()), err=True)
    raise typer.Exit(code)


def _produce_flags(duration: float | None, report_every: float, flush_timeout: float) -> None:
    import math

    checks = (("--duration", duration, duration is None or (math.isfinite(duration) and duration > 0),
               "a number of seconds > 0 (leave it out to stream until SIGINT/SIGTERM)"),
              ("--report-every", report_every, math.isfinite(report_every) and report_every >= 0,
               "a number of seconds >= 0 (0: no reports)"),
              ("--flush-timeout", flush_timeout, math.isfinite(flush_timeout) and flush_timeout >= 0,
               "a number of seconds >= 0"))
    for flag, value, ok, want in checks:
        if not ok:
            _produce_fail(f"{flag} {value:g}: must be {want}", 2)


@app.command("produce")
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
    import logging
    import os
    import signal
    import time

    from confluent_kafka import KafkaException

    from edgestream.config import ConfigError
    from edgestream.kafka.admin import KafkaUnavailable, WaitInterrupted, wait_for_broker
    from edgestream.kafka.security import KafkaRefused
    from edgestream.kafka.topic_settings import TOPIC_SETTINGS_ENV
    from edgestream.kafka.topics import new_run_id
    from edgestream.producers import ResumeError, RunConfigConflict, parse_device_range
    from edgestream.producers.status import write_status
    from edgestream.runner.plan import RunPlan

    _produce_flags(duration, report_every, flush_timeout)
    cfg = _load(config, set_)
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
            broker = cli_cluster.managed(default_broker_dir(), log=lambda m: typer.echo(m, err=True))
            if broker.running_pid() is None:
                typer.echo("no bootstrap given: starting the managed local broker (stopped at exit)", err=True)
                broker.start()
            else:
                broker = None
            bootstrap = cli_cluster.managed(default_broker_dir()).read_state()["bootstrap"]
        typer.echo(f"run {run}: connecting to Kafka at {bootstrap}", err=True)
        wait_for_broker(bootstrap, plan.security, should_stop=lambda: stop["flag"])
        # an outage is said once on stderr, by the producer's `note` (not also raw by the outage's logger)
        logging.getLogger("edgestream.kafka.outage").addHandler(logging.NullHandler())
        producer = plan.producer(bootstrap, run, ids, outage_s=cfg.runtime.kafka_outage_s,
                                 note=lambda m: typer.echo(m, err=True))
        if TOPIC_SETTINGS_ENV not in os.environ and plan.topic_settings(bootstrap).warning():  # by hand: said here
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


def _broker_and_run(cfg, bootstrap: str | None, run_id: str, what: str) -> str:
    """The broker address of a process that joins a run (trainer, parameter server): --bootstrap or
    runtime.bootstrap; a missing address or a bad --run-id exits 2 with one line."""
    from edgestream.runid import check_run_id

    bootstrap = bootstrap or cfg.runtime.bootstrap
    if bootstrap is None:
        _bad_input(f"error: --bootstrap: required (or set runtime.bootstrap): {what}")
    try:
        check_run_id(run_id)
    except ValueError as exc:
        _bad_input(f"error: --run-id: {exc}")
    return bootstrap


def _not_refused(bootstrap: str, client: dict) -> None:
    """Exit 1 with one line when Kafka refuses these credentials or is not trusted (a process started by
    hand: not the outage wait)."""
    from edgestream.kafka.security import KafkaRefused, check_not_refused

    try:
        check_not_refused(bootstrap, client)
    except KafkaRefused as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


# ---------------------------------------------------------------- train (one real trainer process)
@app.command("train")
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
    from edgestream.trainer import TrainerError, train

    cfg = _load(config, set_, notes=False)  # warnings: `run` / `config validate` show them
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
        import signal

        raise typer.Exit(128 + int(signal.Signals[summary["signal"]]))


# ---------------------------------------------------------------- ps (the parameter server of a real run)
@app.command("ps")
def ps_cmd(config: Path = typer.Argument(..., help="experiment YAML file (a parameter-server algorithm)"),
           run_id: str = typer.Option(..., "--run-id", help="the run id the workers train under"),
           bootstrap: str = typer.Option(None, help="HOST:PORT of the broker; default runtime.bootstrap"),
           out: Path = typer.Option(None, "--out", help="parent of the run directory; default runtime.out"),
           set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Serve the parameter server of run <name>-<algorithm>-RUN_ID through Kafka (workers push to <run>.ps.push, replies
    go to <run>.ps.pull.<i>) until every worker was told to stop. Restarted, it continues from
    checkpoints/ps.pt and replays the pushes after it. Writes ranks/ps.jsonl, ps.log, ps.summary.json."""
    from edgestream.ps.server import PSError, serve

    cfg = _load(config, set_, notes=False)
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


@app.command("rates")
def rates_cmd(config: Path = typer.Argument(None, help="experiment YAML file (its devices.rates / variation)"),
              duration: float = typer.Option(60.0, "--duration", help="seconds of stream to describe"),
              plot: Path = typer.Option(None, "--plot", help="also draw S_i(t) and the sorted mean rates (PNG)"),
              fit: Path = typer.Option(None, "--fit", help="fit the supported distributions to a measured rate "
                                       "trace (CSV time,device,rate) and print the devices block"),
              set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Show a config's stream rates before anything runs: each device's drawn rate S_i, its rate over time
    S_i(t), the heterogeneity, and what it implies (samples per minute, ScaDLES' batch sizes, DDL's wait for
    its slowest device). With --fit TRACE.csv (CONFIG optional): the distribution that fits a measured
    trace best, as a config block."""
    if not duration > 0:
        _bad_input(f"--duration: {duration} is not allowed; must be > 0 seconds")
    if plot is not None and plot.suffix.lower() != ".png":
        _bad_input(f"--plot: {str(plot)!r} is not allowed; must be a .png file")
    if fit is not None:
        from edgestream.streams.fit import fit_report

        try:
            text, _ = fit_report(fit)
        except ValueError as exc:
            _bad_input(str(exc) if str(exc).startswith("--fit") else f"--fit: {exc}")
        typer.echo(text)
        if config is None:
            return
    if config is None:
        _bad_input("CONFIG is required (or --fit TRACE.csv)")
    cfg = _load(config, set_)
    from edgestream.runner.plan import RunPlan
    from edgestream.streams.report import format_report, plot_rates, rate_report

    plan = RunPlan.resolve(cfg)
    model = plan.rate_model
    rep = rate_report(model, duration, plan.batch_policy())
    typer.echo(format_report(rep, model.describe()))
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        plot_rates(rep, str(plot), f"{plan.name}: {plan.world} devices, seed {plan.seed}")
        typer.echo(f"plot: {plot}", err=True)


@app.command("profile")
def profile_cmd(config: Path = typer.Argument(..., help="experiment YAML file (its model and input shape)"),
                device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N"),
                batches: str = typer.Option("8,16,32,64,128", "--batches", help="batch sizes, comma-separated"),
                repeats: int = typer.Option(5, "--repeats", min=1, help="timed steps per batch size (best kept)"),
                out: Path = typer.Option(None, "--out", help="profile file to write; default <model>-<device>.yaml"),
                name: str = typer.Option(None, "--name", help="the profile's name; default the file's stem"),
                plot: Path = typer.Option(None, "--plot", help="also draw t(b) and per-sample time (PNG)"),
                set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Measure the config's model: forward+backward seconds per batch size on this machine's DEVICE, and
    write a compute profile (edgestream.profiles) that `devices.compute.profile: FILE` makes the simulator
    and the trainers' slowdown emulation use. Prints the table."""
    from edgestream.profiles import dump_profile, parse_profile
    from edgestream.profiles.measure import measure_profile
    from edgestream.runner.plan import PlanError, RunPlan

    try:
        sizes = sorted({int(x) for x in batches.split(",") if x.strip()})
    except ValueError:
        sizes = []
    if len(sizes) < 2 or sizes[0] < 1:
        typer.echo(f"error: --batches: {batches!r}: give at least two batch sizes >= 1, e.g. 8,32,128", err=True)
        raise typer.Exit(2)
    if device != "cpu" and not device.startswith("cuda"):
        typer.echo(f"error: --device: {device!r}: allowed cpu, cuda, cuda:N", err=True)
        raise typer.Exit(2)
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        typer.echo(f"error: --device: {device}: no CUDA device here (torch.cuda.is_available() is False)", err=True)
        raise typer.Exit(2)
    cfg = _load(config, set_)
    try:
        plan = RunPlan.resolve(cfg)
    except PlanError as exc:
        for line in exc.problems:
            typer.echo(line, err=True)
        raise typer.Exit(2) from None
    dev_tag = device.replace(":", "")
    path = out or Path(f"{plan.model_name}-{dev_tag}.yaml")
    command = f"edgestream profile {config} --device {device} --batches {','.join(map(str, sizes))}"
    typer.echo(f"timing {plan.model_name} {list(plan.dataset.shape)} on {device}: batches {sizes}", err=True)
    doc = measure_profile(plan, device=device, batches=sizes, repeats=repeats, name=name or path.stem,
                          command=command)
    prof = parse_profile(doc, str(path))  # the file written is one `load_profile` accepts
    path.write_text(dump_profile(doc))
    curve = prof.curve(plan.model_name)
    typer.echo("| batch | seconds / step | ms / sample |\n|---|---|---|")
    for b, sec, per in zip(curve.batches, curve.seconds, curve.per_sample(), strict=True):
        typer.echo(f"| {b} | {sec:.6f} | {1e3 * per:.4f} |")
    if plot is not None:
        from edgestream.profiles.plot import plot_profiles

        plot_profiles([prof], plot)
        typer.echo(f"plot: {plot}", err=True)
    typer.echo(f"profile: {path}", err=True)


@app.command("reproduce")
def reproduce_cmd(claims: list[str] = typer.Argument(None, help="claims to run (default: all; see --list)"),
                  quick: bool = typer.Option(False, "--quick", help="smaller runs: under two minutes per claim here"),
                  list_: bool = typer.Option(False, "--list", help="list the claims and exit"),
                  out: Path = typer.Option(Path("reproduce"), "--out", help="folder for <claim>.json and README.md"),
                  profile: str = typer.Option(None, "--profile", help=profile_help() + "; claims whose model it "
                                              "has no entry for are skipped"),
                  profile_model: str = typer.Option(None, "--profile-model", help=ENTRY_HELP)) -> None:
    """Run the papers' headline claims (simulator, digits, virtual time) and set each beside the paper's figure:
    ours, whether the direction holds, the ratio, and the reason for a deviation. Writes OUT/<claim>.json and
    OUT/README.md (the table, also printed)."""
    from edgestream.reproduce import CLAIMS, reproduce, table

    if list_:
        for c in CLAIMS.values():
            paper = "a direction" if c.paper_value is None else f"{c.paper_value:.3g}"
            typer.echo(f"{c.name:27s} {c.paper}: {c.statement} (paper: {paper}; {c.metric})")
        return
    try:
        if profile_model is not None and profile is None:
            raise ValueError("--profile-model: names an entry of a compute profile; give --profile too")
        records = reproduce(claims or None, quick=quick, out=out, echo=lambda m: typer.echo(m, err=True),
                            profile=profile, profile_model=profile_model)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(table(records))
    typer.echo(f"results: {out}/", err=True)


@app.command("status")
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
    from edgestream.kafka.status import StatusError, format_status, run_status

    if not interval >= 0 or (watch and interval <= 0):
        _bad_input(f"--interval: {interval} is not allowed; must be > 0 seconds (>= 0 without --watch)")
    security: dict = {}
    if config is not None:
        cfg = _load(config)
        security = dict(cfg.runtime.kafka_client or {})
        bootstrap = bootstrap or cfg.runtime.bootstrap
    if not bootstrap:
        _bad_input("--bootstrap: required (or --config with runtime.bootstrap)")
    from edgestream.kafka.admin import wait_for_broker
    from edgestream.kafka.security import KafkaRefused

    try:
        wait_for_broker(bootstrap, security, attempts=2)
    except KafkaRefused as exc:  # it answers, but refuses these credentials or is not trusted
        _bad_input(str(exc))
    except Exception as exc:  # noqa: BLE001 -- any failure to reach it is one line
        _bad_input(f"--bootstrap {bootstrap}: no Kafka broker answers ({exc})")
    try:
        while True:
            st = run_status(bootstrap, run, interval_s=interval, security=security)
            typer.echo(json.dumps(st) if as_json else format_status(st))
            if not watch:
                return
            if not as_json:
                typer.echo("")
    except StatusError as exc:
        _bad_input(f"error: {exc}")
    except KeyboardInterrupt:
        return


@app.command("collect")
def collect_cmd(run_dir: Path = typer.Argument(..., help="run directory <out>/<name>-<algorithm>-<run id> "
                                                     "holding ranks/ "
                                                     "(with --run-id: its parent <out>)"),
                config: Path = typer.Option(None, "--config", help="experiment YAML; default RUN_DIR/config.yaml"),
                run_id: str = typer.Option(None, "--run-id", help="RUN_DIR is <out>: collect "
                                            "<out>/<name>-<algorithm>-<run id>"),
                set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Write RUN_DIR's events.jsonl, summary.json and plots from the trainers' ranks/ files (for trainers
    started without `edgestream run`: containers, torchrun across machines). Prints the summary."""
    from edgestream.runner.plan import RunPlan
    from edgestream.runner.rundir import collect_rundir

    cfg_path = config or run_dir / "config.yaml"
    if not cfg_path.is_file():
        typer.echo(f"error: --config: required ({run_dir}/config.yaml does not exist)", err=True)
        raise typer.Exit(2)
    plan = RunPlan.resolve(_load(cfg_path, set_))
    if run_id is not None:
        run_dir = run_dir / plan.run_name(run_id)
    try:
        summary = collect_rundir(run_dir, plan)
    except FileNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    print(json.dumps(summary))


# ---------------------------------------------------------------- demo
@app.command("demo")
def demo(bootstrap: str = typer.Option(None, help="HOST:PORT of a broker; default: a managed local broker"),
         out: str = typer.Option("runs/demo", help="where the real and simulated comparisons are written"),
         max_time: float = typer.Option(50.0, "--max-time", help="seconds each real run trains at most")) -> None:
    """The main job: train DDL and ScaDLES for real on 4 devices' Kafka streams, then the simulator's
    prediction for the same configs, in one table."""
    from edgestream.config import bootstrap_ok

    if bootstrap is not None and not bootstrap_ok(bootstrap):
        _bad_input(f"--bootstrap: {bootstrap!r} is not allowed; must be HOST:PORT[,HOST:PORT...]")
    _check_out(Path(out))
    from confluent_kafka import KafkaException

    from edgestream.demo import run_demo
    from edgestream.kafka.admin import KafkaUnavailable
    from edgestream.launch.orchestrator import LaunchError

    if not max_time > 0:
        _bad_input(f"--max-time: {max_time} is not allowed; must be > 0")
    try:
        run_demo(bootstrap=bootstrap, console=console, out=out, max_time_s=max_time)
    except (BrokerError, KafkaUnavailable, KafkaException, LaunchError) as exc:
        typer.echo("error: " + " ".join(str(exc).split()), err=True)
        raise typer.Exit(1) from None


# ---------------------------------------------------------------- run / compare (any engine: edgestream.runner)
def _config_problems(exc: Exception) -> None:
    for line in getattr(exc, "problems", None) or str(exc).splitlines():
        typer.echo(line, err=True)
    raise typer.Exit(2) from None


def _bad_input(line: str) -> None:
    """Exit 2 with one line on stderr."""
    typer.echo(line, err=True)
    raise typer.Exit(2)


def _check_out(out: Path | None, option: str = "--out") -> None:
    """Exit 2 when an output folder option names something that is not a folder."""
    if out is not None and out.exists() and not out.is_dir():
        _bad_input(f"{option}: {str(out)!r} is not allowed; it exists and is not a folder")


def _check_run_id(run_id: str | None) -> None:
    from edgestream.runid import check_run_id

    if run_id is not None:
        try:
            check_run_id(run_id)
        except ValueError as exc:
            _bad_input(f"--run-id: {exc}")


@app.command("run")
def run_cmd(config: Path = typer.Argument(None, help="experiment YAML file (optional with --resume)"),
            engine: str = typer.Option(None, "--engine", help="sim | local; default runtime.engine"),
            out: Path = typer.Option(None, "--out", help="parent of the run directory; default runtime.out"),
            run_id: str = typer.Option(None, "--run-id", help="run id (folder <name>-<algorithm>-<run id>); "
                                        "default new"),
            set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)"),
            bootstrap: str = typer.Option(None, "--bootstrap", help="local engine: HOST:PORT of the broker; "
                                          "default runtime.bootstrap, else the managed local broker"),
            resume: Path = typer.Option(None, "--resume", help="local engine: continue the run in RUN_DIR"),
            quiet: bool = typer.Option(False, "--quiet", help="no progress (neither the live view nor plain lines)"),
            as_json: bool = typer.Option(False, "--json", help="end with one JSON line of the summary's headline "
                                         "figures on stdout instead of the short human summary")) -> None:
    """Train CONFIG once and write its run directory (config.yaml, events.jsonl, summary.json, plots).

    Progress: a live view on a terminal, else a plain line every few seconds on stderr. At the end a few lines
    say where the run is, why it stopped, its steps, time and final metric, and whether and when it reached
    the target (--json: one JSON line instead). Ctrl-C or SIGTERM writes summary.json marked
    `interrupted: true` with what the run reached; the exit status is then 130 or 143.

    Relative paths in CONFIG (data.root, devices.rates.path) are relative to CONFIG's folder; in --set,
    to the current directory. The run directory's config.yaml shows secrets as ***.
    """
    if engine is not None and engine not in ("sim", "local"):
        _bad_input(f"--engine: {engine!r} is not allowed; must be one of sim, local")
    _check_out(out)
    _check_run_id(run_id)
    if config is None and resume is None:
        _bad_input("error: Missing argument 'config'. (see: edgestream run --help)")
    if resume is not None and engine == "sim":
        _bad_input("--resume: only local runs resume; leave out --engine sim")
    if engine == "local" or resume is not None:  # the children's fork server imports while the config loads
        from edgestream.forkserver import prestart
        from edgestream.launch.command import SECRET_ENV, SECRET_FD_ENV

        prestart((SECRET_ENV, SECRET_FD_ENV))
    if config is None:
        from edgestream.launch.command import load_for_run

        cfg = load_for_run(None, set_, resume)
    else:
        cfg = _load(config, set_)
    engine = engine or ("local" if resume is not None else cfg.runtime.engine)
    if engine == "local":  # launch/command.py (--bootstrap, --resume, exit codes); compare reaches it via the registry
        from edgestream.launch.command import run_local_command

        run_local_command(cfg, out=out, run_id=run_id, bootstrap=bootstrap, resume=resume, quiet=quiet,
                          as_json=as_json)
        return
    from edgestream.config import ConfigError
    from edgestream.launch.command import print_end
    from edgestream.runner import EngineError, RunInterrupted, run_config
    from edgestream.runner.divergence import Diverged

    try:
        path, summary = run_config(cfg, engine, out=out, run_id=run_id, progress=not quiet)
    except (EngineError, ConfigError) as exc:
        _config_problems(exc)
    except Diverged as exc:  # the simulated training diverged: one line (its run directory is written)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.code) from None
    except RunInterrupted as exc:  # Ctrl-C / SIGTERM: the run directory and its summary are written
        print_end(exc.summary, exc.path, as_json)
        typer.echo(f"error: {exc}: run directory {exc.path} (summary.json marks it interrupted)", err=True)
        raise typer.Exit(128 + exc.signum) from None
    typer.echo(f"run directory: {path}", err=True)
    print_end(summary, path, as_json)


@app.command("compare")
def compare_cmd(paths: list[Path] = typer.Argument(..., metavar="CONFIG | RUN_DIR RUN_DIR...",
                                                 help="an experiment YAML file (with --algorithms: run it once per "
                                                 "algorithm), or run directories of finished runs to compare"),
                algorithms: str = typer.Option(
                    None, "--algorithms", help="comma list of variants: an algorithm name, optionally with config "
                    "overrides, e.g. ddl,scadles or scadles\\[algorithm.buffer=persist]. Collective: "
                    f"{', '.join(COLLECTIVE)}. Parameter server: {', '.join(PS)}"),
                set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)"),
                out: Path = typer.Option(None, "--out", help="parent folder; default runtime.out"),
                run_id: str = typer.Option(None, "--run-id", help="id of the compare folder; default new"),
                engine: str = typer.Option("sim", "--engine", help="sim | local | sim,local: the engine(s) every "
                                           "variant runs on (sim,local: simulated and real side by side)"),
                quiet: bool = typer.Option(False, "--quiet", help="no progress bars"),
                profile: str = typer.Option(None, "--profile", help=profile_help()),
                profile_model: str = typer.Option(None, "--profile-model", help=ENTRY_HELP)) -> None:
    """Run CONFIG once per algorithm (simulated unless --engine local); or, given run directories, compare those
    finished runs without running anything. Either way write compare.md (the table: for each run whether and
    when it reached its target, its final metric) and compare.png (the metric against time), and print the table.

    Batch rule: the config's algorithm.batch is kept for an algorithm it suits (rate/available for
    scadles, fixed for the others); otherwise the algorithm's default (scadles rate 8..1024, fixed 64).
    """
    dirs = [p for p in paths if p.is_dir()]
    if dirs:
        if len(dirs) != len(paths):
            _bad_input(f"{[str(p) for p in paths if not p.is_dir()][0]!r}: not a run directory; give CONFIG alone, "
                       "or only run directories (RUN_DIR RUN_DIR...)")
        if algorithms is not None:
            _bad_input("--algorithms: runs a CONFIG; leave it out to compare the run directories given")
        _check_out(out)
        _check_run_id(run_id)
        return _compare_run_dirs(dirs, out, run_id)
    if len(paths) > 1:
        _bad_input(f"{str(paths[0])!r} and {str(paths[1])!r}: give one CONFIG (with --algorithms), or run "
                   "directories that exist")
    config = paths[0]
    if algorithms is None:
        _bad_input(f"--algorithms: required with CONFIG {str(config)!r} (or give run directories to compare)")
    if not engine or any(e not in ("sim", "local") for e in engine.split(",")):
        _bad_input(f"--engine: {engine!r} is not allowed; must be sim, local or a comma list of them (sim,local)")
    _check_out(out)
    _check_run_id(run_id)
    if profile_model is not None and profile is None:
        _bad_input("--profile-model: names an entry of a compute profile; give --profile too")
    cfg = _load(config, cli_overrides(profile, profile_model, set_))
    from edgestream.config import ConfigError
    from edgestream.runner import EngineError
    from edgestream.runner.compare import parse_variants, run_compare

    try:
        variants = parse_variants(algorithms)
        folder, _, table = run_compare(cfg, variants, out=out, run_id=run_id, progress=not quiet, engine=engine)
    except (EngineError, ConfigError, ValueError) as exc:
        _config_problems(exc)
    except Exception as exc:  # an engine's run failure that names its exit status (launch.LaunchError)
        code = getattr(exc, "code", None)
        if not isinstance(code, int) or isinstance(exc, SystemExit):
            raise
        typer.echo(f"error: {exc}", err=True)
        for line in getattr(exc, "detail", None) or []:
            typer.echo(line, err=True)
        raise typer.Exit(code) from None
    typer.echo(f"compare folder: {folder} (table: {folder / 'compare.md'}, plot: {folder / 'compare.png'})", err=True)
    sys.stdout.write(table)


def _compare_run_dirs(dirs: list[Path], out: Path | None, run_id: str | None) -> None:
    """`compare RUN_DIR RUN_DIR...`: the table on stdout, where compare.md and compare.png went on stderr."""
    from edgestream.runner.compare import compare_runs

    try:
        folder, _, table = compare_runs(dirs, out=out, run_id=run_id)
    except ValueError as exc:
        _bad_input(str(exc))
    typer.echo(f"compare folder: {folder} (table: {folder / 'compare.md'}, plot: {folder / 'compare.png'})", err=True)
    sys.stdout.write(table)


def main(args: list[str] | None = None) -> None:
    """The console script: `app`, with usage errors (a missing argument, an unknown option, a value of
    the wrong type) reported as one line on stderr and exit status 2, like every bad input."""
    from typer.main import get_command

    try:
        code = get_command(app).main(args=args, prog_name="edgestream", standalone_mode=False)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except Exception as exc:
        if not (hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)):
            raise
        # a click usage error (click is vendored inside typer, so its classes are not imported here)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
        typer.echo("error: " + " ".join(exc.format_message().split()) + hint, err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
