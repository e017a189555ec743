"""What an `AllReduce` computes, written once for every engine that reduces in-process.

The simulator and the local driver both call `reduce_all`; the real runtime gets the same result
from torch.distributed (sum, or a sum of w_i t_i and of w_i). Workers' requests are combined in
rank order, so the floating-point result does not depend on arrival order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgestream.sync.requests import AllReduce

if TYPE_CHECKING:  # torch loads where a tensor is made: reading a config imports no torch
    from torch import Tensor


def reduce_all(requests: list[AllReduce]) -> list[Tensor]:
    """sum_i t_i (op "sum") or sum_i w_i t_i / sum_i w_i (op "weighted_mean"), per tensor, rank order. The
    sum of one request is its own tensors (detached, not copied); every other result is fresh tensors."""
    import torch

    first = requests[0]
    ops = {r.op for r in requests}
    if len(ops) != 1:
        raise RuntimeError(f"all-reduce mismatch: workers asked for ops {sorted(ops)}")
    shapes = [t.shape for t in first.tensors]
    for r in requests[1:]:
        if [t.shape for t in r.tensors] != shapes:
            raise RuntimeError(f"all-reduce mismatch: tensor shapes differ between workers "
                               f"({[tuple(s) for s in shapes]} vs {[tuple(t.shape) for t in r.tensors]})")
    # under no_grad the inputs are only read (no detach needed: nothing is recorded)
    with torch.no_grad():
        if first.op == "sum" and len(requests) == 1:
            # the sum of one: its own tensors, no copy (no engine or algorithm writes into an all-reduce's
            # inputs; the exchange writes into a result only where it shares no memory with what it sent);
            # on a GPU a copy per tensor is a kernel launch per tensor per step
            return [t.detach() for t in first.tensors]
        if first.op == "sum":
            acc = [t.detach().clone() for t in first.tensors]
            for r in requests[1:]:
                torch._foreach_add_(acc, r.tensors)
            return acc
        total = float(sum(float(r.weight) for r in requests))
        if total <= 0:
            raise RuntimeError("weighted_mean all-reduce with total weight <= 0")
        acc = torch._foreach_mul([t.detach() for t in first.tensors], float(first.weight))
        for r in requests[1:]:
            torch._foreach_add_(acc, r.tensors, alpha=float(r.weight))
        torch._foreach_div_(acc, total)
        return acc
