"""What an `AllReduce` computes, written once for every engine that reduces in-process.

The simulator and the local driver both call `reduce_all`; the real runtime gets the same result
from torch.distributed (sum, or a sum of w_i t_i and of w_i). Workers' requests are combined in
rank order, so the floating-point result does not depend on arrival order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
    shapes = [(t.shape, t.dtype) for t in first.tensors]
    for r in requests[1:]:
        if [(t.shape, t.dtype) for t in r.tensors] != shapes:
            raise RuntimeError(f"all-reduce mismatch: tensor shapes or dtypes differ between workers "
                               f"({[(tuple(s), str(d)) for s, d in shapes]} vs "
                               f"{[(tuple(t.shape), str(t.dtype)) for t in r.tensors]})")
    # under no_grad the inputs are only read (no detach needed: nothing is recorded)
    with torch.no_grad():
        if first.op == "sum" and len(requests) == 1:
            # the sum of one: its own tensors, no copy (no engine or algorithm writes into an all-reduce's
            # inputs; the exchange writes into a result only where it shares no memory with what it sent);
            # on a GPU a copy per tensor is a kernel launch per tensor per step
            return [t.detach() for t in first.tensors]
        if first.op == "sum":
            return _rank_order_sum([r.tensors for r in requests])
        total = float(sum(float(r.weight) for r in requests))
        if total <= 0:
            raise RuntimeError("weighted_mean all-reduce with total weight <= 0")
        acc = torch._foreach_mul([t.detach() for t in first.tensors], float(first.weight))
        for r in requests[1:]:
            torch._foreach_add_(acc, r.tensors, alpha=float(r.weight))
        torch._foreach_div_(acc, total)
        return acc


#: per-worker tensors that are separate (not rows of one stacked tensor) are stacked for the vectorised sum
#: when together they hold at most this many elements (the exchange's [W, stop]); larger ones are added
#: worker by worker (stacking would copy every worker's model once more)
STACK_SMALL_ELEMENTS = 1 << 16


def _rank_order_sum(per_worker: Sequence[Sequence[Tensor]]) -> list[Tensor]:
    """sum_i t_i per tensor position in rank order, ((t_0 + t_1) + t_2) + ...: the floats of a loop of
    in-place adds, over per_worker[i] = worker i's tensors (two or more workers).

    Vectorised over the workers where a position's tensors are consecutive rows of one stacked tensor
    (the simulator's batched compute hands each device its row of [K, ...] gradients; a step served by two
    passes has two such tensors: the leading one is vectorised, the rest of the rows added one by one) or
    are small: one numpy reduction over axis 0 of the C-contiguous [K, ...] block, which adds whole rows one
    after another (`_sum_rows`); every other position by one foreach add per worker."""
    import torch

    width = len(per_worker[0])
    out: list[Any] = [None] * width
    slow: list[int] = []
    for j in range(width):
        rows = [tensors[j] for tensors in per_worker]
        lead = _leading_block(rows)
        if lead is None:
            slow.append(j)
            continue
        block, n = lead
        acc = _sum_rows(block)
        for t in rows[n:]:  # after the block, in rank order
            acc.add_(t)
        out[j] = acc
    if slow:
        acc_slow = [per_worker[0][j].detach().clone() for j in slow]
        for tensors in per_worker[1:]:
            torch._foreach_add_(acc_slow, [tensors[j] for j in slow])
        for j, t in zip(slow, acc_slow, strict=True):
            out[j] = t
    return out


def _leading_block(rows: list[Tensor]) -> tuple[Tensor, int] | None:
    """(the C-contiguous [n, ...] tensor whose rows are rows[:n] in order, n): a view of the tensor that the
    leading rows are consecutive rows of (n >= 2), or a stack of all of them when they are small (n =
    len(rows)); None where the vectorised sum does not apply: tensors not float32 or float64 on the CPU, or
    one element each (numpy would sum a single column pairwise, not in order)."""
    import torch

    first = rows[0]
    if first.dtype not in (torch.float32, torch.float64) or first.device.type != "cpu" or first.numel() < 2:
        return None
    base = first._base
    if base is not None and first.is_contiguous():
        # rows of one block: views of the same tensor, each C-contiguous and of the first's shape, lying
        # one after another in its memory (the rows of a [K, ...] tensor, or of a view of a flat buffer)
        step, offset, shape = first.numel(), first.storage_offset(), first.shape
        n = 0
        while n < len(rows) and rows[n]._base is base and rows[n].storage_offset() == offset \
                and rows[n].shape == shape and rows[n].is_contiguous():
            n += 1
            offset += step
        if n >= 2:
            return first.detach().as_strided((n, *shape), (step, *first.stride())), n
    if first.numel() * len(rows) <= STACK_SMALL_ELEMENTS and all(
            t.dtype == first.dtype and t.device == first.device and t.shape == first.shape for t in rows):
        return torch.stack([t.detach() for t in rows]), len(rows)
    return None


def _sum_rows(block: Tensor) -> Tensor:
    """block[0] + block[1] + ... in that order, for a C-contiguous float [K, ...] CPU tensor whose rows hold
    two or more elements: numpy's reduction over the outer axis adds whole rows into the running sum one
    after another, in the array's dtype (torch's sum over dim 0 adds in another order)."""
    import numpy as np
    import torch

    return torch.from_numpy(np.add.reduce(block.numpy(), axis=0, initial=-0.0))
