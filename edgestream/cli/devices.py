"""`edgestream rates` and `edgestream profile`: what a config's devices stream and compute, before anything runs."""

from __future__ import annotations

from pathlib import Path

import typer

from edgestream.cli.common import bad_input, load
from edgestream.profiles import dump_profile, parse_profile
from edgestream.profiles.measure import measure_profile
from edgestream.profiles.plot import plot_profiles


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
        bad_input(f"--duration: {duration} is not allowed; must be > 0 seconds")
    if plot is not None and plot.suffix.lower() != ".png":
        bad_input(f"--plot: {str(plot)!r} is not allowed; must be a .png file")
    if fit is not None:
        from edgestream.streams.fit import fit_report  # lazy: +90 ms start-up

        try:
            text, _ = fit_report(fit)
        except ValueError as exc:
            bad_input(str(exc) if str(exc).startswith("--fit") else f"--fit: {exc}")
        typer.echo(text)
        if config is None:
            return
    if config is None:
        bad_input("CONFIG is required (or --fit TRACE.csv)")
    cfg = load(config, set_)
    from edgestream.runner.plan import RunPlan  # lazy: +270 ms start-up
    from edgestream.streams.report import format_report, plot_rates, rate_report  # lazy: +90 ms start-up

    plan = RunPlan.resolve(cfg)
    model = plan.rate_model
    rep = rate_report(model, duration, plan.batch_policy())
    typer.echo(format_report(rep, model.describe()))
    from edgestream.streams.drift import drift_lines  # lazy: numpy only

    for line in drift_lines(plan.drift_scenario):
        typer.echo(line)
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        plot_rates(rep, str(plot), f"{plan.name}: {plan.world} devices, seed {plan.seed}")
        typer.echo(f"plot: {plot}", err=True)


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
    from edgestream.runner.plan import PlanError, RunPlan  # lazy: +270 ms start-up

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
    import torch  # lazy: +1.5 s start-up

    if device.startswith("cuda") and not torch.cuda.is_available():
        typer.echo(f"error: --device: {device}: no CUDA device here (torch.cuda.is_available() is False)", err=True)
        raise typer.Exit(2)
    cfg = load(config, set_)
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

        plot_profiles([prof], plot)
        typer.echo(f"plot: {plot}", err=True)
    typer.echo(f"profile: {path}", err=True)

