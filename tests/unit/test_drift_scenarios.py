"""devices.drift: drift scenarios of a run's own streams (edgestream.streams.drift), as the simulator's data makes
them (the producer's side, read back from Kafka: tests/system/test_drift_streams.py), the drift_start events,
what `config show` and `edgestream rates` say, and the settings refused in one line naming the field."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import SIM_BASE, cfg_of, merge, simulate
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.config import ConfigError, validate_dict
from edgestream.data.order import ShardOrder
from edgestream.runner.plan import PlanError, RunPlan
from edgestream.sim.data import SimData
from edgestream.streams.drift import DriftedOrder

REGRESSION = {"task": "regression", "data": {"dataset": "synthetic", "shape": [6], "n_train": 600},
              "stop": {"target_accuracy": None, "max_steps": 10}}


def _plan(drift: list[dict], *, count: int = 4, seed: int = 3, **over) -> RunPlan:
    return RunPlan.resolve(cfg_of(seed=seed, devices={"count": count, "drift": drift}, **over))


def _undrifted(plan: RunPlan) -> SimData:
    return SimData(plan.dataset, plan.shards, plan.seed)


def _samples(plan: RunPlan, device: int, n: int) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    """(dataset-or-drifted indices, normalised inputs, targets) of the device's first n samples in the simulator."""
    data = SimData(plan.dataset, plan.shards, plan.seed, plan.drift_scenario)
    idx = data.stream_indices(device, 0, n)
    x, y = data.rows(idx)
    assert np.array_equal(data.labels(idx), y.numpy())  # the labels the step lines' labels_crc reads
    return idx, x, y


# ---------------------------------------------------------------- each kind, abrupt and gradual


@pytest.mark.parametrize("seed,count", [(3, 2), (11, 4), (29, 7)])
def test_label_swap_abrupt_permutes_the_labels_from_the_sample_on(seed: int, count: int) -> None:
    drifted = [d for d in range(count) if d % 2 == 0]
    plan = _plan([{"at_sample": 40, "devices": drifted, "kind": "label_swap"}], count=count, seed=seed)
    perm = plan.drift_scenario.scenarios[0].permutation
    assert sorted(perm.tolist()) == list(range(10)) and (perm != np.arange(10)).all()  # a derangement
    base = _undrifted(plan)
    for d in range(count):
        _, x, y = _samples(plan, d, 120)
        bx, by = base.rows(base.stream_indices(d, 0, 120))
        assert torch.equal(x, bx)  # the inputs are the same samples
        want = by.clone()
        if d in drifted:
            want[40:] = torch.from_numpy(perm)[by[40:]]
        assert torch.equal(y, want), d


def test_label_swap_pairs_and_permutation() -> None:
    plan = _plan([{"at_sample": 0, "devices": [0], "kind": "label_swap", "swap": [[0, 1], [2, 3]]},
                  {"at_sample": 0, "devices": [1], "kind": "label_swap", "permutation": [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]}])
    base = _undrifted(plan)
    _, _, y0 = _samples(plan, 0, 200)
    _, _, y1 = _samples(plan, 1, 200)
    b0 = base.rows(base.stream_indices(0, 0, 200))[1]
    b1 = base.rows(base.stream_indices(1, 0, 200))[1]
    assert torch.equal(y0, torch.tensor([1, 0, 3, 2, 4, 5, 6, 7, 8, 9])[b0])
    assert torch.equal(y1, 9 - b1)


@pytest.mark.parametrize("seed", [1, 8])
def test_input_shift_scale_offset_noise(seed: int) -> None:
    plan = _plan([{"at_sample": 30, "devices": [1], "kind": "input_shift", "scale": 0.5, "offset": 2.0},
                  {"at_sample": 60, "devices": [2], "kind": "input_shift", "noise": 3.0}], seed=seed)
    ds, base = plan.dataset, _undrifted(plan)
    idx = base.stream_indices(1, 0, 100)
    raw = ds.x_train[idx].astype(np.float64)
    want = np.clip(np.rint(raw * 0.5 + 2.0), 0, 255) if ds.x_train.dtype.kind in "iu" else raw * 0.5 + 2.0
    _, x, y = _samples(plan, 1, 100)
    expected = ds.normalize(torch.from_numpy(want.astype(ds.x_train.dtype)))
    assert torch.equal(x[30:], expected[30:]) and torch.equal(x[:30], expected[:30]) is False
    assert torch.equal(x[:30], base.rows(idx[:30])[0])
    _, xn, yn = _samples(plan, 2, 100)
    bx, by = base.rows(base.stream_indices(2, 0, 100))
    assert torch.equal(xn[:60], bx[:60]) and torch.equal(yn, by)
    changed = (xn[60:] != bx[60:]).float().mean().item()
    assert changed > 0.5  # noise of std 3 raw units moves most values (some are clipped at the bounds)


def test_class_prior_draws_the_weighted_classes_from_the_devices_shard() -> None:
    weights = [0, 0, 0, 1, 0, 0, 0, 3, 0, 0]
    plan = _plan([{"at_sample": 50, "devices": [0, 3], "kind": "class_prior", "weights": weights}], seed=5)
    base = _undrifted(plan)
    for d in (0, 3):
        idx, _, y = _samples(plan, d, 2050)
        assert torch.equal(y[:50], base.rows(base.stream_indices(d, 0, 50))[1])
        after = y[50:].numpy()
        assert set(np.unique(after)) == {3, 7}
        assert 0.68 < (after == 7).mean() < 0.82  # 3:1 weights over 2000 draws
        shard = set(plan.shards[d].tolist())
        order = DriftedOrder(ShardOrder(plan.shards[d], plan.seed, d), plan.drift_scenario, d)
        picked = [order.index(k) for k in range(50, 250)]  # the producer's order: dataset indices of the shard
        assert set(picked) <= shard
        assert [int(plan.dataset.y_train[i]) for i in picked] == after[:200].tolist()


@pytest.mark.parametrize("kind,params", [("label_swap", {}), ("input_shift", {"offset": 40.0}),
                                         ("class_prior", {"weights": [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]})])
def test_gradual_changes_rise_from_none_to_all(kind: str, params: dict) -> None:
    # 100 samples/s: at_s 2 -> sample 200, over_s 4 -> every sample from 600 on is of the new concept
    plan = _plan([{"at_s": 2.0, "devices": [1], "kind": kind, "over_s": 4.0, **params}], seed=7)
    change = plan.drift_scenario.changes(1)[0]
    assert (change.begin, change.end, change.begin_s, change.end_s) == (200, 600, 2.0, 6.0)
    base = _undrifted(plan)
    _, x, y = _samples(plan, 1, 800)
    bx, by = base.rows(base.stream_indices(1, 0, 800))
    new = ((x != bx).flatten(1).any(1) | (y != by)).numpy()
    assert not new[:201].any() and new[600:].mean() > 0.85
    early, late = new[201:400].mean(), new[400:600].mean()
    assert 0.05 < early < late < 0.95, (early, late)


@pytest.mark.parametrize("target", [None, "user"])
def test_regression_label_swap_is_a_new_target_function(tmp_path: Path, target: str | None) -> None:
    entry = {"at_sample": 20, "devices": "all", "kind": "label_swap"}
    if target:
        pkg = tmp_path / "userdrift_reg"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("def target(x, y):\n    return y * 2.0 + x[:, 0]\n")
        sys.path.insert(0, str(tmp_path))
        entry["target"] = "userdrift_reg:target"
    try:
        plan = RunPlan.resolve(cfg_of(devices={"count": 3, "drift": [entry]}, **REGRESSION))
        base = _undrifted(plan)
        for d in range(3):
            idx, _, y = _samples(plan, d, 60)
            bi = base.stream_indices(d, 0, 60)
            by = base.rows(bi)[1]
            raw = plan.dataset.x_train[bi]
            want = -by[20:] if target is None else (by[20:] * 2.0 + torch.from_numpy(raw[20:, 0]).to(by.dtype))
            assert torch.equal(y[:20], by[:20]) and torch.allclose(y[20:], want)
    finally:
        if target:
            sys.path.remove(str(tmp_path))


def test_a_users_transform_by_import_path(tmp_path: Path) -> None:
    pkg = tmp_path / "userdrift_tf"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import numpy as np\n\ndef flip(x):\n    return np.ascontiguousarray(x[..., ::-1])\n")
    sys.path.insert(0, str(tmp_path))
    try:
        plan = _plan([{"at_sample": 10, "devices": [0], "kind": "input_shift", "transform": "userdrift_tf:flip"}])
        base = _undrifted(plan)
        _, x, _ = _samples(plan, 0, 40)
        bx = base.rows(base.stream_indices(0, 0, 40))[0]
        assert torch.equal(x[:10], bx[:10]) and torch.equal(x[10:], bx[10:].flip(-1))
        (pkg / "bad.py").write_text("def shrink(x):\n    return x.reshape(len(x), -1)\n")
        with pytest.raises(PlanError) as err:
            _plan([{"at_sample": 10, "kind": "input_shift", "transform": "userdrift_tf.bad:shrink"}])
        assert err.value.problems[0].startswith("devices.drift[0].transform: userdrift_tf.bad:shrink returned shape")
    finally:
        sys.path.remove(str(tmp_path))


# ---------------------------------------------------------------- determinism


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), start=st.integers(0, 3000), n=st.integers(1, 200), split=st.integers(0, 200))
def test_samples_do_not_depend_on_how_they_are_batched(seed: int, start: int, n: int, split: int) -> None:
    plan = _cached_plan(seed % 4)
    drift = plan.drift_scenario
    data = SimData(plan.dataset, plan.shards, plan.seed, drift)
    split = min(split, n)
    for d in range(3):
        whole = data.stream_indices(d, start, start + n)
        parts = np.concatenate([data.stream_indices(d, start, start + split),
                                data.stream_indices(d, start + split, start + n)])
        xw, yw = data.rows(whole)
        xp, yp = data.rows(parts)
        assert torch.equal(xw, xp) and torch.equal(yw, yp)
        # the producer's path: one sample at a time, through the same functions
        k = start + split % n
        order = DriftedOrder(ShardOrder(plan.shards[d], plan.seed, d), drift, d) if drift.picks(d) else \
            ShardOrder(plan.shards[d], plan.seed, d)
        i = order.index(k)
        x1, y1 = drift.apply(d, np.array([k]), plan.dataset.x_train[i][None], np.asarray(plan.dataset.y_train[i])[None])
        assert torch.equal(plan.dataset.normalize(torch.from_numpy(x1)), xw[k - start:k - start + 1])
        assert int(y1[0]) == int(yw[k - start])


_PLANS: dict[int, RunPlan] = {}


def _cached_plan(seed: int) -> RunPlan:
    if seed not in _PLANS:
        _PLANS[seed] = _plan([{"at_s": 5.0, "devices": [0, 1], "kind": "label_swap", "over_s": 10.0},
                              {"at_sample": 700, "devices": [1, 2], "kind": "input_shift", "noise": 2.0, "over_s": 3},
                              {"at_sample": 1500, "devices": [2], "kind": "class_prior",
                               "weights": [1, 2, 3, 4, 5, 0, 0, 0, 0, 1]}], count=3, seed=seed)
    return _PLANS[seed]


def test_no_drift_costs_nothing() -> None:
    plan = RunPlan.resolve(cfg_of())
    assert plan.drift_scenario is None
    data = SimData(plan.dataset, plan.shards, plan.seed, plan.drift_scenario)
    idx = data.stream_indices(0, 0, 64)
    assert not idx.flags.writeable  # the read-only fast path, no copy
    assert "drift" not in plan.stream_identity()["devices"]
    drifted = _plan([{"at_sample": 10, "kind": "label_swap"}])
    assert drifted.stream_identity()["devices"]["drift"] == [{"at_sample": 10, "devices": "all", "kind": "label_swap"}]


# ---------------------------------------------------------------- drift_start events


@pytest.mark.parametrize("algorithm,batch", [("ddl", {"policy": "fixed", "size": 32}),
                                             ("scadles", {"policy": "rate", "min": 8, "max": 64})])
def test_drift_start_is_recorded_once_per_change_and_device(algorithm: str, batch: dict) -> None:
    cfg = cfg_of(devices={"count": 3, "drift": [
        {"at_s": 1.0, "devices": [0, 2], "kind": "label_swap"},
        {"at_sample": 150, "devices": [2], "kind": "input_shift", "noise": 1.0, "over_s": 0.5}]},
        algorithm={"name": algorithm, "batch": batch}, stop={"max_steps": 12})
    _, events = simulate(cfg)
    starts = [r for r in events.records if r.get("kind") == "drift_start"]
    got = sorted((r["device"], r["scenario"], r["drift"]) for r in starts)
    assert got == [(0, 0, "label_swap"), (2, 0, "label_swap"), (2, 1, "input_shift")]
    steps = [r for r in events.records if r.get("kind") == "step"]
    for r in starts:
        begin = 100 if r["scenario"] == 0 else 150
        assert r["seq"] >= begin and r["due_s"] >= (1.0 if r["scenario"] == 0 else 1.5)
        # the step that took it is the first whose samples reach the begin
        first = next(s for s in steps if s["device"] == r["device"] and s["seq_last"] >= begin)
        assert first["seq_first"] <= r["seq"] <= first["seq_last"] and r["time"] <= first["time"]


def test_drift_watch_after_a_resume_does_not_record_again() -> None:
    from edgestream.streams.drift import Change, DriftWatch

    seen: list[tuple[int, int]] = []
    changes = [Change(0, "label_swap", 0, 100, 100, 1.0, 1.0), Change(1, "class_prior", 0, 300, 300, 3.0, 3.0)]
    watch = DriftWatch(changes, lambda c, seq, t: seen.append((c.scenario, seq)))
    watch.resumed()
    watch.note(np.arange(150, 182), 2.0)  # resumed past the first change: recorded by the first life
    watch.note(np.array([290, 305, 301]), 3.1)
    assert seen == [(1, 301)]


def test_lockstep_engine_refuses_drift(tmp_path: Path) -> None:
    from edgestream.runner.lockstep_run import run_lockstep

    with pytest.raises(PlanError, match=r"^devices.drift: the lockstep engine"):
        run_lockstep(cfg_of(devices={"drift": [{"at_sample": 5, "kind": "label_swap"}]}), out=tmp_path)


# ---------------------------------------------------------------- bad settings, one line naming the field


def _problems(raw: dict) -> list[str]:
    try:
        RunPlan.resolve(validate_dict(raw))
    except ConfigError as exc:
        return exc.problems
    except PlanError as exc:
        return exc.problems
    return []


@pytest.mark.parametrize("entry,over,line", [
    ({"at_s": 1, "devices": [9], "kind": "label_swap"}, {},
     "devices.drift[0].devices: device 9 does not exist (devices.count is 4)"),
    ({"at_s": 1, "at_sample": 3, "kind": "label_swap"}, {},
     "devices.drift[0].at_s: give exactly one of at_s, at_sample, at_step (got at_s, at_sample)"),
    ({"kind": "label_swap"}, {}, "devices.drift[0].at_s: give exactly one of at_s, at_sample, at_step (got none)"),
    ({"at_s": 1, "kind": "label_swap", "permutation": [0, 1, 2]}, {},
     "devices.drift[0].permutation: [0, 1, 2] is not a permutation of the 10 classes 0..9"),
    ({"at_s": 1, "kind": "label_swap", "swap": [[0, 12]]}, {},
     "devices.drift[0].swap: class 12 does not exist (data.num_classes is 10)"),
    ({"at_s": 1, "kind": "label_swap", "noise": 1.0}, {},
     "devices.drift[0].noise: not a param of kind 'label_swap' (it takes permutation, swap, target)"),
    ({"at_s": 1, "kind": "class_prior", "weights": [1, 2]}, {},
     "devices.drift[0].weights: 2 weights; must be one per class (data.num_classes is 10)"),
    ({"at_s": 1, "kind": "class_prior", "weights": [0] * 10}, {},
     "devices.drift[0].weights: [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0] is not allowed; must be >= 0 "
     "with at least one > 0"),
    ({"at_s": 1, "kind": "class_prior", "weights": [1] * 6}, REGRESSION,
     "devices.drift[0].kind: class_prior changes the mixture of classes; this task has no classes (regression: use "
     "label_swap with target, or input_shift)"),
    ({"at_s": 1, "kind": "input_shift"}, {},
     "devices.drift[0].scale: input_shift needs scale, offset, noise or transform"),
    ({"at_s": 1, "kind": "input_shift", "transform": "no_such_pkg_x:fn"}, {},
     "devices.drift[0].transform: cannot import module 'no_such_pkg_x'"),
    ({"at_step": 3, "kind": "label_swap"}, {"algorithm": {"name": "scadles", "batch": {"policy": "rate"}}},
     "devices.drift[0].at_step: batch policy 'rate' sizes each batch as the stream goes, so a step has no fixed "
     "sample; use at_s or at_sample (or a fixed batch policy)"),
    ({"at_s": 1, "kind": "label_swap", "over_s": 0}, {}, "devices.drift[0].over_s: 0 is not allowed; must be > 0"),
    ({"at_s": 1, "kind": "label_swap", "target": "pkg.mod:fn"}, {},
     "devices.drift[0].target: a new target function is for regression; a classification label_swap takes "
     "permutation or swap"),
    ({"at_s": 1, "kind": "label_swap", "swap": [[0, 1]]}, REGRESSION,
     "devices.drift[0].swap: a regression task has no classes to swap; give target"),
    ({"at_s": 1, "kind": "label_swap", "swap": [[0, 1]], "permutation": [1, 0]}, {},
     "devices.drift[0].permutation: give one of permutation, swap (classification) or target (regression)"),
    ({"at_s": 1, "kind": "input_shift", "transform": "pkg.mod:fn", "scale": 2}, {},
     "devices.drift[0].transform: give a transform alone (not with scale, offset or noise)"),
    ({"at_s": 1, "devices": [], "kind": "label_swap"}, {},
     'devices.drift[0].devices: an empty list; give device numbers or "all"'),
])
def test_bad_settings_are_refused_in_one_line(entry: dict, over: dict, line: str) -> None:
    problems = _problems(merge(SIM_BASE, merge(over, {"devices": {"drift": [entry]}})))
    assert len(problems) == 1 and problems[0].startswith(line), problems


def test_class_prior_on_classes_a_device_does_not_hold() -> None:
    raw = merge(SIM_BASE, {"data": {"partition": "labels", "labels_per_device": 3},
                           "devices": {"drift": [{"at_s": 1, "kind": "class_prior",
                                                  "weights": [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]}]}})
    problems = _problems(raw)
    assert len(problems) == 1 and "shard holds none of the classes weighted > 0 (it holds" in problems[0], problems
    assert problems[0].startswith("devices.drift[0].weights: device ")


def test_external_streams_take_no_drift() -> None:
    raw = {"name": "ext", "task": "classification", "data": {"shape": [4], "num_classes": 3},
           "devices": {"count": 2, "drift": [{"at_s": 1, "kind": "label_swap"}]},
           "streams": {"source": "external", "topic": "sensors"}, "runtime": {"engine": "local"},
           "eval": {"holdout": 0.1}}
    problems = _problems(raw)
    assert problems == ["devices.drift: external streams drift by themselves (their records are what the devices "
                        "send): nothing to configure; remove devices.drift"], problems


# ---------------------------------------------------------------- what the tools say


def _write(tmp_path: Path) -> Path:
    import yaml

    raw = merge(SIM_BASE, {"devices": {"count": 3, "drift": [
        {"at_s": 2.5, "devices": [0, 2], "kind": "label_swap", "swap": [[0, 1]]},
        {"at_step": 4, "kind": "input_shift", "noise": 0.3, "over_s": 1.5}]}})
    path = tmp_path / "drift.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


WANT = ["  device 0: drift[0] label_swap: abrupt at sample 250 (2.500 s)",
        "  device 0: drift[1] input_shift: gradual from sample 128 (1.280 s) to 278 (2.780 s), over_s 1.5",
        "  device 1: drift[1] input_shift: gradual from sample 128 (1.280 s) to 278 (2.780 s), over_s 1.5",
        "  device 2: drift[0] label_swap: abrupt at sample 250 (2.500 s)",
        "  device 2: drift[1] input_shift: gradual from sample 128 (1.280 s) to 278 (2.780 s), over_s 1.5"]


def test_config_show_says_when_each_change_happens(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["config", "show", str(_write(tmp_path))])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    head = lines.index("# devices.drift, per device: the sample each change begins at and the one from which every "
                       "sample is of the new concept, with their due times (seconds of stream time)")
    assert lines[head + 1:head + 6] == [f"# {w}" for w in WANT]
    assert "  - at_step: 4" in lines and "    noise: 0.3" in lines  # the entries as given, without the unset params


def test_rates_tool_says_when_each_change_happens(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["rates", str(_write(tmp_path)), "--duration", "5"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[-5:] == WANT


def test_a_transform_beside_the_config_file_drives_a_simulated_run(tmp_path: Path) -> None:
    """The user's package next to the config (the config's folder is searched, as for other plugins)."""
    import yaml

    from edgestream.config import load_config

    (tmp_path / "dimmer_drift").mkdir()
    (tmp_path / "dimmer_drift" / "__init__.py").write_text("def dim(x):\n    return (x // 2).astype(x.dtype)\n")
    raw = merge(SIM_BASE, {"devices": {"count": 2, "drift": [
        {"at_sample": 50, "devices": [1], "kind": "input_shift", "transform": "dimmer_drift:dim"}]},
        "stop": {"max_steps": 6}})
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    cfg = load_config(tmp_path / "run.yaml")
    _, events = simulate(cfg)
    starts = [r for r in events.records if r.get("kind") == "drift_start"]
    assert [(r["device"], r["seq"], r["drift"]) for r in starts] == [(1, 50, "input_shift")]
    plan = RunPlan.resolve(cfg)
    data, base = SimData(plan.dataset, plan.shards, plan.seed, plan.drift_scenario), _undrifted(plan)
    raw_x = plan.dataset.x_train[base.stream_indices(1, 50, 60)]
    assert torch.equal(data.rows(data.stream_indices(1, 50, 60))[0], plan.dataset.normalize(raw_x // 2))
