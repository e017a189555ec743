"""Python source that tests write into a temporary folder or run in a child process.

* `USERMOD`: a user's models module (`usermod:build`, factory(input_shape, num_outputs, hidden, norm)), written
  by the engine tests (tests/unit/test_tasks_engines.py) and the real trainers' test (tests/system/test_trainer.py);
* `BLOCKED_IMPORTS`: a prelude after which importing torch, matplotlib, scipy or a sklearn submodule raises
  ImportError (what a process that must not import them is run with).
* `DEVICE_ONLY`: a prelude after which importing anything but the standard library, numpy, confluent-kafka,
  onnxruntime and edgestream raises ImportError: a device with only the device install (README, "Devices");
* `DEVICE_SCRIPT`: a device process (under DEVICE_ONLY) that follows a run's model versions with a ModelSubscriber
  and scores each as it comes in on its own held-out data (argv: bootstrap, run, x.npy, y.npy, out.jsonl; reads
  the last version to wait for from stdin).
"""

from __future__ import annotations

import textwrap

USERMOD = '''
"""A user's models, imported by path ("usermod:build"): factory(input_shape, num_outputs, **kwargs)."""
import math

import torch
from torch import nn


class Net(nn.Module):
    """A class of the user's own (not a known per-sample module): Linear -> [BatchNorm] -> ReLU -> Linear."""

    def __init__(self, n_in, n_out, hidden, norm):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.norm = nn.BatchNorm1d(hidden) if norm else None
        self.fc2 = nn.Linear(hidden, n_out)

    def forward(self, x):
        h = self.fc1(x.flatten(1))
        if self.norm is not None:
            h = self.norm(h)
        return self.fc2(torch.relu(h))


def build(input_shape, num_outputs, hidden=16, norm=False):
    return Net(math.prod(input_shape), num_outputs, hidden, norm)


class Mixer(nn.Module):
    """Mixes the samples of a batch (subtracts the batch mean): not per-sample."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)

    def forward(self, x):
        h = x.flatten(1)
        return self.fc(h - h.mean(0, keepdim=True))


def mixer(input_shape, num_outputs):
    return Mixer(math.prod(input_shape), num_outputs)
'''


BLOCKED_IMPORTS = textwrap.dedent("""
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "matplotlib", "scipy") or name.startswith("sklearn."):
                raise ImportError(f"{name} imported")
    sys.meta_path.insert(0, Block())
""")


#: the top-level packages a device install has besides the standard library (README, "Devices")
DEVICE_PACKAGES = ("numpy", "confluent_kafka", "onnxruntime", "edgestream", "coloredlogs", "humanfriendly",
                   "flatbuffers", "packaging", "protobuf", "google", "sympy", "mpmath")

DEVICE_ONLY = textwrap.dedent(f"""
    import sys
    ALLOWED = {DEVICE_PACKAGES!r}
    class DeviceOnly:
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top not in ALLOWED and top not in sys.stdlib_module_names and not top.startswith("_"):
                raise ImportError(f"{{name}} imported (not in a device install)")
    sys.meta_path.insert(0, DeviceOnly())
""")

DEVICE_SCRIPT = DEVICE_ONLY + textwrap.dedent("""
    import json
    import numpy as np
    from edgestream import ModelSubscriber
    from edgestream.edge.onnx_model import Runnable
    bootstrap, run, xs, ys, out = sys.argv[1:6]
    x, y = np.load(xs), np.load(ys)
    lines = open(out, "w")

    def on_version(v):  # each version as it comes in (the subscriber's thread), scored on the device's data
        pred = Runnable.of(v).predict(x)
        if pred.ndim == 1:
            figure = {"accuracy": float((pred == y).mean())}
        else:
            figure = {"rmse": float(np.sqrt(((pred - y.reshape(pred.shape)) ** 2).mean()))}
        lines.write(json.dumps({"scored": v.version, "step": v.step, **figure}) + "\\n")
        lines.flush()

    with ModelSubscriber(bootstrap, run, on_version=on_version) as sub:
        print("ready", flush=True)
        sub.wait_for(int(sys.stdin.readline()), timeout=300)
    print("torch" in sys.modules, "pydantic" in sys.modules, flush=True)
""")
