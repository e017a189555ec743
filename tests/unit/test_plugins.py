"""The one extension mechanism (edgestream.plugins), tested from outside the package: every test writes a
small user package into a temporary folder and names it the way a user would -- by import path, from the
config file's folder, or as an installed distribution's entry point -- and checks each refusal's one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from edgestream import plugins
from edgestream.config import ConfigError, load_config, validate_dict
from edgestream.plugins import PluginError

EDGESTREAM = [sys.executable, "-m", "edgestream"]

USER_MODELS = """
from torch import nn

def tiny(input_shape, num_outputs, hidden=8):
    import math
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),
                         nn.Linear(hidden, num_outputs))

def not_a_module(input_shape, num_outputs):
    return {"weights": 1}

NOT_CALLABLE = 3
"""

USER_COMPRESSORS = """
from edgestream.compression.builtins import topk

def half(spec):
    return topk({"ratio": 0.5})

def tenth(spec):
    return topk({"ratio": 0.1})

def wrong(spec):
    return "not a compressor"
"""

USER_ALGORITHMS = """
from edgestream.sync import AlgorithmSpec, SSPCoordinator, gradient_worker
from edgestream.sync.ssp import PARAMS

class Half(SSPCoordinator):
    def on_push(self, worker, push, now):
        self.apply(push.update, push.lr * 0.5)

HALF_SSP = AlgorithmSpec("half-ssp", gradient_worker, PARAMS, False, "SSP at half the lr", Half)
NOT_A_SPEC = {"name": "x"}
"""


def _package(root: Path, name: str, modules: dict[str, str]) -> Path:
    pkg = root / name
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    for mod, text in modules.items():
        (pkg / f"{mod}.py").write_text(textwrap.dedent(text))
    return pkg


def _dist_info(root: Path, dist: str, version: str, groups: dict[str, dict[str, str]]) -> None:
    """An installed distribution's metadata (what pip writes), so importlib.metadata finds its entry points."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = []
    for group, entries in groups.items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")


@pytest.fixture
def userpkg(tmp_path, monkeypatch):
    """A user package `userpkg` in a temporary folder on sys.path, with an installed distribution's entry
    points for each kind."""
    root = tmp_path / "site"
    _package(root, "userpkg", {"models": USER_MODELS, "compressors": USER_COMPRESSORS,
                               "algorithms": USER_ALGORITHMS})
    _dist_info(root, "userpkg-dist", "1.2.3", {
        "edgestream.models": {"tiny-ep": "userpkg.models:tiny", "broken-ep": "userpkg.nosuch:thing"},
        "edgestream.algorithms": {"half-ssp": "userpkg.algorithms:HALF_SSP"},
        "edgestream.compressors": {"half": "userpkg.compressors:half"},
    })
    monkeypatch.syspath_prepend(str(root))
    for mod in [m for m in sys.modules if m == "userpkg" or m.startswith("userpkg.")]:
        monkeypatch.delitem(sys.modules, mod)
    return root


def _problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        validate_dict(raw)
    return exc.value.problems


# ---------------------------------------------------------------- resolution order and refusals
def test_builtins_resolve_without_importing_them():
    assert set(plugins.MODELS.builtins) == {"mlp", "cnn-small", "resnet18", "resnet20", "vgg-small"}
    assert {"digits", "synthetic", "npz", "folder", "csv", "parquet", "windows"} <= set(plugins.DATASETS.builtins)
    assert "topk" in plugins.COMPRESSORS.builtins
    assert plugins.DECODERS.builtins == ("edgestream", "json", "avro", "raw", "npy")
    code = ("import sys; from edgestream.config import validate_dict; validate_dict({'model': {'name': 'resnet18'}, "
            "'compression': {'name': 'topk'}}); print('torch' in sys.modules, 'edgestream.models.resnet' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1] == "False"  # naming a built-in imports nothing of it


def test_import_path_entry_point_and_builtin(userpkg):
    from torch import nn

    from edgestream.models import build_model

    model = build_model("userpkg.models:tiny", (3, 5), 4, hidden=6)
    assert isinstance(model, nn.Module) and model[1].out_features == 6 and model[3].out_features == 4
    assert build_model("tiny-ep", (7,), 2)[1].in_features == 7
    assert plugins.MODELS.source("tiny-ep") == "entry point (userpkg-dist 1.2.3)"
    assert plugins.MODELS.source("mlp") == "built-in"
    cfg = validate_dict({"model": {"name": "userpkg.models:tiny", "kwargs": {"hidden": 5}},
                         "algorithm": {"name": "half-ssp"}, "compression": {"name": "half"}})
    assert cfg.model.kwargs == {"hidden": 5}
    from edgestream.compression import build_compressor
    from edgestream.sync.registry import get_algorithm

    assert get_algorithm("half-ssp").family == "ps"
    assert get_algorithm("userpkg.algorithms:HALF_SSP").summary == "SSP at half the lr"
    assert build_compressor({"name": "half"}).ratio == 0.5


def test_unknown_name_lists_builtins_and_the_import_path_form(userpkg):
    (line,) = _problems({"model": {"name": "resnet-9000"}})
    assert line.startswith("model.name: 'resnet-9000' is not a built-in model or an installed plugin; built-ins: mlp,")
    assert "'package.module:attribute'" in line and "edgestream.models" in line
    (line,) = _problems({"data": {"dataset": "imagenet"}})
    assert line.startswith("data.dataset: 'imagenet' is not a built-in dataset") and "npz" in line
    (line,) = _problems({"compression": {"name": "zip"}})
    assert line.startswith("compression.name: 'zip' is not a built-in compressor") and "topk" in line
    (line,) = _problems({"algorithm": {"name": "fedavg"}})
    assert line.startswith("algorithm.name: 'fedavg' is not a built-in algorithm") and "scadles" in line


def test_failing_import_names_the_module_and_the_exception(userpkg):
    (userpkg / "userpkg" / "boom.py").write_text("raise RuntimeError('no sensor attached')\n")
    (line,) = _problems({"model": {"name": "userpkg.boom:build"}})
    assert line == ("model.name: cannot import module 'userpkg.boom' (RuntimeError: no sensor attached); searched "
                    "installed packages, PYTHONPATH and the config file's folder")
    (line,) = _problems({"model": {"name": "userpkg.models:nosuch"}})
    assert line == "model.name: module 'userpkg.models' has no attribute 'nosuch'"
    (line,) = _problems({"model": {"name": "broken-ep"}})
    assert line.startswith("model.name: entry point 'broken-ep' (userpkg.nosuch:thing) of group 'edgestream.models' "
                           "failed to load (ModuleNotFoundError")


def test_a_task_resolves_through_the_registry(userpkg):
    (userpkg / "userpkg" / "tasks.py").write_text(
        "from edgestream.tasks import Task\n"
        "HUBERISH = Task('huberish', ('rmse', 'mae', 'loss'), labels=False)\n"
        "NOT_A_TASK = 'regression'\n")
    cfg = validate_dict({"task": "userpkg.tasks:HUBERISH", "data": {"dataset": "synthetic", "shape": [8]},
                         "model": {"name": "mlp"}, "stop": {"target_metric": {"name": "mae", "value": 0.1}}})
    assert cfg.stop.target_accuracy is None and cfg.target() == ("mae", 0.1)
    (line,) = _problems({"task": "userpkg.tasks:NOT_A_TASK"})
    assert line == "task: 'userpkg.tasks:NOT_A_TASK' is a str, not an edgestream.tasks.Task"
    (line,) = _problems({"task": "ranking"})
    assert line.startswith("task: 'ranking' is not a built-in task or an installed plugin; built-ins: classification, "
                           "regression")


def test_wrong_kind_says_what_was_expected(userpkg):
    from edgestream.compression import build_compressor
    from edgestream.models import build_model

    (line,) = _problems({"model": {"name": "userpkg.models:NOT_CALLABLE"}})
    assert line == "model.name: 'userpkg.models:NOT_CALLABLE' is a int, not a callable"
    (line,) = _problems({"algorithm": {"name": "userpkg.algorithms:NOT_A_SPEC"}})
    assert line == "algorithm.name: 'userpkg.algorithms:NOT_A_SPEC' is a dict, not an edgestream.sync.AlgorithmSpec"
    with pytest.raises(PluginError, match=r"^model.name: 'userpkg.models:not_a_module' returned a dict, not a "
                                          r"torch.nn.Module$"):
        build_model("userpkg.models:not_a_module", (4,), 2)
    with pytest.raises(PluginError, match=r"could not be called as factory\(input_shape, num_outputs, \*\*kwargs\)"):
        build_model("userpkg.models:tiny", (4,), 2, depth=3)
    with pytest.raises(ValueError, match=r"^compression.name: 'userpkg.compressors:wrong' returned a str, not an "
                                         r"edgestream.compression.Compressor$"):
        build_compressor({"name": "userpkg.compressors:wrong"})


def test_builtin_image_models_refuse_other_shapes_in_one_line():
    from edgestream.models import build_model

    with pytest.raises(ValueError, match=r"^model.name: 'cnn-small' takes images \(channels, height, width\); the "
                                         r"data's samples have shape \[16\] \(use mlp"):
        build_model("cnn-small", (16,), 3)
    assert build_model("mlp", (16,), 3)(__import__("torch").zeros(2, 16)).shape == (2, 3)


# ---------------------------------------------------------------- the config's folder, child processes
def test_import_path_resolves_from_the_config_folder_here_and_in_children(tmp_path, monkeypatch):
    folder = tmp_path / "experiment"
    folder.mkdir()
    (folder / "mymodel.py").write_text(textwrap.dedent(USER_MODELS))
    (folder / "exp.yaml").write_text(yaml.safe_dump({"name": "mine", "model": {"name": "mymodel:tiny"}}))
    monkeypatch.chdir(tmp_path)  # not the config's folder
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.delitem(sys.modules, "mymodel", raising=False)
    cfg = load_config(folder / "exp.yaml")
    assert cfg.model.name == "mymodel:tiny"
    assert str(folder) in os.environ["PYTHONPATH"].split(os.pathsep)
    child = subprocess.run([sys.executable, "-c", "import mymodel; print(mymodel.tiny((4,), 2)[1].in_features)"],
                           capture_output=True, text=True, env=dict(os.environ), cwd=tmp_path)
    assert child.stdout.strip() == "4", child.stderr


def test_cli_plugins_lists_builtins_and_entry_points(userpkg):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(userpkg), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([*EDGESTREAM, "plugins", "--json"], capture_output=True, text=True, env=env, check=True)
    listing = json.loads(out.stdout)
    assert set(listing) == {"models", "datasets", "algorithms", "compressors", "tasks", "decoders", "detectors"}
    assert [d["name"] for d in listing["detectors"]] == ["adwin", "page_hinkley", "ddm"]
    assert [t["name"] for t in listing["tasks"]] == ["classification", "regression"]
    assert [d["name"] for d in listing["decoders"]] == ["edgestream", "json", "avro", "raw", "npy"]
    models = {m["name"]: m for m in listing["models"]}
    assert models["mlp"]["source"] == "built-in"
    assert models["tiny-ep"] == {"name": "tiny-ep", "source": "entry point (userpkg-dist 1.2.3)",
                                 "target": "userpkg.models:tiny", "summary": ""}
    assert {a["name"] for a in listing["algorithms"]} >= {"ddl", "scadles", "ssp", "half-ssp"}
    text = subprocess.run([*EDGESTREAM, "plugins", "compressors"], capture_output=True, text=True, env=env).stdout
    assert "half" in text and "entry point (userpkg-dist 1.2.3)" in text and "adaptive-topk" in text
    bad = subprocess.run([*EDGESTREAM, "plugins", "optimizers"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "kind: 'optimizers' is not allowed; must be one of models, datasets, algorithms, compressors, tasks, decoders, detectors"


def test_config_validate_takes_set(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "v", "model": {"name": "mlp"}, "stop": {"max_steps": 5}}))
    ok = subprocess.run([*EDGESTREAM, "config", "validate", str(cfg), "--set", "devices.count=3"],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip() == f"{cfg}: valid", ok.stderr
    bad = subprocess.run([*EDGESTREAM, "config", "validate", str(cfg), "--set", "model.name=nope"],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.startswith("model.name: 'nope' is not a built-in model or an installed plugin")


def test_an_algorithm_runs_only_on_the_engines_it_declares(userpkg):
    import dataclasses

    from edgestream.runner.engines import EngineError, check_runs
    from edgestream.sync.registry import get_algorithm

    spec = get_algorithm("userpkg.algorithms:HALF_SSP")
    check_runs("sim", spec)
    check_runs("local", spec)
    sim_only = dataclasses.replace(spec, engines=("sim",))
    with pytest.raises(EngineError) as exc:
        check_runs("local", sim_only)
    assert exc.value.problems == ["algorithm.name: 'half-ssp' runs on the engines sim (its AlgorithmSpec.engines), "
                                  "not on 'local'"]


@pytest.mark.parametrize("raw,line", [
    ({"model": {"name": "cnn-small"}, "data": {"dataset": "synthetic", "shape": [16], "num_classes": 3}},
     "model.name: 'cnn-small' takes images (channels, height, width); the data's samples have shape [16]"),
    ({"model": {"name": "mlp", "kwargs": {"depth": 2}}},
     "model.name: 'mlp' could not be called as factory(input_shape, num_outputs, **kwargs)"),
])
def test_config_validate_and_run_refuse_the_same(tmp_path, raw, line):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "agree", "stop": {"max_steps": 2}, "devices": {"count": 2}, **raw}))
    checked = subprocess.run([*EDGESTREAM, "config", "validate", str(cfg)], capture_output=True, text=True)
    assert checked.returncode == 2 and checked.stderr.startswith(line), checked.stderr
    ran = subprocess.run([*EDGESTREAM, "run", str(cfg), "--engine", "sim", "--quiet", "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert ran.returncode == 2 and line in ran.stderr, ran.stderr


def test_compare_takes_import_paths_among_the_algorithms():
    from edgestream.comparisons import parse_variants

    variants = parse_variants("userpkg.algorithms:HALF_SSP[algorithm.params.s=1],ssp")
    assert [(v.algorithm, v.overrides) for v in variants] == [("userpkg.algorithms:HALF_SSP", ["algorithm.params.s=1"]),
                                                             ("ssp", [])]
    with pytest.raises(ValueError, match="an import path package.module:attribute"):
        parse_variants("bad name!")


def test_a_user_compressor_by_import_path_runs_in_the_simulator(userpkg, tmp_path):
    from edgestream.runner import run_config

    def run(compression):
        cfg = validate_dict({"name": "ucomp", "model": {"name": "mlp"}, "devices": {"count": 2},
                             "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 16}},
                             "compression": compression, "stop": {"max_steps": 6, "target_accuracy": None}})
        return run_config(cfg, "sim", out=tmp_path, progress=False)[1]

    dense, user = run({"name": "none"}), run({"name": "userpkg.compressors:tenth"})
    assert dense["steps"] == user["steps"] == 6
    # top-10%: values + indices, a fifth of the dense floats
    assert user["floats_sent_total"] < 0.25 * dense["floats_sent_total"], (user, dense)
