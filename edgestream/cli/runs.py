"""`edgestream run`, `compare`, `collect`, `demo` and `reproduce`: training runs on any engine
(edgestream.runner), their run directories and their comparisons."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from confluent_kafka import KafkaException

from edgestream.algorithm_names import COLLECTIVE, PS
from edgestream.cli.common import bad_input, check_out, check_run_id, config_problems, console, load
from edgestream.engine_names import ENGINES
from edgestream.kafka.admin import KafkaUnavailable
from edgestream.kafka.jars import BrokerError
from edgestream.profiles.select import ENTRY_HELP, cli_overrides, profile_help


def run_cmd(config: Path = typer.Argument(None, help="experiment YAML file (optional with --resume)"),
            engine: str = typer.Option(None, "--engine", help=f"{' | '.join(ENGINES)}; default runtime.engine"),
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
    if engine is not None and engine not in ENGINES:
        bad_input(f"--engine: {engine!r} is not allowed; must be one of {', '.join(ENGINES)}")
    check_out(out)
    check_run_id(run_id)
    if config is None and resume is None:
        bad_input("error: Missing argument 'config'. (see: edgestream run --help)")
    if resume is not None and engine not in (None, "local"):
        bad_input(f"--resume: only local runs resume; leave out --engine {engine}")
    if engine == "local" or resume is not None:  # the children's fork server imports while the config loads
        from edgestream.forkserver import prestart  # lazy: +10 ms start-up
        from edgestream.launch.command import SECRET_ENV, SECRET_FD_ENV  # lazy: +800 ms start-up

        prestart((SECRET_ENV, SECRET_FD_ENV))
    if config is None:
        from edgestream.launch.command import load_for_run  # lazy: +800 ms start-up

        cfg = load_for_run(None, set_, resume)
    else:
        cfg = load(config, set_)
    engine = engine or ("local" if resume is not None else cfg.runtime.engine)
    _run(cfg, engine, out=out, run_id=run_id, quiet=quiet, as_json=as_json, bootstrap=bootstrap, resume=resume)


def _run(cfg, engine: str, *, out: Path | None, run_id: str | None, quiet: bool, as_json: bool,
         bootstrap: str | None, resume: Path | None) -> None:
    """Run `cfg` on `engine` through the engine registry (runner.run_config) and end as every engine does: the run
    directory on stderr, `print_end` on stdout; each way a run fails ends in one line and its exit status."""
    from edgestream.config import ConfigError  # lazy: +250 ms start-up
    from edgestream.launch.command import engine_problems, launch_failed, local_options  # lazy: +800 ms start-up
    from edgestream.launch.orchestrator import LaunchError  # loaded with launch.command
    from edgestream.runner import EngineError, RunInterrupted, run_config  # lazy: +15 ms start-up
    from edgestream.runner.divergence import Diverged  # lazy: +6 ms start-up
    from edgestream.runner.report import print_end  # loaded with launch.command

    # the local engine's own options (--bootstrap, --resume); the other engines take none
    options = local_options(out=out, run_id=run_id, bootstrap=bootstrap, resume=resume) if engine == "local" else {}
    try:
        path, summary = run_config(cfg, engine, out=out, run_id=run_id, progress=not quiet, **options)
    except (EngineError, ConfigError) as exc:
        if engine == "local":
            engine_problems(exc)
        config_problems(exc)
    except LaunchError as exc:  # a local run that could not start or finish (its summary if interrupted)
        launch_failed(exc, as_json)
    except Diverged as exc:  # the simulated training diverged: one line (its run directory is written)
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.code) from None
    except RunInterrupted as exc:  # Ctrl-C / SIGTERM: the run directory and its summary are written
        print_end(exc.summary, exc.path, as_json)
        typer.echo(f"error: {exc}: run directory {exc.path} (summary.json marks it interrupted)", err=True)
        raise typer.Exit(128 + exc.signum) from None
    typer.echo(f"run directory: {path}", err=True)
    print_end(summary, path, as_json)


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
                engine: str = typer.Option("sim", "--engine", help=f"{' | '.join(ENGINES)} | sim,local: the "
                                           "engine(s) every "
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
            bad_input(f"{[str(p) for p in paths if not p.is_dir()][0]!r}: not a run directory; give CONFIG alone, "
                       "or only run directories (RUN_DIR RUN_DIR...)")
        if algorithms is not None:
            bad_input("--algorithms: runs a CONFIG; leave it out to compare the run directories given")
        check_out(out)
        check_run_id(run_id)
        return _compare_run_dirs(dirs, out, run_id)
    if len(paths) > 1:
        bad_input(f"{str(paths[0])!r} and {str(paths[1])!r}: give one CONFIG (with --algorithms), or run "
                   "directories that exist")
    config = paths[0]
    if algorithms is None:
        bad_input(f"--algorithms: required with CONFIG {str(config)!r} (or give run directories to compare)")
    if not engine or any(e not in ENGINES for e in engine.split(",")):
        bad_input(f"--engine: {engine!r} is not allowed; must be {', '.join(ENGINES)} or a comma list of them "
                  "(sim,local)")
    check_out(out)
    check_run_id(run_id)
    if profile_model is not None and profile is None:
        bad_input("--profile-model: names an entry of a compute profile; give --profile too")
    cfg = load(config, cli_overrides(profile, profile_model, set_))
    from edgestream.comparisons import parse_variants, run_compare  # lazy: +680 ms start-up
    from edgestream.config import ConfigError  # lazy: +250 ms start-up
    from edgestream.runner import EngineError  # lazy: +15 ms start-up

    try:
        variants = parse_variants(algorithms)
        folder, _, table = run_compare(cfg, variants, out=out, run_id=run_id, progress=not quiet, engine=engine)
    except (EngineError, ConfigError, ValueError) as exc:
        config_problems(exc)
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
    from edgestream.comparisons import compare_runs  # lazy: +680 ms start-up

    try:
        folder, _, table = compare_runs(dirs, out=out, run_id=run_id)
    except ValueError as exc:
        bad_input(str(exc))
    typer.echo(f"compare folder: {folder} (table: {folder / 'compare.md'}, plot: {folder / 'compare.png'})", err=True)
    sys.stdout.write(table)



def collect_cmd(run_dir: Path = typer.Argument(..., help="run directory <out>/<name>-<algorithm>-<run id> "
                                                     "holding ranks/ "
                                                     "(with --run-id: its parent <out>)"),
                config: Path = typer.Option(None, "--config", help="experiment YAML; default RUN_DIR/config.yaml"),
                run_id: str = typer.Option(None, "--run-id", help="RUN_DIR is <out>: collect "
                                            "<out>/<name>-<algorithm>-<run id>"),
                set_: list[str] = typer.Option(None, "--set", help="override KEY.PATH=VALUE (repeatable)")) -> None:
    """Write RUN_DIR's events.jsonl, summary.json and plots from the trainers' ranks/ files (for trainers
    started without `edgestream run`: containers, torchrun across machines). Prints the summary."""
    from edgestream.runner.plan import RunPlan  # lazy: +270 ms start-up
    from edgestream.runner.rundir import collect_rundir  # lazy: +12 ms start-up

    cfg_path = config or run_dir / "config.yaml"
    if not cfg_path.is_file():
        typer.echo(f"error: --config: required ({run_dir}/config.yaml does not exist)", err=True)
        raise typer.Exit(2)
    plan = RunPlan.resolve(load(cfg_path, set_))
    if run_id is not None:
        run_dir = run_dir / plan.run_name(run_id)
    try:
        summary = collect_rundir(run_dir, plan)
    except FileNotFoundError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    print(json.dumps(summary))


# ---------------------------------------------------------------- demo
def demo(bootstrap: str = typer.Option(None, help="HOST:PORT of a broker; default: a managed local broker"),
         out: str = typer.Option("runs/demo", help="where the real and simulated comparisons are written"),
         max_time: float = typer.Option(50.0, "--max-time", help="seconds each real run trains at most")) -> None:
    """The main job: train DDL and ScaDLES for real on 4 devices' Kafka streams, then the simulator's
    prediction for the same configs, in one table."""
    from edgestream.config import bootstrap_ok  # lazy: +250 ms start-up

    if bootstrap is not None and not bootstrap_ok(bootstrap):
        bad_input(f"--bootstrap: {bootstrap!r} is not allowed; must be HOST:PORT[,HOST:PORT...]")
    check_out(Path(out))

    from edgestream.demo import run_demo  # lazy: +7 ms start-up
    from edgestream.launch.orchestrator import LaunchError  # lazy: +350 ms start-up

    if not max_time > 0:
        bad_input(f"--max-time: {max_time} is not allowed; must be > 0")
    try:
        run_demo(bootstrap=bootstrap, console=console, out=out, max_time_s=max_time)
    except (BrokerError, KafkaUnavailable, KafkaException, LaunchError) as exc:
        typer.echo("error: " + " ".join(str(exc).split()), err=True)
        raise typer.Exit(1) from None




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
    from edgestream.reproduce import CLAIMS, reproduce, table  # lazy: +770 ms start-up

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

