"""SGD that never imports torch._dynamo unless someone compiles.

torch imports its whole compiler stack (torch._dynamo: ~0.8 s of CPU on an x86 core, several on a Jetson) the
first time any optimizer is built or stepped: four `Optimizer` methods (`add_param_group`, `zero_grad`,
`state_dict`, `load_state_dict`) are wrapped by `torch._disable_dynamo`, which imports it to build a "do not
trace" wrapper on first call, and `step` is wrapped by `_use_grad_for_differentiable`, which imports it on every
call for two `graph_break()`s -- no-ops outside `torch.compile`. Every trainer, parameter server and simulator
process paid that start-up for a compiler none of them runs.

- `defer()` gives each of the four methods, once, what torch's wrapper caches after its first call (the
  wrapped function's `__dynamo_disable`): a function that calls the method as it is while torch._dynamo is not
  imported and, from the first call after it is (a user's `torch.compile` imports it), installs and calls torch's
  own disabled wrapper. Where the wrapper is not the one this was written against (another torch), it changes
  nothing.
- `SGD` is torch.optim.SGD (same update, state_dict and checkpoints; `isinstance(opt, torch.optim.SGD)`) whose
  `step` runs the undecorated update under the grad mode torch's wrapper sets, and torch's own wrapped step once
  torch._dynamo is imported.

tests/unit/test_sgd.py checks both in a fresh process, and that a compiled step still works.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch

#: the methods of torch.optim.Optimizer that torch wraps with torch._disable_dynamo
METHODS = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")
_CACHE = "__dynamo_disable"  # where torch's wrapper keeps the function it calls


def _dynamo_loaded() -> bool:
    return "torch._dynamo" in sys.modules


def _wrapped(method: Any) -> tuple[Callable[..., Any], bool] | None:
    """(the undecorated function, recursive) behind torch's `_disable_dynamo` wrapper; None if it is not one."""
    code = getattr(method, "__code__", None)  # functools.wraps gave the wrapper the method's own names
    if code is None or getattr(code, "co_qualname", code.co_name) != "_disable_dynamo.<locals>.inner":
        return None
    cells = dict(zip(code.co_freevars, method.__closure__ or (), strict=False))
    if set(cells) != {"fn", "recursive"}:
        return None
    return cells["fn"].cell_contents, bool(cells["recursive"].cell_contents)


def _until_dynamo(fn: Callable[..., Any], recursive: bool) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if not _dynamo_loaded():
            return fn(*args, **kwargs)
        import torch._dynamo

        disabled = torch._dynamo.disable(fn, recursive, wrapping=False)
        setattr(fn, _CACHE, disabled)  # from now on torch's wrapper calls its own, as if never deferred
        return disabled(*args, **kwargs)

    return call


def defer() -> None:
    """Defer torch._dynamo's import in Optimizer's wrapped methods (nothing to do once it is imported)."""
    if _dynamo_loaded():
        return
    for name in METHODS:
        found = _wrapped(torch.optim.Optimizer.__dict__.get(name))
        if found is not None and getattr(found[0], _CACHE, None) is None:
            setattr(found[0], _CACHE, _until_dynamo(*found))


def _unhooked(step: Callable[..., Any]) -> Callable[..., Any]:
    """torch's decorated step, less the step-hook wrapper the first optimizer built puts on its class."""
    while getattr(step, "hooked", False):
        step = step.__wrapped__  # type: ignore[attr-defined]
    return step


_TORCH_STEP = _unhooked(torch.optim.SGD.__dict__["step"])  # with torch's graph breaks: once dynamo is loaded
_RAW_STEP = inspect.unwrap(_TORCH_STEP)                      # the update itself


class SGD(torch.optim.SGD):
    """torch.optim.SGD whose step imports no torch._dynamo while nothing is compiled (see the module's doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        defer()
        super().__init__(*args, **kwargs)

    def step(self, closure=None):  # type: ignore[override]
        if _dynamo_loaded():
            return _TORCH_STEP(self, closure)
        prev = torch.is_grad_enabled()
        try:  # what torch's _use_grad_for_differentiable does, less its graph breaks
            torch.set_grad_enabled(self.defaults["differentiable"])
            return _RAW_STEP(self, closure)
        finally:
            torch.set_grad_enabled(prev)
