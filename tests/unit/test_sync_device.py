"""Everything sync/ hands a collective lives on the gradients' device (so NCCL can reduce it on CUDA).

No GPU needed: each worker is stepped by hand with gradients and parameters on torch's `meta` device
(tensors with shapes and no data), and the tensors of its first collective are checked; a static scan
makes sure every tensor sync/ creates from scratch names a device.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import torch

from edgestream.sync import ALGORITHMS, WorkerContext
from edgestream.sync.requests import (
    Ack,
    AllGather,
    AllReduce,
    Apply,
    Compute,
    ComputeResult,
    GetParams,
    Log,
    Now,
    SetParams,
    Start,
    TakeBatch,
)

META = torch.device("meta")
SHAPES = [(4, 3), (4,)]
SYNC_DIR = Path(__file__).resolve().parents[2] / "edgestream" / "sync"


class _Batch:
    n, x, y = 4, None, None


def _first_collective(name: str, params: dict, **kw: Any) -> list[torch.Tensor]:
    """Step worker `name` by hand until it hands over a collective; the tensors it hands over."""
    ctx = WorkerContext(rank=0, world_size=2, params=ALGORITHMS[name].resolve(params), **kw)
    gen = ALGORITHMS[name].worker(ctx)
    send: Any = None
    clock = 0.0
    for _ in range(100):
        req = gen.send(send)
        if isinstance(req, Start):
            req = req.request
        if isinstance(req, AllReduce):
            return list(req.tensors)
        if isinstance(req, AllGather):
            return list(req.payload)
        if isinstance(req, TakeBatch):
            send = _Batch()
        elif isinstance(req, Compute):
            send = ComputeResult([torch.empty(s, device=META) for s in SHAPES], 1.0, 4)
        elif isinstance(req, GetParams):
            send = [torch.empty(s, device=META) for s in SHAPES]
        elif isinstance(req, Now):
            clock += 1.0
            send = clock
        elif isinstance(req, (Apply, Ack, Log, SetParams)):
            send = None
        else:
            raise AssertionError(f"unexpected request {req!r}")
    raise AssertionError(f"{name} handed over no collective")


CASES = {
    "ddl": ("ddl", {}, {}),
    "ddl+topk": ("ddl", {}, {"compression": {"name": "topk", "ratio": 0.5}}),
    "ddl+fp16": ("ddl", {}, {"compression": {"name": "fp16"}}),
    "scadles": ("scadles", {}, {}),
    "abs-sgd": ("abs-sgd", {}, {}),
    "dbs-sgd": ("dbs-sgd", {}, {}),
    # restored right before a re-assignment: the speeds all-reduce comes first
    "dbs-sgd(speeds)": ("dbs-sgd", {"every": 2}, {"step": 2, "state": {"batches": [64, 64], "busy_s": 1.0,
                                                                        "samples": 8}}),
    "local-sgd": ("local-sgd", {"tau": 1}, {}),
    "adacomm": ("adacomm", {"tau": 1}, {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_collective_tensors_live_on_the_gradients_device(case: str) -> None:
    name, params, kw = CASES[case]
    tensors = _first_collective(name, params, **kw)
    assert tensors and all(t.device == META for t in tensors), [t.device for t in tensors]


def test_sync_names_a_device_for_every_tensor_it_creates() -> None:
    """torch.tensor / zeros / ones / empty / full / arange calls in sync/ pass device= (the *_like
    functions inherit it)."""
    makers = {"tensor", "zeros", "ones", "empty", "full", "arange", "as_tensor"}
    missing = []
    for path in sorted(SYNC_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in makers
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
                    and not any(k.arg == "device" for k in node.keywords)):
                missing.append(f"{path.name}:{node.lineno} torch.{node.func.attr}")
    assert not missing, missing
