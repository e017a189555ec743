"""Compute profiles (edgestream.profiles): the shipped files, one clear line for a bad file, the measured
curve between and beyond its points, the config fields, the simulator's step times and the trainers'
slowdown emulation taken from a profile, and `edgestream profile` writing one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from factories import SIM_BASE, merge, simulate, steps_of  # tests/factories.py
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.config import ConfigError, load_config, validate_dict
from edgestream.profiles import Curve, ProfileError, load_profile, names, parse_profile
from edgestream.runner.plan import RunPlan
from edgestream.trainer.performer import emulated_sleep

GOOD = {"name": "t", "device": "a test device", "source": "made up for a test",
        "models": {"mlp": {"shape": [1, 8, 8], "seconds": {8: 0.01, 32: 0.02, 128: 0.05}}}}


def test_shipped_profiles_load_and_say_where_their_numbers_come_from() -> None:
    assert {"k80", "epyc-2core", "h100"} <= set(names())
    for name in names():
        prof = load_profile(name)
        assert prof.name == name and prof.device and len(prof.source) > 20
        for curve in prof.models.values():
            assert len(curve.batches) >= 2 and all(s > 0 for s in curve.seconds)
    k80 = load_profile("k80").curve("resnet50-imagenet")
    assert k80(32) == pytest.approx(32 / 49.5, rel=1e-5) and k80(64) == pytest.approx(64 / 51.9, rel=1e-5)
    assert k80.per_sample()[1] < k80.per_sample()[0]          # sublinear: per-sample time falls
    assert set(load_profile("epyc-2core").models) == {"cnn-small", "mlp", "resnet20"}


# Every shipped profile is a GPU or a CPU one; a new file has to be classified here (GPU curves must show
# the sublinear growth the simulator exists for).
GPU_PROFILES = {"k80", "h100"}
CPU_PROFILES = {"epyc-2core"}


@pytest.mark.parametrize("name", names())
def test_every_shipped_profile_is_a_usable_curve_and_gpu_ones_are_sublinear(name: str) -> None:
    assert name in GPU_PROFILES | CPU_PROFILES, f"classify the new profile {name!r} as GPU or CPU in this test"
    prof = load_profile(name)
    raw = yaml.safe_load(Path(prof.path).read_text(encoding="utf-8"))
    assert prof.models and set(prof.models) == set(map(str, raw["models"]))
    for model, curve in prof.models.items():
        written = list(raw["models"][model]["seconds"])               # the file's own order
        assert len(written) >= 2, model
        assert all(a < b for a, b in zip(written, written[1:], strict=False)), f"{name}/{model}: batches not increasing"
        assert list(curve.batches) == written and all(s > 0 for s in curve.seconds)
        if name in GPU_PROFILES:                                      # per-sample time falls with the batch
            assert curve.per_sample()[-1] <= curve.per_sample()[0], f"{name}/{model}: not sublinear"


def test_k80_cifar_entry_is_gavels_measured_throughput() -> None:
    """resnet18-cifar: 1 / (Gavel's K80 ResNet-18 CIFAR-10 steps per second), batch 16..256."""
    curve = load_profile("k80").curve("resnet18-cifar")
    steps_per_s = {16: 17.920456, 32: 13.415050, 64: 7.748888, 128: 4.660352, 256: 2.509661}
    assert curve.batches == tuple(steps_per_s)
    for b, rate in steps_per_s.items():
        assert curve(b) == pytest.approx(1 / rate, rel=1e-5)
    per = curve.per_sample()
    assert all(a > b for a, b in zip(per, per[1:], strict=False))    # falls at every measured size
    assert load_profile("k80").shapes["resnet18-cifar"] == [3, 32, 32]


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: [1, 2], r"must be a mapping with name, device, source, models"),
    (lambda d: d.pop("source") and d, r"source: required"),
    (lambda d: d.update(device="  ") or d, r"device: required"),
    (lambda d: d.update(models={}) or d, r"models: required"),
    (lambda d: d.update(colour="red") or d, r"colour: unknown field"),
    (lambda d: d["models"]["mlp"].update(seconds={8: 0.1}) or d, r"models\.mlp\.seconds: needs at least two batch sizes"),
    (lambda d: d["models"]["mlp"].update(seconds={8: 0.1, 16: -1}) or d, r"models\.mlp\.seconds\.16: must be a positive"),
    (lambda d: d["models"]["mlp"].update(seconds={8: 0.1, 0: 0.2}) or d, r"batch size 0 must be an int >= 1"),
    (lambda d: d["models"]["mlp"].update(seconds={8: 0.1, "x": 0.2}) or d, r"batch size 'x'"),
    (lambda d: d["models"]["mlp"].update(seconds={8: 0.1, 16: float("nan")}) or d, r"must be a positive"),
    (lambda d: d["models"]["mlp"].update(shape=[3, 0]) or d, r"models\.mlp\.shape: must be a list of positive"),
    (lambda d: d["models"]["mlp"].update(speed=1) or d, r"models\.mlp\.speed: unknown field"),
    (lambda d: d.update(models={"mlp": [1, 2]}) or d, r"models\.mlp: must be a mapping with `seconds"),
])
def test_a_bad_profile_is_one_line_naming_the_file_and_field(tmp_path: Path, change, message: str) -> None:
    import copy

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(change(copy.deepcopy(GOOD))))
    with pytest.raises(ProfileError, match=message) as info:
        load_profile(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_missing_unreadable_and_unknown_profiles(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"^k90: no such profile file, and not a named profile \(epyc-2core, h100, k80"):
        load_profile("k90")
    with pytest.raises(ProfileError, match=r"no such profile file"):
        load_profile(tmp_path / "absent.yaml")
    (tmp_path / "junk.yaml").write_text("models: [unclosed")
    with pytest.raises(ProfileError, match=r"junk\.yaml: not a readable YAML profile"):
        load_profile(tmp_path / "junk.yaml")
    with pytest.raises(ProfileError, match=r"profile k80: a model entry \(devices\.compute\.profile_model\); it has "
                                           r"inceptionv3-imagenet, resnet18-cifar, resnet50-imagenet"):
        load_profile("k80").curve(None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4096), st.floats(1e-4, 10.0)), min_size=2, max_size=7,
                unique_by=lambda p: p[0]),
       st.floats(0.5, 8192.0))
def test_curve_interpolates_between_points_and_extends_the_end_segments(points, b) -> None:
    points = sorted(points)
    curve = parse_profile({**GOOD, "models": {"m": {"seconds": dict(points)}}}, "h").curve("m")
    for x, y in points:
        assert curve(x) == pytest.approx(y)
    t = curve(b)
    assert t >= 0.01 * min(y for _, y in points) - 1e-12
    inside = [i for i in range(len(points) - 1) if points[i][0] <= b <= points[i + 1][0]]
    if inside:
        (_, y0), (_, y1) = points[inside[0]], points[inside[0] + 1]
        assert min(y0, y1) - 1e-9 <= t <= max(y0, y1) + 1e-9


def test_curve_by_hand() -> None:
    c = Curve((8, 32, 128), (0.01, 0.02, 0.05))
    assert c(20) == pytest.approx(0.015) and c(80) == pytest.approx(0.035)
    assert c(256) == pytest.approx(0.05 + 128 * 0.03 / 96) and c(1) == pytest.approx(0.01 - 7 * 0.01 / 24)
    assert Curve((8, 16), (1.0, 0.1))(10_000) == pytest.approx(0.001)  # never below 1% of the smallest time


def _raw(compute: dict, **over) -> dict:
    raw = merge(SIM_BASE, {"devices": {"count": 2}, **over})
    raw["devices"]["compute"] = compute
    return raw


@pytest.mark.parametrize(("compute", "message"), [
    ({"profile": "k80", "base_s": 0.1}, r"devices\.compute\.profile: give either a compute profile or base_s"),
    ({"profile_model": "mlp"}, r"devices\.compute\.profile_model: names an entry of a compute profile"),
])
def test_profile_config_fields_are_checked(compute: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_dict(_raw(compute))


def test_profile_in_a_config_file_is_checked_at_load_and_resolves_next_to_it(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(GOOD))
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump(_raw({"profile": "mine.yaml", "static": [1, 2]})))
    cfg = load_config(cfg_path)
    assert cfg.devices.compute.profile == str(tmp_path / "mine.yaml")
    assert RunPlan.resolve(cfg).compute.step_seconds(20) == pytest.approx(0.015)
    cfg_path.write_text(yaml.safe_dump(_raw({"profile": "k80", "profile_model": "vgg19"})))
    with pytest.raises(ConfigError, match=r"devices\.compute\.profile_model: profile k80: no entry 'vgg19'; it has"):
        load_config(cfg_path)
    cfg_path.write_text(yaml.safe_dump(_raw({"profile": "nope.yaml"})))
    with pytest.raises(ConfigError, match=r"devices\.compute\.profile: .*nope\.yaml: no such profile file"):
        load_config(cfg_path)


@pytest.mark.parametrize(("entry", "static", "batch"), [("mlp", [1, 3], 32), ("resnet20", [2, 1], 16),
                                                        ("cnn-small", [1.5, 4], 64)])
def test_the_simulator_takes_step_times_from_the_profile(entry: str, static: list[float], batch: int) -> None:
    raw = _raw({"profile": "epyc-2core", "profile_model": entry, "static": static}, stop={"max_steps": 3},
               algorithm={"name": "ddl", "batch": {"policy": "fixed", "size": batch}, "buffer": "persist"})
    curve = load_profile("epyc-2core").curve(entry)
    engine, log = simulate(validate_dict(raw))
    steps = steps_of(log.records)
    assert len(steps) == 6
    for s in steps:
        assert s["compute_s"] == pytest.approx(curve(batch) * static[s["device"]], rel=1e-5)


@pytest.mark.parametrize(("dt", "b", "factor", "expected"), [
    (0.01, 32, 1.0, 0.0), (0.01, 32, 3.0, 0.02), (0.01, 32, 0.5, 0.0)])
def test_emulated_sleep_without_a_profile_scales_the_real_step(dt, b, factor, expected) -> None:
    assert emulated_sleep(dt, b, factor) == pytest.approx(expected)


@pytest.mark.parametrize(("dt", "b", "factor"), [(0.001, 8, 1.0), (0.004, 32, 2.0), (0.5, 128, 1.0), (0.01, 20, 3.5)])
def test_emulated_sleep_with_a_profile_lasts_the_profiled_step(dt, b, factor) -> None:
    curve = Curve((8, 32, 128), (0.01, 0.02, 0.05))
    assert emulated_sleep(dt, b, factor, curve) == pytest.approx(max(0.0, curve(b) * factor - dt))


def test_profile_command_measures_and_writes_a_loadable_profile(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "p", "devices": {"count": 1}, "model": {"name": "mlp"},
                                   "data": {"dataset": "synthetic", "shape": [2, 5, 3], "num_classes": 7,
                                            "n_train": 20, "n_test": 10}}))
    out, png = tmp_path / "mine.yaml", tmp_path / "mine.png"
    res = CliRunner().invoke(app, ["profile", str(cfg), "--batches", "4,16,2", "--repeats", "2", "--out", str(out),
                                   "--plot", str(png)])
    assert res.exit_code == 0, res.output
    prof = load_profile(out)
    curve = prof.curve("mlp")
    assert prof.name == "mine" and curve.batches == (2, 4, 16) and all(s > 0 for s in curve.seconds)
    assert prof.shapes["mlp"] == [2, 5, 3] and "edgestream profile" in prof.source
    assert png.stat().st_size > 1000 and "| 16 |" in res.output
    for args, message in ((["--batches", "8"], "--batches: '8': give at least two batch sizes"),
                          (["--batches", "a,b"], "--batches"), (["--device", "tpu"], "--device: 'tpu'")):
        res = CliRunner().invoke(app, ["profile", str(cfg), *args, "--out", str(out)])
        assert res.exit_code == 2 and message in res.output, res.output
