"""The run plan: the one place a config is interpreted (runner/plan.py), and what every host takes from it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgestream.config import validate_dict
from edgestream.runner import engines
from edgestream.runner.engines import EngineError, check_runs
from edgestream.runner.plan import PlanError, RunPlan
from edgestream.sync.registry import ALGORITHMS, get_algorithm

PKG = Path(__file__).resolve().parents[2] / "edgestream"

#: modules allowed to read a config's sections: the schema itself, the plan (and its optimizer warnings), and
#: the comparison (edgestream/comparisons.py: it writes variant configs, it does not run them)
READS_CONFIG = {"config/load.py", "config/check.py", "runner/plan.py", "runner/optim_notes.py",
                "comparisons.py"}
#: config sections whose reading is interpretation (runtime.* only says where things are: broker, out dir)
SECTIONS = {"data", "devices", "algorithm", "optim", "compression", "stop", "eval", "model", "checkpoint", "seed"}
#: builders of a run's pieces from config values: only the plan calls them (and their own packages)
BUILDERS = {"load_dataset": {"data/"}, "partition_indices": {"data/"}, "build_rate_model": {"streams/"},
            "WorkerContext": {"sync/"}, "ServerContext": {"sync/"}}


def _modules() -> list[tuple[str, ast.AST]]:
    return [(p.relative_to(PKG).as_posix(), ast.parse(p.read_text())) for p in sorted(PKG.rglob("*.py"))]


def _config_name(node: ast.AST) -> bool:
    """`cfg`, `config`, `self.cfg`, `vcfg`: what the code calls an ExperimentConfig."""
    if isinstance(node, ast.Name):
        return node.id in ("cfg", "config", "vcfg")
    return isinstance(node, ast.Attribute) and node.attr == "cfg" and isinstance(node.value, ast.Name)


def test_config_is_interpreted_only_in_the_plan() -> None:
    """Fails when a module outside runner/plan.py and config/ reads a config section, builds a dataset,
    shards, a rate model or a worker/server context itself, or when sync/ grows a from_config again (the
    four copies of the dataset construction, one of which drifted, were how >10 classes broke)."""
    reads, builds, from_config = [], [], []
    for rel, tree in _modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in SECTIONS and _config_name(node.value)
                    and rel not in READS_CONFIG):
                reads.append(f"{rel}:{node.lineno} reads .{node.attr}")
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
                if name in BUILDERS and rel != "runner/plan.py" and not any(rel.startswith(d) for d in BUILDERS[name]) \
                        and rel not in ("config/check.py",):
                    builds.append(f"{rel}:{node.lineno} calls {name}(")
            if isinstance(node, ast.FunctionDef) and node.name == "from_config" and rel.startswith(("sync/", "sim/",
                                                                                                 "runner/")):
                from_config.append(f"{rel}:{node.lineno}")
    assert not reads, "config read outside the plan: " + "; ".join(reads)
    assert not builds, "run pieces built outside the plan: " + "; ".join(builds)
    assert not from_config, "from_config outside the plan: " + "; ".join(from_config)


def test_worker_and_server_contexts() -> None:
    cfg = validate_dict({"devices": {"count": 3}, "algorithm": {"name": "abs-sgd", "params": {"lambda": 0.25}},
                         "optim": {"lr": 0.05, "momentum": 0.5}, "compression": {"name": "topk", "ratio": 0.2},
                         "stop": {"max_steps": 7}})
    plan = RunPlan.resolve(cfg)
    ctx = plan.worker_context(2)
    assert (ctx.rank, ctx.world_size, ctx.lr, ctx.max_steps) == (2, 3, 0.05, 7)
    assert ctx.params == {"ref_batch": 32, "lambda": 0.25}
    assert ctx.compression["name"] == "topk" and ctx.compression["ratio"] == 0.2
    server = RunPlan.resolve(validate_dict({"devices": {"count": 4}, "algorithm": {"name": "ssp"},
                                            "optim": {"momentum": 0.0}})).server_context()
    assert (server.world_size, server.momentum, server.params) == (4, 0.0, get_algorithm("ssp").defaults)
    with pytest.raises(ValueError, match="algorithm.params.tau"):  # the config rejects it at load time
        validate_dict({"algorithm": {"name": "local-sgd", "params": {"tau": 0}}})
    bad = validate_dict({"algorithm": {"name": "local-sgd"}})
    bad.algorithm.params = {"tau": 0}  # and the plan checks again for configs built in code
    with pytest.raises(PlanError, match="algorithm.params.tau"):
        RunPlan.resolve(bad)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_default_batch_is_declared_by_the_algorithm(name: str) -> None:
    spec = get_algorithm(name)
    plan = RunPlan.resolve(validate_dict({"algorithm": {"name": name}}))
    assert plan.batch == dict(spec.default_batch)
    assert spec.default_batch["policy"] in spec.batch_policies
    fixed = {"policy": "fixed", "size": 16}
    # a comparison keeps a suitable policy and replaces an unsuitable one by the algorithm's own default
    assert spec.suited_batch(fixed) == (fixed if "fixed" in spec.batch_policies else dict(spec.default_batch))
    if name == "scadles":
        assert spec.default_batch == {"policy": "rate", "min": 8, "max": 1024}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(classes=st.integers(2, 40), c=st.integers(1, 3), h=st.integers(4, 9), w=st.integers(4, 9),
       n_train=st.integers(60, 300), devices=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_dataset_spec_and_shards_agree(classes: int, c: int, h: int, w: int, n_train: int, devices: int,
                                       seed: int) -> None:
    """The sample spec the consumer validates against is the dataset's own (any class count, shape, size),
    and the shards cover the training split once."""
    cfg = validate_dict({"seed": seed, "data": {"dataset": "synthetic", "shape": [c, h, w], "num_classes": classes,
                                                "n_train": n_train, "n_test": 40},
                         "devices": {"count": devices}})
    plan = RunPlan.resolve(cfg)
    ds, spec = plan.dataset, plan.sample_spec
    assert ds is plan.dataset  # loaded once
    assert spec.num_classes == ds.num_classes == classes
    assert tuple(spec.shape) == tuple(ds.shape) == (c, h, w)
    assert int(ds.y_train.max()) < spec.num_classes and len(ds.y_train) == n_train
    assert sorted(np.concatenate(plan.shards).tolist()) == list(range(n_train))
    assert len(plan.shards) == devices


def test_bad_dataset_names_the_field() -> None:
    cfg = validate_dict({"data": {"dataset": "synthetic", "n_train": 20}, "devices": {"count": 64}})
    with pytest.raises(PlanError, match="data|devices"):
        _ = RunPlan.resolve(cfg).shards


def test_engine_capabilities_decide_what_runs_where() -> None:
    import edgestream.launch  # noqa: F401  (registers "local")
    import edgestream.sim  # noqa: F401  (registers "sim")

    for spec in ALGORITHMS.values():
        check_runs("sim", spec)  # the simulator performs every request kind
        check_runs("local", spec)  # trainers perform collectives, and Push/Pull through the Kafka PS
    from edgestream.sync.requests import COLLECTIVE_REQUESTS, PS_REQUESTS, REQUESTS

    engines.register_engine("collectives-only", lambda cfg, **kw: (Path("."), {}),
                            performs=REQUESTS - PS_REQUESTS)
    try:
        for spec in ALGORITHMS.values():
            if spec.family == "ps":
                with pytest.raises(EngineError, match=r"cannot run .* Pull, Push; engines that can: local, sim"):
                    check_runs("collectives-only", spec)
            else:
                assert not spec.requests & PS_REQUESTS and spec.requests & COLLECTIVE_REQUESTS or spec.name
                check_runs("collectives-only", spec)
    finally:
        engines.unregister_engine("collectives-only")
    engines.register_engine("bare", lambda cfg, **kw: (Path("."), {}), performs=frozenset())
    try:
        with pytest.raises(EngineError, match="does not perform .*TakeBatch"):
            check_runs("bare", get_algorithm("ddl"))
    finally:
        engines.unregister_engine("bare")


@pytest.mark.parametrize(("classes", "shape", "algorithm"), [(3, [1, 5, 7], "ddl"), (17, [2, 6, 6], "scadles"),
                                                             (12, [1, 8, 8], "local-sgd")])
def test_lockstep_engine_runs_a_plan(classes: int, shape: list[int], algorithm: str) -> None:
    """The lockstep engine takes model, data, policies and contexts from the plan, for any class count and
    shape; synchronous algorithms keep the replicas identical."""
    from edgestream.runner.lockstep import LockstepEngine

    cfg = validate_dict({"seed": 1, "data": {"dataset": "synthetic", "shape": shape, "num_classes": classes,
                                             "n_train": 300, "n_test": 50},
                         "devices": {"count": 3, "rates": {"distribution": "uniform", "low": 20, "high": 90}},
                         "model": {"name": "mlp"}, "algorithm": {"name": algorithm, "params": (
                             {"tau": 2} if algorithm == "local-sgd" else {})},
                         "stop": {"max_steps": 4}})
    plan = RunPlan.resolve(cfg)
    engine = LockstepEngine.from_plan(plan)
    ctxs = [plan.worker_context(r, should_stop=lambda completed: completed >= 4) for r in range(plan.world)]
    engine.run([plan.algorithm.worker(c) for c in ctxs])
    assert [c.step for c in ctxs] == [4, 4, 4]
    assert all(e["batch"] > 0 for e in engine.events if "batch" in e)
    import torch

    first = engine.params(0)
    for rank in (1, 2):
        assert all(torch.equal(a, b) for a, b in zip(first, engine.params(rank), strict=True))
    assert int(first[-1].shape[0]) == classes  # the output layer is sized by the plan's dataset
