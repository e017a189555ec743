"""Whether a model can take the simulator's batched path (edgestream.sim.batched; its module doc says why these
rules): `batch_independent` (known per-sample modules only, no buffers), `batch_check` (other models admitted by
a probe on a few real samples), and `vmapped`, the per-device gradient function the probe and the batched pass
share."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from edgestream.tasks import CLASSIFICATION, Task

#: module types whose forward treats every sample of a batch on its own (exact type: a subclass may
#: override forward); containers (Sequential) just compose them
PER_SAMPLE_MODULES: tuple[type[nn.Module], ...] = (
    nn.Sequential, nn.ModuleList, nn.Identity, nn.Flatten, nn.Unflatten,
    nn.Linear, nn.Bilinear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.SELU, nn.GELU, nn.SiLU, nn.Mish, nn.Tanh, nn.Sigmoid,
    nn.Softplus, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid,
    nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
    nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d,
    nn.LayerNorm, nn.GroupNorm,
)


def static_reason(model: nn.Module) -> str | None:
    """Why `model` can never take the batched path (buffers, batch norm, dropout), or None."""
    if any(True for _ in model.buffers()):
        return "the model has buffers (batch-norm running statistics: one vectorised pass cannot keep each " \
               "device's own)"
    for name, module in model.named_modules():
        kind = type(module)
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            return f"module {name or 'model'} ({kind.__name__}) normalises with the batch's statistics"
        if isinstance(module, nn.modules.dropout._DropoutNd):
            return f"module {name or 'model'} ({kind.__name__}) draws random masks in device order"
    return None


def _unknown(model: nn.Module) -> tuple[str, type[nn.Module]] | None:
    """The first module of `model` whose type is not a known per-sample one, or None."""
    for name, module in model.named_modules():
        if type(module) not in PER_SAMPLE_MODULES:
            return name or "model", type(module)
    return None


def batch_independent(model: nn.Module) -> str | None:
    """None when `model`'s forward treats every sample on its own by construction (known per-sample
    modules only, no buffers), so a concatenated batch gives each sample what separate batches give
    it; else the reason it does not qualify. (`batch_check` also admits other models by a probe.)"""
    why = static_reason(model)
    if why is not None:
        return why
    unknown = _unknown(model)
    if unknown is not None:
        return f"module {unknown[0]} ({unknown[1].__name__}) is not known to treat samples independently"
    return None


#: tolerances of the probe's comparisons (float32 summation order differs between the two paths)
PROBE_RTOL, PROBE_ATOL = 1e-3, 1e-5


def batch_check(model: nn.Module, x: Tensor, y: Tensor, task: Task = CLASSIFICATION) -> str | None:
    """None when the batched path serves `model` exactly as the per-device path would; else why not
    (module doc). x, y: a few real samples (at least 4) and their targets, for the probe that a model
    with modules of unknown types must pass; the model and the global RNG are left as they were."""
    why = static_reason(model)
    if why is not None:
        return why
    unknown = _unknown(model)
    if unknown is None:
        return None
    what = f"module {unknown[0]} ({unknown[1].__name__})"
    b = min(4, len(x) // 2)
    if b < 2:
        return f"{what} is not known to treat samples independently (too few samples to check)"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return _probe(copy.deepcopy(model).train(), x[:2 * b], y[:2 * b], b, task, what)


def _probe(model: nn.Module, x: Tensor, y: Tensor, b: int, task: Task, what: str) -> str | None:
    def close(a: Tensor, c: Tensor) -> bool:
        return a.shape == c.shape and bool(torch.allclose(a, c, rtol=PROBE_RTOL, atol=PROBE_ATOL))

    try:
        with torch.no_grad():
            out = model(x[:b])
            if not close(model(x[:b]), out):
                return f"{what}: its forward is not deterministic (two calls on one batch differ)"
            if not close(model(x[:b - 1]), out[:b - 1]):
                return f"{what}: a sample's output depends on the other samples of its batch"
    except Exception as exc:  # noqa: BLE001 -- the model's own error: the per-device path will show it
        return f"{what}: the probe's forward failed ({type(exc).__name__}: {_first_line(exc)})"
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    xs, ys = x.reshape(2, b, *x.shape[1:]), y.reshape(2, b, *y.shape[1:])
    reference = []
    for k in range(2):
        model.zero_grad(set_to_none=True)
        task.loss(model(xs[k]), ys[k]).backward()
        reference.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    for stacked in (False, True):
        args = {n: torch.stack([p, p]) for n, p in params.items()} if stacked else params
        try:
            grads, _ = vmapped(model, task, stacked, False)(args, xs, ys)
        except Exception as exc:  # noqa: BLE001 -- any failure under torch.func means: not this path
            return (f"{what} does not run under torch.func (functional_call + vmap): {type(exc).__name__}: "
                    f"{_first_line(exc)}")
        for k in range(2):
            for n in names:
                ref = reference[k][n]
                if not close(grads[n][k], ref if ref is not None else torch.zeros_like(params[n])):
                    return f"{what}: torch.func's gradients differ from autograd's (parameter {n})"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def vmapped(model: nn.Module, task: Task, stacked_params: bool, weighted: bool,
            outputs: bool = False) -> Callable[..., Any]:
    """vmap over the devices of grad of the task's loss of functional_call(model, params, x): per-device
    gradients and losses (module doc); params stacked [K, ...] or shared, w: per-sample loss weights.
    outputs: the losses come as (losses, the model's outputs [K, b, ...]) (prequential scores)."""

    def loss(params: dict[str, Tensor], x: Tensor, y: Tensor, w: Tensor | None = None) -> Any:
        output = torch.func.functional_call(model, params, (x,))
        value = task.loss(output, y) if w is None else (task.per_sample_loss(output, y) * w).sum()
        return value, ((value.detach(), output.detach()) if outputs else value.detach())

    grad = torch.func.grad(loss, has_aux=True)
    dims = (0 if stacked_params else None, 0, 0) + ((0,) if weighted else ())
    return torch.func.vmap(grad, in_dims=dims)
