"""A trainer's forward and backward replayed from CUDA graphs, where every batch has one shape.

On a GPU a small model's step is launch-bound: the forward and backward of cnn-small are ~100 kernel
launches that take longer on the host than on the device (issue 36: 1.4 ms a step, flat from batch 8 to
128). `GraphedForward` captures the model's forward and backward once, at the first batch
(`torch.cuda.make_graphed_callables`), and from then on each step replays them: two graph launches and an
input copy instead of a launch per kernel. Same kernels, same inputs: the same values as the eager step.

Where: a CUDA trainer whose batches all have one shape -- the runs that prefetch (a fixed batch, an
algorithm that `takes_ahead`, no injection, no compute emulation: `takes_fixed_batches`). A batch of
another shape (none should come) runs eagerly. EDGESTREAM_CUDA_GRAPHS=0 turns it off; a model that cannot
be captured (an op that syncs with the host), or that has hooks (a replay would not run them: `hooks_in`), is
said in one log line and runs eagerly.

What the capture leaves as it was: the model's parameters (the warm-up passes compute gradients with
`torch.autograd.grad`, never into `.grad`) and its buffers (BatchNorm's running statistics, updated by the
warm-up passes, are restored). The model's own `forward` is untouched: evaluation (eval mode, other
shapes) runs it eagerly. Gradients come out as fresh tensors (one multi-tensor copy from the graph's
static buffers, which the next replay overwrites).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules import module as module_mod

from edgestream import settings

log = logging.getLogger("edgestream.trainer")

ENV = settings.CUDA_GRAPHS.name
#: forward-backward passes before the capture (make_graphed_callables' default)
WARMUP = 3


def graphs_wanted(fixed_batches: bool, device: torch.device, environ: dict | None = None) -> bool:
    """Whether a trainer on `device` replays its step from CUDA graphs: on a GPU, when every batch has one
    shape (`fixed_batches`), unless EDGESTREAM_CUDA_GRAPHS=0."""
    return settings.cuda_graphs(environ) and fixed_batches and torch.device(device).type == "cuda"


_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def hooks_in(model: nn.Module) -> list[str]:
    """The modules of `model` with forward or backward hooks ("name: kind"), and global module hooks: code
    that runs when a module is called, which a graph replay would not call again."""
    found = [f"{name or type(model).__name__}: {kind.strip('_')}" for name, m in model.named_modules()
             for kind in _HOOKS if getattr(m, kind, None)]
    found += [f"global {kind}" for kind in [k.strip("_") for k in _HOOKS]
              if getattr(module_mod, f"_global_{kind}", None)]
    return found


class _Forward(nn.Module):
    """The model behind a wrapper, so the capture replaces the wrapper's forward and not the model's."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)


class GraphedForward:
    """`model`'s training forward (and its backward) replayed from CUDA graphs for inputs of the shape
    and dtype of the first batch; `__call__(x)` is `model(x)`. See the module doc."""

    def __init__(self, model: nn.Module, rank: int = 0) -> None:
        self.model, self.rank = model, rank
        self._graphed: Any = None
        self._key: tuple | None = None
        self.failed = False

    @property
    def active(self) -> bool:
        return self._graphed is not None

    def _capture(self, x: Tensor) -> None:
        model = self.model
        hooked = hooks_in(model)
        if hooked:  # a replay would skip them (they run at the capture only): the model's own steps
            self.failed = True
            log.info("rank %d: CUDA graphs not used: the model has hooks (%s), which a replay would not run; "
                     "eager steps", self.rank, ", ".join(hooked[:3]))
            return
        saved = [b.detach().clone() for b in model.buffers()]
        wrapper = _Forward(model)
        try:
            self._graphed = torch.cuda.make_graphed_callables(wrapper, (x.detach().clone(),),
                                                              num_warmup_iters=WARMUP)
            self._key = (tuple(x.shape), x.dtype)
            log.info("rank %d: forward and backward replayed from CUDA graphs (batch shape %s)", self.rank,
                     tuple(x.shape))
        except Exception as exc:  # noqa: BLE001 - any capture failure: eager steps, said once
            self.failed = True
            log.warning("rank %d: CUDA graphs not used (the model could not be captured: %s); eager steps",
                        self.rank, " ".join(str(exc).split())[:200])
        finally:
            with torch.no_grad():
                for b, s in zip(model.buffers(), saved, strict=True):
                    b.copy_(s)  # the warm-up passes' BatchNorm updates undone

    def __call__(self, x: Tensor) -> Tensor:
        if self._graphed is None and not self.failed and self.model.training and x.is_cuda:
            self._capture(x)
        if self._graphed is not None and self.model.training and (tuple(x.shape), x.dtype) == self._key:
            return self._graphed(x)
        return self.model(x)

    @staticmethod
    def fresh(grads: list[Tensor]) -> list[Tensor]:
        """`grads` as fresh tensors (one multi-tensor copy): the replayed backward's gradients live in the
        graph's static buffers, which the next replay overwrites."""
        return list(torch._foreach_mul(grads, 1.0)) if grads else []
