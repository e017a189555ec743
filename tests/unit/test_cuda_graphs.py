"""The trainer's step replayed from CUDA graphs (edgestream.trainer.graphs): which runs use them, and on a
GPU the same values as the eager step (parameters, BatchNorm statistics, losses), another shape eager."""

from __future__ import annotations

import copy

import pytest
import torch

from edgestream.config import load_dict
from edgestream.models.registry import build_model
from edgestream.runner.plan import RunPlan
from edgestream.tasks import CLASSIFICATION, REGRESSION
from edgestream.trainer.graphs import GraphedForward, graphs_wanted, hooks_in
from edgestream.trainer.prefetch import takes_fixed_batches


def _plan(devices: dict | None = None, **algorithm) -> RunPlan:
    return RunPlan.resolve(load_dict({"name": "p", "data": {"dataset": "digits"}, "devices": devices or {"count": 2},
                                      "algorithm": algorithm}))


def test_which_runs_replay_cuda_graphs():
    fixed = _plan(name="ddl", batch={"policy": "fixed", "size": 32})
    assert takes_fixed_batches(fixed)
    assert not takes_fixed_batches(_plan(name="scadles"))  # its batch follows the stream's rate
    assert not takes_fixed_batches(_plan(name="ddl", batch={"policy": "available", "max": 64}))
    assert not takes_fixed_batches(_plan({"count": 2, "compute": {"static": [1, 2]}}, name="ddl",
                                         batch={"policy": "fixed", "size": 32}))  # emulated device speeds
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert graphs_wanted(True, cuda, {})
    assert not graphs_wanted(True, cuda, {"EDGESTREAM_CUDA_GRAPHS": "0"})
    assert not graphs_wanted(False, cuda, {})
    assert not graphs_wanted(True, cpu, {})


def test_a_model_with_hooks_is_not_replayed():
    model = build_model("mlp", (1, 8, 8), 10)
    assert hooks_in(model) == []
    seen = []
    handle = model[1].register_forward_hook(lambda m, i, o: seen.append(o.shape))  # runs every call, eagerly
    assert hooks_in(model) == ["1: forward_hooks"]
    graphed = GraphedForward(model)
    assert graphed(torch.rand(4, 1, 8, 8)).shape == (4, 10) and not graphed.active and len(seen) == 1  # CPU: eager
    handle.remove()
    assert hooks_in(model) == []
    glob = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)
    try:
        assert hooks_in(model) == ["global forward_hooks"]
    finally:
        glob.remove()


def _steps(model: torch.nn.Module, forward, xs: list[torch.Tensor], ys: list[torch.Tensor], task=CLASSIFICATION
           ) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in zip(xs, ys, strict=True):
        for p in model.parameters():
            p.grad = None
        loss = task.loss(forward(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name, shape, outputs, batch, task", [
    ("cnn-small", (1, 8, 8), 10, 16, CLASSIFICATION),
    ("resnet20", (3, 32, 32), 10, 16, CLASSIFICATION),  # BatchNorm: running statistics in the graph
    ("mlp", (2, 4, 4), 3, 7, CLASSIFICATION),            # 3 classes, an odd batch
    ("mlp", (1, 8, 8), 2, 12, REGRESSION),               # float targets (n, 2), MSE
])
def test_replayed_steps_equal_eager_steps_on_cuda(name, shape, outputs, batch, task):
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(0)
    eager = build_model(name, shape, outputs).to(dev).train()
    replayed = copy.deepcopy(eager)
    g = torch.Generator().manual_seed(1)
    xs = [torch.rand((batch, *shape), generator=g).to(dev) for _ in range(4)]
    ys = [(torch.randint(0, outputs, (batch,), generator=g) if task.labels
           else torch.rand((batch, outputs), generator=g)).to(dev) for _ in range(4)]
    graphed = GraphedForward(replayed)
    deterministic = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True  # cuDNN's atomics-based backward differs run to run otherwise
    try:
        want = _steps(eager, eager, xs, ys, task)
        got = _steps(replayed, graphed, xs, ys, task)
    finally:
        torch.backends.cudnn.deterministic = deterministic
    assert graphed.active and not graphed.failed
    assert got == pytest.approx(want, rel=1e-4, abs=1e-6)
    for a, b in zip(eager.state_dict().values(), replayed.state_dict().values(), strict=True):  # buffers too
        assert torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5)
    other = torch.rand((5, *shape), device=dev)  # another shape: the model's own forward
    assert graphed(other).shape == (5, outputs)
    replayed.eval()
    assert torch.equal(graphed(xs[0]), replayed(xs[0]))  # eval mode: eager
