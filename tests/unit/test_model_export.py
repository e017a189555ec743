"""Export of what users train (issue 57, item 4): every built-in model and a user's sequence and tabular models (a
package written to a tmp folder, used by import path), classification and regression, export to ONNX; ONNX
Runtime's outputs on the records match torch's on the trainer's normalised inputs within
|onnx - torch| <= 1e-4 + 1e-3 |torch|; the safetensors hold the state_dict exactly; a model that cannot be
exported is said in one line and its version carries safetensors only. Also the format's own checks, and that the
device side imports no torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from support.sources import DEVICE_ONLY

from edgestream.config import load_dict
from edgestream.edge.model_format import (
    ONNX_FILE,
    WEIGHTS_FILE,
    Assembler,
    FormatError,
    ModelVersion,
    chunk_body,
    decode_body,
    encode,
    metadata,
    peek,
)
from edgestream.edge.onnx_model import NotRunnable, Runnable
from edgestream.publish.export import ATOL, RTOL, export
from edgestream.runner.plan import RunPlan

USER_MODELS = '''
"""A user's models (imported by path: usermodels:sequence, usermodels:tabular, usermodels:odd)."""
import torch
from torch import nn


class Sequence(nn.Module):
    """(C, T) windows: a GRU over time, its last state -> the outputs."""

    def __init__(self, channels, outputs, hidden):
        super().__init__()
        self.gru = nn.GRU(channels, hidden, batch_first=True)
        self.head = nn.Linear(hidden, outputs)

    def forward(self, x):
        out, _ = self.gru(x.transpose(1, 2))
        return self.head(out[:, -1])


def sequence(input_shape, num_outputs, hidden=12):
    return Sequence(input_shape[0], num_outputs, hidden)


def tabular(input_shape, num_outputs):
    return nn.Sequential(nn.Linear(input_shape[0], 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(16, num_outputs))


class Odd(nn.Module):
    """An op ONNX has no operator for (the modified Bessel function i0)."""

    def __init__(self, n, outputs):
        super().__init__()
        self.fc = nn.Linear(n, outputs)

    def forward(self, x):
        return self.fc(torch.special.i0(x.flatten(1)))


def odd(input_shape, num_outputs):
    return Odd(int(torch.tensor(input_shape).prod()), num_outputs)
'''


@pytest.fixture
def usermodels(tmp_path, monkeypatch):
    (tmp_path / "usermodels.py").write_text(USER_MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "usermodels"
    sys.modules.pop("usermodels", None)


def _plan(model: str, data: dict, task: str = "classification") -> RunPlan:
    return RunPlan.resolve(load_dict({"name": "ex", "data": data, "task": task, "model": {"name": model},
                                      "publish": {}}))


def _version(plan: RunPlan, model: torch.nn.Module) -> tuple[ModelVersion, object]:
    made = export(model, 1, plan.model_facts(), ("onnx", "safetensors"))
    meta = {**plan.model_facts(), "onnx": made.onnx, "onnx_error": made.onnx_error}
    return decode_body(_body(meta, made.files), "ex-ddl-r1", 1), made


def _body(meta: dict, files: dict) -> bytes:
    from edgestream.edge.model_format import body_of

    return body_of(metadata("ex-ddl-r1", 1, meta, files), files)


def _trained(model: torch.nn.Module) -> torch.nn.Module:
    """The model as after training: parameters moved, BatchNorm statistics away from their initial 0 / 1."""
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.3 * torch.randn(b.shape, generator=gen))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))
    return model


def _check_outputs(plan: RunPlan, model: torch.nn.Module, version: ModelVersion) -> None:
    x = plan.dataset.x_test[:16]  # the records as they arrive (raw dtype): the graph normalises them itself
    got = Runnable.of(version).outputs(x)
    with torch.no_grad():
        want = model.eval()(torch.from_numpy(plan.serde.normalize(x))).numpy()
    assert got.shape == want.shape == (16, plan.num_outputs)
    assert (np.abs(got - want) <= ATOL + RTOL * np.abs(want)).all(), np.abs(got - want).max()


def _check_weights(model: torch.nn.Module, version: ModelVersion) -> None:
    from safetensors.numpy import load

    saved = load(version.files[WEIGHTS_FILE])
    state = model.state_dict()
    assert sorted(saved) == sorted(state)
    assert all(np.array_equal(saved[k], v.numpy()) for k, v in state.items())


IMAGES = {"dataset": "synthetic", "shape": [3, 16, 16], "num_classes": 5, "n_train": 60, "n_test": 20}
BUILTINS = [("mlp", {"dataset": "digits"}, "classification"),
            ("mlp", {"dataset": "synthetic", "shape": [6], "n_train": 60, "n_test": 20, "kwargs": {"target_dim": 2}},
             "regression"),
            ("cnn-small", {"dataset": "digits"}, "classification"),
            ("cnn-small", {**IMAGES, "num_classes": None, "kwargs": {"target_dim": 3}}, "regression"),
            ("resnet20", IMAGES, "classification"),
            ("resnet18", {**IMAGES, "shape": [3, 32, 32]}, "classification"),
            ("vgg-small", {**IMAGES, "shape": [3, 32, 32]}, "classification")]


@pytest.mark.parametrize(("model", "data", "task"), BUILTINS, ids=lambda v: v if isinstance(v, str) else "")
def test_every_builtin_model_exports_and_onnx_runtime_matches_torch(model, data, task):
    plan = _plan(model, {k: v for k, v in data.items() if v is not None}, task)
    m = _trained(plan.build_model())
    version, made = _version(plan, m)
    assert made.onnx_error is None and made.onnx["opset"] == 17
    assert list(version.files) == [ONNX_FILE, WEIGHTS_FILE]
    _check_outputs(plan, m, version)
    _check_weights(m, version)


@pytest.mark.parametrize(("factory", "data", "task"), [
    ("sequence", {"dataset": "synthetic", "shape": [3, 20], "num_classes": 4, "n_train": 60, "n_test": 20},
     "classification"),
    ("sequence", {"dataset": "synthetic", "shape": [2, 15], "n_train": 60, "n_test": 20, "kwargs": {"target_dim": 1}},
     "regression"),
    ("tabular", {"dataset": "synthetic", "shape": [7], "num_classes": 3, "n_train": 60, "n_test": 20},
     "classification"),
    ("tabular", {"dataset": "synthetic", "shape": [7], "n_train": 60, "n_test": 20, "kwargs": {"target_dim": 2}},
     "regression"),
])
def test_a_users_sequence_and_tabular_models_export_by_import_path(usermodels, factory, data, task):
    plan = _plan(f"{usermodels}:{factory}", data, task)
    m = _trained(plan.build_model())
    version, made = _version(plan, m)
    assert made.onnx_error is None
    _check_outputs(plan, m, version)
    _check_weights(m, version)


def test_a_model_that_cannot_be_exported_is_one_line_and_safetensors_only(usermodels):
    plan = _plan(f"{usermodels}:odd", {"dataset": "synthetic", "shape": [5], "num_classes": 3, "n_train": 60,
                                       "n_test": 20})
    m = plan.build_model()
    made = export(m, 4, plan.model_facts(), ("onnx", "safetensors"))
    assert made.onnx is None and list(made.files) == [WEIGHTS_FILE]
    assert made.onnx_error.startswith(f"model {usermodels}:odd: ONNX export failed (UnsupportedOperatorError: ")
    assert made.onnx_error.endswith("; published as safetensors only") and "\n" not in made.onnx_error
    only_onnx = export(m, 4, plan.model_facts(), ("onnx",))  # asked for ONNX alone: the weights still go out
    assert list(only_onnx.files) == [WEIGHTS_FILE]
    version = decode_body(_body({**plan.model_facts(), "onnx_error": made.onnx_error}, made.files), "ex-ddl-r1", 1)
    with pytest.raises(NotRunnable, match=r"^version 1: no model.onnx to run \(model usermodels:odd: ONNX export "):
        Runnable.of(version)


def test_the_format_refuses_every_damage_in_one_line():
    files = {ONNX_FILE: b"graph" * 100, WEIGHTS_FILE: b"w" * 333}
    msgs = encode("r-ddl-1", 7, {"step": 3}, files, 200)
    asm = Assembler("r-ddl-1")
    got = [asm.add(v) for _, v, _ in msgs]
    assert got[:-1] == [None] * (len(msgs) - 1) and got[-1].files == files and got[-1].meta["step"] == 3
    assert [k for k, _, _ in msgs] == [f"v7.{i}".encode() for i in range(len(msgs))]
    value = msgs[0][1]
    cases = {
        b"XXXX" + value[4:]: "bad magic: not a model-version chunk",
        value[:4] + b"\x09" + value[5:]: "unknown format version 9 (this reader reads 1)",
        value[:50]: "truncated header: 50 of at least 98 bytes",
        value[:-1] + bytes([value[-1] ^ 0x80]): f"bad checksum: chunk 0 of {len(msgs)} of version 7",
        value[:10] + bytes([value[10] ^ 1]) + value[11:]: f"bad checksum: chunk 0 of {len(msgs)} of version 65543",  # a flipped version bit
    }
    for bad, line in cases.items():
        with pytest.raises(FormatError) as err:
            peek(bad)
        assert str(err.value) == line
    with pytest.raises(FormatError, match=r"^foreign run: version 7 is of run r-ddl-1, this is other-ddl-1$"):
        Assembler("other-ddl-1").add(value)
    doc = metadata("r-ddl-1", 7, {}, files)
    doc["version"] = 8
    from edgestream.edge.model_format import body_of

    asm = Assembler("r-ddl-1")
    with pytest.raises(FormatError, match=r"^metadata version 8 is not the chunks' version 7$"):
        [asm.add(v) for _, v, _ in chunk_body("r-ddl-1", 7, body_of(doc, files), 10_000)]
    with pytest.raises(ValueError, match=r"^version: must be an int >= 1, got 0$"):
        encode("r-ddl-1", 0, {}, files)
    with pytest.raises(ValueError, match=r"^chunk_bytes: must be an int >= 1, got 0$"):
        encode("r-ddl-1", 1, {}, files, 0)


def test_the_device_side_imports_no_torch():
    """Importing the subscriber (and the format, the ONNX runner, stream inference) with only the device install:
    anything else imported raises (tests/support/sources.DEVICE_ONLY)."""
    code = DEVICE_ONLY + textwrap.dedent("""
        import edgestream
        S = edgestream.ModelSubscriber
        import edgestream.edge.subscriber, edgestream.edge.model_format, edgestream.edge.onnx_model
        import onnxruntime
        print("ok", S.__name__, sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "pydantic", "yaml")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", "ModelSubscriber", "[]"]


def test_the_device_requirements_are_pyprojects_ranges():
    """requirements-device.txt (the torch-free install: pip install --no-deps edgestream, then these) names the
    device side's packages with pyproject.toml's own ranges, so the two cannot drift apart."""
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parents[2]
    core = {Requirement(r).name: Requirement(r).specifier
            for r in tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]}
    device = [Requirement(line) for line in (root / "requirements-device.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert sorted(r.name for r in device) == ["confluent-kafka", "numpy", "onnxruntime"]
    assert all(r.specifier == core[r.name] for r in device), [(r.name, r.specifier, core[r.name]) for r in device]


def test_publish_config_lines_and_defaults():
    """`publish: {}` turns versions on with every_s 30; a bad field is one line naming it; the simulator writes no
    versions (it has no Kafka and a virtual clock: docs/model-format.md)."""
    from edgestream.config import ConfigError, validate_dict

    base = {"name": "pub", "data": {"dataset": "digits"}}
    assert RunPlan.resolve(load_dict(base)).publish is None
    assert RunPlan.resolve(load_dict({**base, "publish": {}})).publish == {
        "every_s": 30.0, "every_steps": None, "formats": ("onnx", "safetensors"), "topic": None,
        "chunk_bytes": 1048576, "keep": 2}
    assert RunPlan.resolve(load_dict({**base, "publish": {"every_steps": 5}})).publish["every_s"] is None
    for bad, line in [({"formats": ["tflite"]}, "publish.formats[0]: tflite is not allowed; must be one of 'onnx' or "
                                                "'safetensors'"),
                      ({"every_s": 0}, "publish.every_s: 0 is not allowed; must be > 0"),
                      ({"formats": ["onnx", "onnx"]}, "publish.formats: [onnx, onnx] is not allowed; each format once "
                                                      "(allowed: onnx, safetensors)")]:
        with pytest.raises(ConfigError) as err:
            validate_dict({**base, "publish": bad})
        assert err.value.problems == [line]


def test_the_simulator_writes_no_versions(tmp_path):
    import edgestream

    cfg = edgestream.load_config({"name": "pubsim", "data": {"dataset": "digits"}, "model": {"name": "mlp"},
                                  "devices": {"count": 2}, "stop": {"max_steps": 3, "target_accuracy": None},
                                  "publish": {"every_steps": 1}})
    result = edgestream.run(cfg, engine="sim", out=tmp_path, progress=False)
    assert result.summary["steps"] >= 3 and not (result.run_dir / "models").exists()


def test_a_publishing_run_names_its_models_topic_among_the_topics_to_provision():
    """kafka.topics.create: false -- an administrator provisions every topic the run uses, the models topic too."""
    from edgestream.kafka.topic_provision import run_topics
    from edgestream.launch.run_topics import _models_topic

    base = {"name": "pub", "data": {"dataset": "digits"}}
    assert _models_topic(RunPlan.resolve(load_dict(base)), "pub-ddl-r1") is None
    plan = RunPlan.resolve(load_dict({**base, "publish": {}}))
    assert run_topics("pub-ddl-r1", 2, models=_models_topic(plan, "pub-ddl-r1"))["pub-ddl-r1.models"] == 1
    mine = RunPlan.resolve(load_dict({**base, "publish": {"topic": "plant.models"}}))
    assert _models_topic(mine, "pub-ddl-r1") == "plant.models"
