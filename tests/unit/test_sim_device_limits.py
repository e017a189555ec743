"""devices.count up to 100,000 where memory allows, refused in one line naming devices.count where it
would not (edgestream.sim.footprint; issue 35, item 2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.config import ConfigError, validate_dict
from edgestream.metrics import EventLog
from edgestream.sim.engine import SimConfigError, SimEngine
from edgestream.sim.footprint import HEADROOM, MEMORY_ENV, ONE_REPLICA, bytes_per_device, memory_problem
from edgestream.sync.registry import ALGORITHMS


def config(devices: int, algorithm: str = "ddl", hidden: list[int] | None = None, n_train: int | None = None) -> dict:
    return {
        "name": "limits", "seed": 0,
        "data": {"dataset": "synthetic", "shape": [1, 4, 4], "num_classes": 4,
                 "n_train": n_train or max(4_000, 2 * devices), "n_test": 200, "partition": "iid"},
        "devices": {"count": devices, "rates": {"distribution": "constant", "rate": 50},
                    "compute": {"base_s": 0.01, "per_sample_s": 0.0001}},
        "model": {"name": "mlp", "kwargs": {"hidden": hidden if hidden is not None else [4]}},
        "algorithm": {"name": algorithm, "batch": {"policy": "fixed", "size": 2}},
        "stop": {"max_steps": 2, "max_time_s": 100},
        "eval": {"every_s": 1000},
    }


def test_the_config_allows_100000_devices_and_names_the_field_above():
    assert validate_dict(config(100_000)).devices.count == 100_000
    with pytest.raises(ConfigError, match="devices.count"):
        validate_dict(config(100_001))


@settings(max_examples=60, deadline=None)
@given(algorithm=st.sampled_from(sorted(ALGORITHMS)), devices=st.integers(1, 100_000),
       param_bytes=st.integers(4, 50_000_000), batch_bytes=st.integers(0, 2_000_000),
       available=st.integers(1, 2**40))
def test_a_run_is_refused_exactly_when_its_estimate_exceeds_the_usable_memory(algorithm, devices, param_bytes,
                                                                             batch_bytes, available):
    problem = memory_problem(algorithm, devices, param_bytes // 4, param_bytes, batch_bytes, available=available)
    per = bytes_per_device(algorithm, param_bytes, batch_bytes)
    assert (problem is not None) == (devices * per > int(available * HEADROOM))
    if problem is not None:
        assert problem.startswith(f"devices.count: {devices:,} devices of {algorithm}")
        assert "\n" not in problem
        at_most = int(problem.split("at most ")[1].split(" devices")[0].replace(",", ""))
        assert at_most == max(1, int(available * HEADROOM) // per)
        assert memory_problem(algorithm, at_most, param_bytes // 4, param_bytes, batch_bytes,
                              available=available) is None or at_most == 1


def test_per_worker_replicas_cost_more_per_device_than_one_replica():
    assert "ddl" in ONE_REPLICA and "local-sgd" not in ONE_REPLICA
    assert bytes_per_device("local-sgd", 70_000) > bytes_per_device("ddl", 70_000)


@pytest.mark.parametrize(("algorithm", "devices", "hidden"), [("ddl", 2_000, [128, 64]),
                                                              ("local-sgd", 500, [32]),
                                                              ("scadles", 50_000, [4])])
def test_the_engine_refuses_a_run_that_would_not_fit_before_building_devices(monkeypatch, algorithm, devices,
                                                                               hidden):
    monkeypatch.setenv(MEMORY_ENV, str(20 * 2**20))  # 20 MiB for the run
    cfg = config(devices, algorithm, hidden, n_train=4_000)
    with pytest.raises(SimConfigError) as err:
        SimEngine(validate_dict(cfg), EventLog(None))
    (line,) = err.value.problems
    assert line.startswith(f"devices.count: {devices:,} devices of {algorithm}")
    assert "at most" in line


@pytest.mark.parametrize("value", ["lots", "-5", "0"])
def test_a_bad_memory_setting_is_named(monkeypatch, value):
    monkeypatch.setenv(MEMORY_ENV, value)
    with pytest.raises(ValueError, match=MEMORY_ENV):
        memory_problem("ddl", 10, 10, 40)


def test_twenty_thousand_devices_of_a_tiny_model_run(monkeypatch):
    monkeypatch.delenv(MEMORY_ENV, raising=False)
    engine = SimEngine(validate_dict(config(20_000)), EventLog(None))
    engine.run()
    assert engine.stats.device_steps == 2 * 20_000
    assert engine.stop_reason == "max_steps"


def test_more_devices_than_samples_run_when_they_share_samples():
    """300 devices on a 100-sample set: refused naming data.share_samples; with it, each device streams one
    sample (each sample on 3 devices), and the run trains (issue 35: 10,000 devices on digits' 1,438)."""
    from edgestream.config.check import check_runnable
    from edgestream.runner.plan import RunPlan

    cfg = config(300, hidden=[16], n_train=100)
    cfg["data"].update(signal=5)
    cfg["stop"] = {"max_steps": 15, "max_time_s": 100}
    cfg["eval"] = {"every_s": 0.5}
    assert check_runnable(validate_dict(cfg)) == [
        "devices.count: 300 devices but only 100 train samples; every device needs at least one: set "
        "share_samples (data.share_samples: true) to let devices share samples, or use at most 100 devices"]
    cfg["data"]["share_samples"] = True
    events = EventLog(None)
    engine = SimEngine(validate_dict(cfg), events)
    shards = engine.data.shards
    assert len(shards) == 300 and all(len(s) == 1 for s in shards)
    # the Kafka producers stream the plan's shards (RunPlan.producer): the same split
    producers = RunPlan.resolve(validate_dict(cfg)).shards
    assert all(np.array_equal(a, b) for a, b in zip(shards, producers, strict=True))
    assert sorted(np.bincount(np.concatenate(shards), minlength=100).tolist()) == [3] * 100
    engine.run()
    assert min(c.step for c in engine.contexts) == 15
    first, last = events.evals[0][1], events.evals[-1][1]
    assert first < 0.4 and last > 0.6, events.evals  # 4 classes: chance 0.25
