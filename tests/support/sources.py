"""Python source that tests write into a temporary folder or run in a child process.

* `USERMOD`: a user's models module (`usermod:build`, factory(input_shape, num_outputs, hidden, norm)), written
  by the engine tests (tests/unit/test_tasks_engines.py) and the real trainers' test (tests/system/test_trainer.py);
* `BLOCKED_IMPORTS`: a prelude after which importing torch, matplotlib, scipy or a sklearn submodule raises
  ImportError (what a process that must not import them is run with).
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
