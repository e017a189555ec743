"""Model zoo: every model trains on a tiny fixed batch; optimizer, LR schedule and flat helpers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from edgestream.models import (
    MODELS,
    build_model,
    build_optimizer,
    build_scheduler,
    flat_params,
    grads_of,
    lr_at,
    param_names,
    set_flat_params,
    set_grads,
    set_lr,
)

TYPICAL: dict[str, tuple[int, int, int]] = {
    "mlp": (1, 8, 8),
    "cnn-small": (1, 8, 8),
    "resnet20": (3, 32, 32),
    "resnet18": (3, 32, 32),
    "vgg-small": (3, 32, 32),
}


def test_models_list_matches_config() -> None:
    from edgestream.plugins import MODELS as REGISTRY

    assert set(MODELS) == set(REGISTRY.builtins) == set(TYPICAL)


@pytest.mark.parametrize("name", MODELS)
def test_loss_falls_on_a_tiny_fixed_batch(name: str) -> None:
    torch.manual_seed(0)
    shape = TYPICAL[name]
    model = build_model(name, shape, num_classes=10)
    x = torch.randn(8, *shape)
    y = torch.arange(8) % 10
    opt = build_optimizer(model, lr=0.05, momentum=0.9, weight_decay=0.0)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert model(x).shape == (8, 10)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.7 * losses[0], losses


@pytest.mark.parametrize("name", MODELS)
def test_models_accept_digits_and_images(name: str) -> None:
    for shape in [(1, 8, 8), (3, 32, 32)]:
        model = build_model(name, shape, num_classes=3)
        assert model(torch.randn(2, *shape)).shape == (2, 3)


def test_cnn_small_is_small() -> None:
    n = sum(p.numel() for p in build_model("cnn-small", (1, 8, 8), 10).parameters())
    assert 10_000 < n < 60_000


def test_unknown_model_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="resnet20"):
        build_model("alexnet", (3, 32, 32), 10)
    with pytest.raises(ValueError, match="takes images"):
        build_model("cnn-small", (8, 8), 10)
    assert build_model("mlp", (8, 8), 10)(torch.zeros(2, 8, 8)).shape == (2, 10)  # mlp takes any shape


def test_flat_params_round_trip_and_identical_replicas() -> None:
    torch.manual_seed(1)
    a = build_model("cnn-small", (1, 8, 8), 10)
    b = build_model("cnn-small", (1, 8, 8), 10)
    assert not torch.equal(flat_params(a), flat_params(b))
    set_flat_params(b, flat_params(a))
    assert torch.equal(flat_params(a), flat_params(b))
    x = torch.randn(4, 1, 8, 8)
    assert torch.equal(a(x), b(x))
    assert flat_params(a).numel() == sum(p.numel() for p in a.parameters())
    with pytest.raises(ValueError):
        set_flat_params(a, torch.zeros(3))


def test_grads_of_and_set_grads() -> None:
    torch.manual_seed(2)
    model = build_model("mlp", (1, 8, 8), 10)
    assert len(param_names(model)) == len(grads_of(model)) == 6
    assert all(torch.count_nonzero(g) == 0 for g in grads_of(model))  # no backward yet: zeros
    F.cross_entropy(model(torch.randn(4, 1, 8, 8)), torch.tensor([0, 1, 2, 3])).backward()
    grads = grads_of(model)
    model.zero_grad()
    assert any(torch.count_nonzero(g) > 0 for g in grads)  # copies survive zero_grad
    opt = build_optimizer(model, lr=0.5, momentum=0.0, weight_decay=0.0)
    before = flat_params(model)
    set_grads(model, grads)
    opt.step()
    expected = before - 0.5 * torch.cat([g.reshape(-1) for g in grads])
    assert torch.allclose(flat_params(model), expected, atol=1e-6)


def test_lr_schedule() -> None:
    assert lr_at(0, 0.1, [10, 20], 0.1) == pytest.approx(0.1)
    assert lr_at(10, 0.1, [20, 10], 0.1) == pytest.approx(0.01)
    assert lr_at(25.5, 0.1, [10, 20], 0.1) == pytest.approx(0.001)
    assert lr_at(2.5, 1.0, [2.4], 0.5) == pytest.approx(0.5)
    model = build_model("mlp", (1, 8, 8), 10)
    opt = build_optimizer(model, lr=0.1)
    assert opt.defaults["momentum"] == 0.9 and opt.defaults["weight_decay"] == 1e-4
    sched = build_scheduler(opt, [2], 0.5)
    lrs = []
    for _ in range(3):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.1, 0.1, 0.05])
    set_lr(opt, 0.3)
    assert opt.param_groups[0]["lr"] == 0.3
