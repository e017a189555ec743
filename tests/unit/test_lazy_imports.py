"""What a process imports to start: the orchestrator, the producer and `config`'s schema need no torch,
matplotlib or scipy (each costs every process seconds of CPU); the packages' names load on first use
(edgestream/lazy.py) and each still names what it always named."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from support.sources import BLOCKED_IMPORTS

import edgestream

LAZY = ["edgestream", "edgestream.config", "edgestream.runner", "edgestream.metrics", "edgestream.data", "edgestream.producers", "edgestream.consumers",
        "edgestream.sync", "edgestream.models", "edgestream.compression", "edgestream.trainer", "edgestream.drift"]


@pytest.mark.parametrize(("algorithm", "data", "devices"), [
    ("ddl", "{dataset: digits}", 3),
    ("scadles", "{dataset: synthetic, shape: [2, 5, 7], num_classes: 4, n_train: 300, n_test: 60}", 5),
    ("ssp", "{dataset: synthetic, shape: [12], num_classes: 3, n_train: 200, n_test: 40}", 2),
    ("adsp", "{dataset: digits}", 4),
    ("elastic-bsp", "{dataset: synthetic, shape: [3, 16], n_train: 200, n_test: 40}", 3),
    ("local-sgd", "{dataset: synthetic, shape: [6], n_train: 200, n_test: 40, kwargs: {target_dim: 2}}\n"
                  "task: regression", 1),
])
def test_the_orchestrator_and_the_producer_start_without_torch(tmp_path, algorithm, data, devices):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: c\ndata: {data}\ndevices: {{count: {devices}}}\nalgorithm: {{name: {algorithm}}}\n")
    code = BLOCKED_IMPORTS + textwrap.dedent(f"""
        import edgestream.launch, edgestream.launch.command, edgestream.producers.stream_producer
        from edgestream.config import load_config
        from edgestream.runner.plan import RunPlan
        from edgestream.runner.engines import check_runs
        plan = RunPlan.resolve(load_config({str(cfg)!r}))
        check_runs("local", plan.algorithm)
        serde = plan.serde
        x = plan.dataset.x_train[0]
        y = plan.dataset.y_train[0]
        value = serde.encode(x, y if y.ndim else y.item(), 0, 0, 0.0)
        assert len(value) == serde.message_bytes
        print("ok", plan.algorithm.family)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr[-2000:]


def test_every_lazy_name_is_what_its_module_defines():
    for info in pkgutil.walk_packages(edgestream.__path__, "edgestream."):
        importlib.import_module(info.name)  # a submodule imported binds its name in the package...
    for name in LAZY:
        pkg = importlib.import_module(name)
        exports = pkg._EXPORTS
        assert sorted(exports) == sorted(set(dir(pkg)) & set(exports))
        for attr, module in exports.items():  # ...yet each exported name is still the object it names
            value = getattr(pkg, attr)
            assert not isinstance(value, types.ModuleType), f"{name}.{attr} is a module"
            assert value is getattr(importlib.import_module(module), attr)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        edgestream.sync.nope  # noqa: B018


def test_config_validate_imports_no_torch():
    """`edgestream config validate` checks a config (a built-in model included) without torch: ~65 MB and ~1.5 s
    instead of ~690 MB and ~3.5 s (issue 30, item 3)."""
    example = Path(edgestream.__file__).resolve().parents[1] / "examples" / "adsp.yaml"
    code = BLOCKED_IMPORTS + textwrap.dedent(f"""
        from edgestream.cli import app
        try:
            app(["config", "validate", {str(example)!r}])
        except SystemExit as exc:
            assert not exc.code, exc.code
        print("torch" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "False", done.stdout + done.stderr[-2000:]
    assert "valid" in done.stdout
