"""Batched compute: the pending `Compute` requests of many simulated devices served by ONE
vectorised forward/backward pass that yields every device's own gradients.

The per-device path (`Replicas.compute`: one forward/backward per device, when its virtual compute
time ends) is the reference. This path gives every device what that path would give it: its OWN
mean-loss gradients and loss (per-device gradients, not an aggregate), so it is correct whatever the
algorithm then does with them (plain or weighted averaging, Top-k and error feedback, the
adaptive-Top-k vote, ABS-SGD's sums) and sync/ stays untouched. Results are equal up to
floating-point summation order (allclose; tests/unit/test_sim_batched.py).

When it may run a device's forward/backward early: a worker's model cannot change while the worker
is computing (per-worker replicas change only by the worker's own Apply/SetParams; the shared replica
steps only once EVERY worker has applied, this one included). So when the first pending compute's
virtual time ends, the pass serves it together with every other pending device whose model is
already the one it will read at its own end (`Replicas.settled`: not a worker that applied an update
its peers have not applied yet, which the shared replica does not hold); the others wait for a later
pass. Each device still receives its result at the end of its own virtual compute time, so events,
timing and ordering are those of the per-device path.

Two ways to get per-device gradients from one pass (both vectorised over the devices, same FLOPs as
one aggregated gradient):

* dense stacks (`DenseStack`: an nn.Sequential of Linear layers and parameter-free per-sample
  modules, like the mlp) on the shared replica: ONE ordinary autograd pass over the concatenated
  batch with the parameters detached; autograd returns each Linear's output gradient dY, and device
  k's weight and bias gradients are dY_k^T X_k (one bmm per layer) and sum_rows dY_k. About 25
  torch calls per pass, whatever the number of devices. A model of another shape whose trainable
  parameters all sit in Linear layers (a user's own class: `LinearHooks`) takes the same pass, X and
  Y kept by forward hooks, checked against torch.func on its first pass;
* any other qualifying model, and per-worker replicas: torch.func, `vmap` of `grad` of the loss of
  `functional_call` over the devices (parameters unbatched for the shared replica, stacked for
  per-worker replicas). More torch calls per pass (vmap decomposes some ops).

Batches of one size are stacked as they are (mean loss per device); different sizes are bucketed
(each bucket's sizes within `PAD_RATIO` of its smallest) and padded with zero-weight samples (loss
weights 1/b_i on a device's real samples, 0 on padding). A pass holds at most `MAX_PASS_SAMPLES`
samples. The loss each device reports comes from the same pass (equal to the per-device value up to
float rounding).

Only models whose forward treats every sample independently qualify (`batch_check`): a model of
known per-sample modules only (Linear, convolutions, activations, pooling, Flatten, LayerNorm,
Sequential, ...; `batch_independent`) qualifies at once; a model with other modules (a user's own
nn.Module class, by import path) qualifies when a probe on a few real samples shows that its forward
is deterministic, that a sample's output does not depend on the rest of its batch (padding must not
change it), and that torch.func (`functional_call` + `vmap` of `grad`) runs it and gives the
gradients autograd gives one device at a time. Buffers (batch norm's running statistics: one
vectorised pass cannot update each device's own copy), batch norm's batch statistics and dropout
(random masks drawn in device order) keep the run on the per-device path, as does a failed probe (the
reason is in the summary, and logged once for a user's model).

The loss is the run's task's (edgestream.tasks): class indices [b] with cross-entropy, or float
targets [b] / [b, K] with the mean squared error; `Task.per_sample_loss` gives the weighted sums.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from edgestream.sim.batchable import PER_SAMPLE_MODULES, PROBE_ATOL, PROBE_RTOL, batch_independent, vmapped
from edgestream.sync.requests import ComputeResult
from edgestream.tasks import CLASSIFICATION, Task

#: largest samples per pass (bounds activation memory; more pending samples take several passes)
MAX_PASS_SAMPLES = 65536
#: a bucket of different batch sizes pads to its largest, which is at most PAD_RATIO times its smallest
PAD_RATIO = 1.25

def _unshared(t: Tensor) -> bool:
    """Whether nothing but `t` itself (no view, no numpy array) holds `t`'s memory; False where torch
    cannot say."""
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    return use_count is not None and use_count(t.untyped_storage()._cdata) <= 2  # t + the storage object asked


class GradBuffers:
    """Reused memory for the per-device weight gradients of a pass ([K, out, in] per Linear: 32 MB a pass
    at 1,000 devices of the mlp). A fresh tensor that large is a fresh mapping from the allocator, so every
    pass paid its page faults again (about 8 % of a 1,000-device run). A kept buffer is reused only once
    nothing holds any of it any more (the workers have summed and dropped those gradients); otherwise a new
    one is made, and kept while the kept buffers hold at most `KEEP` per layer and `KEEP_BYTES` in all:
    workers hold a step's gradients until their next Compute result replaces them, so a run of one pass a
    step alternates between two buffers per layer. Larger passes (10,000 devices: 256 MB a layer, two passes
    a step) are not kept: there a kept buffer that fits no pass raised the run's peak by 0.37 GB, and the
    page faults weigh less beside their compute."""

    KEEP = 2
    KEEP_BYTES = 256 * 2**20

    def __init__(self) -> None:
        self._kept: dict[str, list[Tensor]] = {}
        self._bytes = 0

    def take(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        """An uninitialised tensor of `shape` and `dtype` that nothing else holds."""
        numel = math.prod(shape)
        kept = self._kept.setdefault(name, [])
        # the smallest free buffer that fits, and not one of more than twice the size (a small pass holding a
        # large pass's buffer would make the next large pass allocate one more)
        fits = [buf for buf in kept if buf.dtype == dtype and numel <= buf.numel() <= 2 * numel and _unshared(buf)]
        if fits:
            return min(fits, key=lambda buf: buf.numel())[:numel].view(shape)
        fresh = torch.empty(numel, dtype=dtype)
        size = fresh.numel() * fresh.element_size()
        if len(kept) >= self.KEEP or self._bytes + size > self.KEEP_BYTES:  # room: the smallest free one goes
            free = [i for i, buf in enumerate(kept) if _unshared(buf)]
            if free:
                gone = kept.pop(min(free, key=lambda i: kept[i].numel()))
                self._bytes -= gone.numel() * gone.element_size()
        if len(kept) < self.KEEP and self._bytes + size <= self.KEEP_BYTES:
            kept.append(fresh)
            self._bytes += size
        return fresh.view(shape)


class DenseStack:
    """The one-autograd-pass path (module doc) for `model` if it is an nn.Sequential of nn.Linear layers
    (every parameter trainable) and parameter-free per-sample modules; `DenseStack.of(model)` returns
    None otherwise. In-place modules (ReLU(inplace=True)) run as out-of-place copies, so each
    Linear's output keeps the value autograd differentiates with respect to."""

    def __init__(self, layers: list[tuple[str, nn.Module]]) -> None:
        self.layers = layers
        self.buffers = GradBuffers()
        self.last_output: Tensor | None = None  # the newest call's outputs (prequential scores)

    @classmethod
    def of(cls, model: nn.Module) -> DenseStack | None:
        if type(model) is not nn.Sequential or batch_independent(model) is not None:
            return None
        layers: list[tuple[str, nn.Module]] = []
        for name, child in model.named_children():
            if type(child) is nn.Linear:
                if not all(p.requires_grad for p in child.parameters()):
                    return None
                layers.append((name, child))
            elif type(child) in PER_SAMPLE_MODULES and not any(True for _ in child.parameters()) \
                    and type(child) not in (nn.Sequential, nn.ModuleList):
                twin = copy.deepcopy(child)
                if hasattr(twin, "inplace"):
                    twin.inplace = False
                layers.append((name, twin))
            else:
                return None
        return cls(layers) if any(type(m) is nn.Linear for _, m in layers) else None

    def __call__(self, params: dict[str, Tensor], x: Tensor, y: Tensor, w: Tensor | None,
                 task: Task = CLASSIFICATION) -> tuple[dict[str, Tensor], Tensor]:
        """Per-device gradients {name: [K, ...]} and mean losses [K] of the batches x [K, b, ...], targets
        y [K, b, ...] (w [K, b]: per-sample loss weights, None = the mean over b) under `task`'s loss."""
        k, b = int(y.shape[0]), int(y.shape[1])
        h = x.reshape(k * b, *x.shape[2:])
        saved: list[tuple[str, Tensor, Tensor]] = []
        for name, module in self.layers:
            if type(module) is nn.Linear:
                bias = params.get(f"{name}.bias")
                out = F.linear(h, params[f"{name}.weight"], bias)
                if not out.requires_grad:  # the first Linear: its output is where the graph starts
                    out.requires_grad_()
                saved.append((name, h, out))
                h = out
            else:
                h = module(h)
        self.last_output = h.detach()  # the batch's outputs: prequential scores (BatchedCompute.scoring)
        per = task.per_sample_loss(h, y.reshape(k * b, *y.shape[2:])).view(k, b)
        losses = per.mean(1) if w is None else (per * w).sum(1)
        douts = torch.autograd.grad(losses.sum(), [out for _, _, out in saved])
        grads: dict[str, Tensor] = {}
        for (name, inp, _), dout in zip(saved, douts, strict=True):
            dy = dout.view(k, b, -1)
            lhs, rhs = dy.transpose(1, 2), inp.detach().reshape(k, b, -1)
            out = self.buffers.take(name, (k, lhs.shape[1], rhs.shape[2]), lhs.dtype)
            grads[f"{name}.weight"] = torch.bmm(lhs, rhs, out=out)
            if f"{name}.bias" in params:
                grads[f"{name}.bias"] = dy.sum(1)
        return grads, losses.detach()


class _NotDense(Exception):
    """A model's forward broke a `LinearHooks` assumption (a Linear called twice, an in-place change)."""


class LinearHooks:
    """DenseStack's one-autograd-pass trick for a model of another shape whose trainable parameters all
    sit in nn.Linear layers (a user's own class of Linear layers and parameter-free operations, already
    admitted by `batch_check`): forward hooks keep each Linear's input X and output Y of ONE ordinary
    forward of the replica over the concatenated batch, and device k's gradients are dY_k^T X_k and
    sum_rows dY_k (autograd.grad with respect to the Ys only: nothing reaches the parameters' .grad).
    `BatchedCompute` checks it against torch.func on its first pass and serves the model with the vmap
    path instead when they differ (a Linear's weight also used outside the layer, e.g. tied weights)
    or the forward breaks an assumption (a Linear called twice, its input or output changed in place).
    `LinearHooks.of(model)` is None for models it does not fit."""

    def __init__(self, names: list[str]) -> None:
        self.names = names  # the Linear modules' names
        self.last_output: Tensor | None = None  # the newest call's outputs (prequential scores)

    @classmethod
    def of(cls, model: nn.Module) -> LinearHooks | None:
        if DenseStack.of(model) is not None or any(True for _ in model.buffers()):
            return None
        linears = [(name, m) for name, m in model.named_modules() if type(m) is nn.Linear]
        owned = {id(p) for _, m in linears for p in m.parameters()}
        if not linears or any(p.requires_grad != (id(p) in owned) for p in model.parameters()):
            return None
        return cls([name for name, _ in linears])

    def __call__(self, model: nn.Module, x: Tensor, y: Tensor, w: Tensor | None,
                 task: Task = CLASSIFICATION) -> tuple[dict[str, Tensor], Tensor]:
        """Per-device gradients and losses (as `DenseStack.__call__`) of `model` (a replica of the model
        `of` accepted) on x [K, b, ...], y [K, b, ...]; raises _NotDense when the forward breaks an
        assumption."""
        k, b = int(y.shape[0]), int(y.shape[1])
        modules = dict(model.named_modules())
        linears = [(name, modules[name]) for name in self.names]
        saved: dict[str, tuple[Tensor, Tensor, int, int]] = {}

        def hook(name: str) -> Callable[..., Any]:
            def keep(module: nn.Module, args: tuple[Any, ...], out: Tensor) -> None:
                if name in saved or len(args) != 1 or int(args[0].shape[0]) != k * b:
                    raise _NotDense(name)
                saved[name] = (args[0], out, args[0]._version, out._version)
            return keep

        handles = [m.register_forward_hook(hook(n)) for n, m in linears]
        try:
            output = model(x.reshape(k * b, *x.shape[2:]))
        finally:
            for handle in handles:
                handle.remove()
        if len(saved) != len(linears) or any(i._version != vi or o._version != vo for i, o, vi, vo in saved.values()):
            raise _NotDense("a Linear was skipped, or its input or output changed in place")
        self.last_output = output.detach()  # the batch's outputs: prequential scores (BatchedCompute.scoring)
        per = task.per_sample_loss(output, y.reshape(k * b, *y.shape[2:])).view(k, b)
        losses = per.mean(1) if w is None else (per * w).sum(1)
        douts = torch.autograd.grad(losses.sum(), [saved[n][1] for n in self.names])
        grads: dict[str, Tensor] = {}
        for (name, module), dout in zip(linears, douts, strict=True):
            dy = dout.reshape(k, -1, module.out_features)
            grads[f"{name}.weight"] = torch.bmm(dy.transpose(1, 2), saved[name][0].reshape(k, -1, module.in_features))
            if module.bias is not None:
                grads[f"{name}.bias"] = dy.sum(1)
        return grads, losses.detach()


class BatchedCompute:
    """Serves the `Compute` requests of the simulated workers on `replicas` in passes (module doc).

    post(rank, batch) when a worker's compute starts; result(rank) when its virtual time ends.
    `passes` / `served` count the passes and the device computes they served.
    """

    def __init__(self, replicas: Any) -> None:
        self.replicas = replicas
        self.model = replicas.models[0]
        self.task: Task = getattr(replicas, "task", CLASSIFICATION)
        self.names = [n for n, p in self.model.named_parameters() if p.requires_grad]
        self.pending: dict[int, Any] = {}  # rank -> its batch (n, x, y; a SimBatch also data and indices)
        self.ready: dict[int, ComputeResult] = {}
        self.passes = 0
        self.served = 0
        self._fns: dict[tuple[bool, bool], Callable[..., Any]] = {}
        self.dense: Any = DenseStack.of(self.model)
        self.hooks = LinearHooks.of(self.model) if self.dense is None else None
        self._hooks_checked = False
        self.last_output: Tensor | None = None

    @property
    def scoring(self) -> bool:
        """Whether each device's batch is scored (prequential evaluation: the replicas' `scoring`)."""
        return bool(getattr(self.replicas, "scoring", False))

    def _outputs(self) -> Tensor:
        """The outputs of the newest pass, [K * b, ...], from whichever path computed it."""
        for owner in (self.dense, self.hooks, self):
            out = getattr(owner, "last_output", None) if owner is not None else None
            if out is not None:
                return out
        raise RuntimeError("batched compute: no outputs kept for prequential scores")

    # ------------------------------------------------------------------ requests
    def post(self, rank: int, batch: Any) -> None:
        """Worker `rank` started computing on `batch` (its size `n`, inputs `x`, targets `y`; a `SimBatch`'s
        rows are gathered with the pass's, from its `data` and `indices`)."""
        self.pending[rank] = batch

    def result(self, rank: int) -> ComputeResult:
        """Worker `rank`'s result, at the end of its virtual compute time (a pass runs if needed)."""
        out = self.ready.pop(rank, None)
        if out is not None:
            return out
        if rank not in self.pending:
            raise RuntimeError(f"worker {rank} asked for a compute result it never posted")
        self._pass(rank)
        return self.ready.pop(rank)

    # ------------------------------------------------------------------ passes
    def _pass(self, rank: int) -> None:
        t0 = time.perf_counter()
        rep = self.replicas
        first_slot = rep._slot(rank)  # may split the shared replica, exactly as the per-device path would
        ranks = [rank] + [r for r in self.pending if r != rank and rep.settled(r)]
        slots = {rank: first_slot, **{r: rep._slot(r) for r in ranks[1:]}}
        work = [(r, self.pending.pop(r)) for r in ranks]
        for group in self._groups(work):
            self._serve(group, slots)
        rep.wall["forward_backward"] += time.perf_counter() - t0

    @staticmethod
    def _groups(work: list[tuple[int, Any]]) -> list[list[tuple[int, Any]]]:
        """Buckets of devices by batch size (sizes within PAD_RATIO), each at most MAX_PASS_SAMPLES
        padded samples (a single larger batch is a pass of its own)."""
        work = sorted(work, key=lambda w: (w[1].n, w[0]))
        groups: list[list[tuple[int, Any]]] = []
        current: list[tuple[int, Any]] = []
        smallest = 0
        for item in work:
            n = item[1].n
            if current and (n > PAD_RATIO * smallest or n * (len(current) + 1) > MAX_PASS_SAMPLES):
                groups.append(current)
                current = []
            if not current:
                smallest = n
            current.append(item)
        if current:
            groups.append(current)
        return groups

    def _fn(self, stacked_params: bool, weighted: bool) -> Callable[..., Any]:
        """The vmap path's function: (grads, losses); with `scoring` the outputs are kept in `last_output`."""
        key = (stacked_params, weighted, self.scoring)
        fn = self._fns.get(key)
        if fn is None:  # only the model's structure: the parameters come in as arguments
            raw = vmapped(self.model, self.task, stacked_params, weighted, outputs=self.scoring)
            if self.scoring:
                def fn(*args: Any, _raw: Callable[..., Any] = raw) -> tuple[Any, Tensor]:
                    grads, (losses, outputs) = _raw(*args)
                    self.last_output = outputs.reshape(-1, *outputs.shape[2:])
                    return grads, losses
            else:
                fn = raw
            self._fns[key] = fn
        return fn

    def _hooked(self, model: nn.Module, params: dict[str, Tensor], x: Tensor, y: Tensor,
                w: Tensor | None) -> tuple[dict[str, Tensor], Tensor]:
        """`LinearHooks` on `model` (the replica holding `params`); on its first pass checked against the
        vmap path (the vmap path for good when they differ or the forward breaks an assumption)."""
        vmapped = self._fn(False, w is not None)
        args = (params, x, y) + ((w,) if w is not None else ())
        try:
            grads, losses = self.hooks(model, x, y, w, self.task)
        except _NotDense:
            self.hooks = None
            return vmapped(*args)
        if not self._hooks_checked:
            self._hooks_checked = True
            ref_grads, ref_losses = vmapped(*args)
            if not (torch.allclose(losses, ref_losses, rtol=PROBE_RTOL, atol=PROBE_ATOL) and all(
                    torch.allclose(grads[n], ref_grads[n], rtol=PROBE_RTOL, atol=PROBE_ATOL) for n in self.names)):
                self.hooks = None
                return ref_grads, ref_losses
        return grads, losses

    def _serve(self, group: list[tuple[int, Any]], slots: dict[int, int]) -> None:
        rep = self.replicas
        sizes = [batch.n for _, batch in group]
        b = max(sizes)
        weighted = min(sizes) != b
        group_slots = [slots[r] for r, _ in group]
        stacked = len(set(group_slots)) > 1
        if stacked:
            per_slot = [rep.params[s] for s in group_slots]
            params = {n: torch.stack([ps[i].detach() for ps in per_slot]) for i, n in enumerate(self.names)}
        else:
            params = {n: p.detach() for n, p in zip(self.names, rep.params[group_slots[0]], strict=True)}
        data = getattr(group[0][1], "data", None)
        if weighted:
            x0, y0 = group[0][1].x, group[0][1].y
            x = x0.new_zeros((len(group), b, *x0.shape[1:]))
            y = y0.new_zeros((len(group), b, *y0.shape[1:]))
            w = torch.zeros((len(group), b), dtype=x0.dtype)
            for k, (_, batch) in enumerate(group):
                n = batch.n
                x[k, :n] = batch.x
                y[k, :n] = batch.y
                w[k, :n] = 1.0 / n
        elif data is not None and all(getattr(batch, "data", None) is data for _, batch in group):
            # the simulator's batches: every device's rows gathered from the run's data in one go
            x, y = data.rows(np.stack([batch.indices for _, batch in group]))
            w = None
        else:
            x = torch.stack([batch.x for _, batch in group])
            y = torch.stack([batch.y for _, batch in group])
            w = None
        for owner in (self.dense, self.hooks, self):  # the outputs this pass keeps (prequential scores)
            if owner is not None:
                owner.last_output = None
        if self.dense is not None and not stacked:
            grads, losses = self.dense(params, x, y, w, self.task)
        elif self.hooks is not None and not stacked:
            grads, losses = self._hooked(rep.models[group_slots[0]], params, x, y, w)
        elif w is not None:
            grads, losses = self._fn(stacked, True)(params, x, y, w)
        else:
            grads, losses = self._fn(stacked, False)(params, x, y)
        per_device = zip(*(grads[n].unbind(0) for n in self.names), strict=True)
        scores: list[Any] = [None] * len(group)
        if self.scoring:  # each device's rows of the pass's outputs (padding dropped), scored as the per-device path
            out = self._outputs().reshape(len(group), b, *self._outputs().shape[1:])
            scores = [self.task.sample_sums(out[k, :n], y[k, :n]) for k, n in enumerate(sizes)]
        for (r, _), g, loss, n, sc in zip(group, per_device, losses.tolist(), sizes, scores, strict=True):
            self.ready[r] = ComputeResult(list(g), loss, n, sc)
        self.passes += 1
        self.served += len(group)
