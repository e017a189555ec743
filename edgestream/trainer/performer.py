"""The real performer: one trainer process performs its worker's requests for real.

* TakeBatch: the device's `KafkaStreamDataset` (buffer and batch policies, validation, DLQ), waiting
  until the policy's samples arrived; an explicit size overrides the batch policy. Injected samples
  that arrived for this device are mixed in.
* Compute: torch forward/backward of the task's mean loss (edgestream.tasks: cross-entropy on class
  indices, MSE on float targets) on this process's model (CUDA when the trainer runs there).
  Heterogeneity emulation as papers 000 and 001 did it: with devices.compute.static / dynamic, the
  device sleeps (static_i (1 + U(0, dynamic)) - 1) times its measured compute time after each step;
  with a compute profile (devices.compute.profile) it sleeps until the step has lasted the profile's
  t(b) x that factor (`emulated_sleep`). A non-finite loss (every step) or parameter (every
  PARAM_CHECK_EVERY-th model change) raises `Diverged`, one line naming the device and the step. On a GPU
  (no emulation) the loss is not waited for: the algorithm gets a `LazyLoss` (edgestream.trainer.losses),
  checked once the device has finished its step (a step or two later, never waiting) and read when the
  step line is written, so no step synchronises with the device; compute_s is then the host's time to
  queue the step. A batch
  is never empty unless the algorithm asked for zero samples (then no forward: zero gradients): a take
  whose messages were all rejected waits for valid ones (the dataset).
* AllReduce / AllGather / Start / Poll / Wait: `DistCollectives` (torch.distributed; the AllReduce is a
  bucketed all_reduce, or with `runtime.reduction: exact` the rank-order sum the simulator computes).
* Apply / GetParams / SetParams: the model and its SGD optimizer (the run's momentum, weight decay).
* Inject: `KafkaStreamDataset.inject` (the `<run>.inj.<j>` topics). Ack: the batch's offsets are
  committed after the step is applied -- or, when checkpoints are on, with the next checkpoint (so a
  resumed run never trains an acknowledged sample twice). Without checkpoints (`ack_interval_s`), the
  newest acknowledged batch whose step line is written through (the host's `lines_written`: a crash never
  leaves a committed sample without its line) is committed at most once per interval, and the last one
  when the host calls `commit_pending` at the end: a commit is a broker request, and one per step cost the broker
  more CPU than the trainer's own step overhead (benchmarks/bench_vs_ddp.py).
* Push / Pull (parameter-server algorithms): the run's PS through Kafka (`edgestream.ps.client.PSClient`):
  a push returns once the broker acknowledged it (its id: the worker's step); a pull waits for the PS's
  reply, which says how long the PS held it (`blocked_s`) and how stale the worker's pushes were when they
  arrived (`staleness`, versions applied since the model the update was computed on). Every step line
  of a PS worker carries the last known `staleness`.
* Now: monotonic seconds since the trainer started (plus the resumed run's elapsed time). Sleep: sleeps.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from edgestream import settings
from edgestream.consumers.batch import StreamBatch
from edgestream.models import set_lr
from edgestream.runner.divergence import Diverged, check_loss, non_finite_params  # noqa: F401 - Diverged re-exported
from edgestream.runner.driver import StepMeter
from edgestream.runner.performer import Performer
from edgestream.streams.source import BatchFacts
from edgestream.sync.requests import (
    Ack,
    AllGather,
    AllReduce,
    Apply,
    Compute,
    ComputeResult,
    GetParams,
    Handle,
    Inject,
    Log,
    Poll,
    Pull,
    Pulled,
    Push,
    ResetOptimizer,
    SetParams,
    Sleep,
    Start,
    TakeBatch,
    Wait,
)
from edgestream.tasks import CLASSIFICATION, Task
from edgestream.trainer.collectives import DistCollectives, Pending
from edgestream.trainer.graphs import GraphedForward
from edgestream.trainer.losses import LossWatch

_TAG_SLOWDOWN = 0x51_0e
#: without checkpoints, the newest ack is committed at most this often (seconds; the host's default)
ACK_INTERVAL_S = 1.0
#: the parameters are checked for NaN/inf at every this-many-th change of the model (`_check_params`)
PARAM_CHECK_EVERY = 10


class Stopped(RuntimeError):
    """The trainer was asked to stop (signal) while it waited."""


#: seconds a trainer asked to stop (SIGTERM / SIGINT) still waits for the data of the step it is taking, so
#: that it ends at a step boundary with its checkpoint (the stop vote rides on the step's collective); past
#: it, `Stopped` (a stream that went quiet: the previous checkpoint is the one a resume starts from). Under
#: the orchestrator's grace period (EDGESTREAM_LAUNCH_GRACE_S, 10 s) with room for the step and the checkpoint
STOP_DATA_WAIT_S = 4.0


class InjectedFailure(Exception):
    """The test-only failure of EDGESTREAM_TEST_FAIL_AT_STEP (deliberately not a RuntimeError)."""


#: test-only: the trainer raises `InjectedFailure` when it computes this step (0-based, as the step
#: lines count). It is read here and nowhere else; no run outside the test suite sets it
TEST_FAIL_AT_STEP = settings.TEST_FAIL_AT_STEP.name


def _fail_at_step() -> int | None:
    return settings.fail_at_step()


@dataclass
class TrainerBatch:
    """A batch of the real runtime: inputs and labels on the model's device, its size, and the dataset's
    `StreamBatch` it came from (offsets to acknowledge, messages to inject, per-row origin)."""

    x: Tensor
    y: Tensor
    n: int
    stream: StreamBatch

    @property
    def facts(self) -> BatchFacts:
        """What the stream did to get the batch (the driver notes them on the step's meter)."""
        return self.stream.facts


def emulated_sleep(dt: float, b: int, factor: float, curve: Any = None) -> float:
    """Seconds a trainer sleeps after a step that took `dt` on its real device, so the step lasts what the
    emulated device takes: with a compute profile, its t(b) x factor (nothing when the real device is
    already slower); without one, dt x factor (the device's static x dynamic slowdown of its own speed)."""
    if curve is not None:
        return max(0.0, float(curve(b)) * factor - dt)
    return dt * (factor - 1.0) if factor > 1.0 else 0.0

class TrainerPerformer(Performer):
    """Performs the requests of worker `rank` (see module doc); task: the loss (default classification)."""

    engine = "trainer"

    def __init__(self, rank: int, model: nn.Module, optimizer: torch.optim.Optimizer, dataset: Any,
                 collectives: DistCollectives, meters: dict[int, StepMeter], *, device: torch.device,
                 static: float = 1.0, dynamic: float = 0.0, seed: int = 0, defer_acks: bool = False,
                 ack_interval_s: float = 0.0, curve: Any = None,
                 time_offset: float = 0.0, stop_event: threading.Event | None = None,
                 take_timeout_s: float = 1.0, due_time: Callable[[int], float] | None = None,
                 ps: Any = None, push_id: Callable[[], int] | None = None, task: Task = CLASSIFICATION,
                 graphed: GraphedForward | None = None, lazy_loss: bool | None = None, scoring: bool = False) -> None:
        self.rank, self.model, self.optimizer, self.dataset = rank, model, optimizer, dataset
        self.scoring = scoring  # prequential evaluation: each Compute scores its batch (ComputeResult.scores)
        self.graphed = graphed  # the model's CUDA-graph replay, or None: the model (edgestream.trainer.graphs)
        self.task = task
        self.collectives, self.meters, self.device = collectives, meters, device
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.static, self.dynamic = float(static), float(dynamic)
        self.curve = curve  # a compute profile's t(b): the device emulated (emulated_sleep)
        self._rng = np.random.default_rng([seed % 2**64, rank, _TAG_SLOWDOWN])
        self.defer_acks = defer_acks
        self.ack_interval_s = float(ack_interval_s)  # without defer_acks: at most one commit per interval
        self._acked_at = -float("inf")               # monotonic time of the last commit
        self.pending_ack: StreamBatch | None = None  # newest acknowledged batch not yet committed
        # without checkpoints, a commit waits for the step line after its ack to be written through (set by the
        # host: step lines queued and written so far); (the line it waits for, the batch), oldest first
        self.lines_queued: Callable[[], int] | None = None
        self.lines_written: Callable[[], int] | None = None
        self._unwritten: deque[tuple[int, StreamBatch]] = deque()
        self.t0 = time.monotonic() - time_offset
        # due_time(k): when sample k of this device's stream was due (the rate model). With it, the first
        # batch moves the time origin to the stream's start, the simulator's t = 0 (see `_anchor`)
        self.due_time = due_time
        self.stop_event = stop_event or threading.Event()
        self.take_timeout_s = take_timeout_s
        self.ps = ps                      # PSClient of a parameter-server run
        self.push_id = push_id            # the worker's step at a push (its id), set by the host
        self.stop_reason: Callable[[], str | None] | None = None  # why the worker votes stop (set by the host)
        self.staleness: int | None = None  # of the worker's latest pushes, from the PS's last reply
        self.ps_reason: str | None = None  # why the PS said stop (its stop reason)
        self.handles: dict[int, Pending] = {}
        self._next_handle = 0
        self.samples = self.acked_samples = 0
        self.model_lock = threading.Lock()          # held while the model changes (evaluation snapshots)
        self.step: Callable[[], int] = lambda: 0  # the worker's completed steps (set by the host): named in errors
        self.fail_at_step = _fail_at_step()
        self._changes = 0  # model changes (Apply, SetParams): the parameters are checked every PARAM_CHECK_EVERY
        # the loss read without a device sync (edgestream.trainer.losses): on a GPU, unless the compute is
        # emulated (the emulated sleep needs the step's real compute time, so it waits for the device)
        emulated = self.static != 1.0 or self.dynamic > 0 or curve is not None
        if lazy_loss is None:
            lazy_loss = device.type == "cuda" and not emulated
        self.losses = LossWatch(rank, device) if lazy_loss else None

    # ------------------------------------------------------------------ Performer
    def now(self, rank: int) -> float:
        return time.monotonic() - self.t0

    # ------------------------------------------------------------------ data
    def do_take_batch(self, rank: int, req: TakeBatch) -> TrainerBatch:
        asked = None  # when a stop request was first seen while waiting
        while True:
            if self.stop_event.is_set():
                asked = time.monotonic() if asked is None else asked
                if time.monotonic() - asked >= STOP_DATA_WAIT_S:
                    raise Stopped("stopped while waiting for stream data")
            item = self.dataset.next_batch(size=req.size)
            if item is not None:
                break
        batch: StreamBatch = item
        if self.due_time is not None:
            self._anchor(batch)
        n = batch.n  # (what the stream did to get it, `batch.facts`, the driver notes on the step's meter)
        self.samples += n
        return TrainerBatch(batch.x.to(self.device, non_blocking=True), batch.labels.to(self.device, non_blocking=True),
                            n, batch)

    def _anchor(self, batch: StreamBatch) -> None:
        """Set the time origin to when this device's stream began: the first own sample's produce time
        minus when the rate model had it due. Engine time is then "seconds since the streams began", as
        in the simulator: trainer start-up before the stream is not counted, and a stream that began up
        to a minute before the trainer counts from its start. Beyond that (a trainer joining a long-running
        stream, or clocks that disagree: produce times are the producer host's) the trainer's own start
        stays the origin."""
        self.due_time, due_time = None, self.due_time
        own = np.flatnonzero(batch.devices == self.rank)
        if not len(own):
            return
        first = int(own[0])  # the batch's own header fields: no second decode
        since_start = time.time() - (float(batch.produce_times[first]) - due_time(int(batch.seqs[first])))
        if -60.0 < since_start <= time.monotonic() - self.t0 + 60.0:
            self.t0 = time.monotonic() - max(0.0, since_start)

    def do_inject(self, rank: int, req: Inject) -> None:
        indices = req.indices if req.indices is not None else list(range(req.count))
        sent, nbytes = self.dataset.inject(req.batch.stream, list(indices), list(req.targets))
        self.meters[self.rank].count(inject_sent=sent, inject_bytes=nbytes)

    def do_ack(self, rank: int, req: Ack) -> None:
        batch: StreamBatch = req.batch.stream
        self.acked_samples += batch.own
        if self.defer_acks:
            self.pending_ack = batch
            return
        self.pending_ack = batch  # committed by a later ack or by commit_pending
        if self.lines_written is not None:  # its commit waits for the next step line (this step's) to be written
            self._unwritten.append((self.lines_queued() + 1 if self.lines_queued is not None else 0, batch))
        now = time.monotonic()
        if now - self._acked_at < self.ack_interval_s:
            return
        written = self._written_through() if self.lines_written is not None else batch
        if written is None:
            return
        if written is batch:
            self.pending_ack = None
        self._acked_at = now
        # a prefetching dataset commits off the step's critical path (edgestream.trainer.prefetch)
        getattr(self.dataset, "ack_later", self.dataset.ack)(written)

    def _written_through(self) -> StreamBatch | None:
        """The newest acknowledged batch whose step line is written through (the host's `lines_written`), or
        None; the older ones are dropped (a commit covers them)."""
        unwritten, out = self._unwritten, None
        written = self.lines_written() if self.lines_written is not None else 0
        while unwritten and unwritten[0][0] <= written:
            out = unwritten.popleft()[1]
        return out

    def pending_offsets(self) -> dict | None:
        """{"dev": int, "inj": int | None}: the offsets the deferred ack would commit, or None."""
        return dict(self.pending_ack.offsets) if self.pending_ack is not None else None

    def commit_pending(self) -> dict | None:
        """Commit the newest deferred ack (at a checkpoint, or at the end of a run without checkpoints: there the
        newest whose step line is written through, `lines_written`); returns the committed offsets ({"dev": int,
        "inj": int | None}), or None when nothing was pending."""
        batch, self.pending_ack = self.pending_ack, None
        if not self.defer_acks and self.lines_written is not None:
            batch = self._written_through()
        if batch is not None:
            self.dataset.ack(batch)
            return dict(batch.offsets)
        return None

    # ------------------------------------------------------------------ compute and model
    def do_compute(self, rank: int, req: Compute) -> ComputeResult:
        batch: TrainerBatch = req.batch
        if self.fail_at_step is not None and self.step() == self.fail_at_step:
            raise InjectedFailure(f"{TEST_FAIL_AT_STEP}={self.fail_at_step}: the test-only failure at step "
                                  f"{self.fail_at_step}")
        if batch.n == 0:  # only an algorithm's explicit zero-sample take: no forward on an empty tensor
            return ComputeResult([torch.zeros_like(p) for p in self.params], 0.0, 0)
        t0 = time.perf_counter()
        with self.model_lock:
            for p in self.params:
                p.grad = None
            graphed = self.graphed
            output = (self.model if graphed is None else graphed)(batch.x)
            loss = self.task.loss(output, batch.y)
            loss.backward()
            # prequential evaluation: the batch scored by this forward, i.e. by the model before the step
            scores = self.task.sample_sums(output, batch.y) if self.scoring else None
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
            if graphed is not None and graphed.active:
                grads = graphed.fresh(grads)  # out of the graph's static buffers
            losses = self.losses
            if losses is not None:  # read when needed, checked once its step is done on the device
                loss_value: Any = losses.lazy(loss, self.step())
            else:
                loss_value = float(loss.detach())  # synchronises with the device: the step's compute is done
        if losses is not None:
            losses.check()  # Diverged for a finished step's non-finite loss: no wait
        else:
            check_loss(self.rank, loss_value, self.step())  # Diverged: one line naming the device and the step
        dt = time.perf_counter() - t0
        factor = self.static * (1.0 + (float(self._rng.uniform(0.0, self.dynamic)) if self.dynamic > 0 else 0.0))
        extra = emulated_sleep(dt, int(batch.n), factor, self.curve)
        if extra > 0:
            time.sleep(extra)
        return ComputeResult(grads, loss_value, batch.n, scores)

    def settle(self) -> None:
        """Check every loss not checked yet, waiting for the device (lazy losses: edgestream.trainer.losses);
        Diverged naming the first non-finite one's step. Before a checkpoint and at the worker's end."""
        if self.losses is not None:
            self.losses.settle()

    def do_apply(self, rank: int, req: Apply) -> None:
        if len(req.update) != len(self.params):
            raise ValueError(f"Apply: {len(req.update)} update tensors for {len(self.params)} parameters")
        with self.model_lock:
            for p, u in zip(self.params, req.update, strict=True):
                try:  # torch checks the shape, dtype and device of an assigned grad
                    p.grad = u.detach() if u.requires_grad else u
                except RuntimeError:  # another shape (a flat update), dtype or device: converted
                    p.grad = u.detach().reshape(p.shape).to(device=p.device, dtype=p.dtype)
            set_lr(self.optimizer, req.lr)
            self.optimizer.step()
            self._check_params("after the update of step")

    def do_reset_optimizer(self, rank: int, req: ResetOptimizer) -> None:
        """A drift response agreed by the group (edgestream.sync.drift): the optimizer's state (momentum) cleared."""
        with self.model_lock:
            self.optimizer.state.clear()

    def _check_params(self, when: str) -> None:
        """Diverged when a parameter is non-finite, checked at every PARAM_CHECK_EVERY-th change: one fused
        norm over all of them (a NaN or inf anywhere makes the sum non-finite) and one host sync (with lazy
        losses, on a GPU, none: the sum is read once the device has it, `LossWatch.lazy_check`). That
        costs ~0.9 ms on the mlp (~1.3 ms on cnn-small) on a loaded 2-core CPU, 17% of an mlp step, hence
        not every step; the loss, checked every step for free, catches a non-finite parameter at the next
        step's forward anyway."""
        self._changes += 1
        if not self.params or self._changes % PARAM_CHECK_EVERY:
            return
        total = torch.stack(torch._foreach_norm(self.params)).sum()
        step = self.step()
        if self.losses is not None:  # read once the device has it, in step order with the losses: no wait
            rank = self.rank
            self.losses.lazy_check(total, step, lambda: non_finite_params(rank, f"{when} {step}"))
        elif not bool(torch.isfinite(total)):
            raise non_finite_params(self.rank, f"{when} {step}")

    def do_get_params(self, rank: int, req: GetParams) -> list[Tensor]:
        return [p.detach().clone() for p in self.params]

    def do_set_params(self, rank: int, req: SetParams) -> None:
        if len(req.tensors) != len(self.params):
            raise ValueError(f"SetParams: {len(req.tensors)} tensors for {len(self.params)} parameters")
        with self.model_lock, torch.no_grad():
            for p, t in zip(self.params, req.tensors, strict=True):
                p.copy_(t.detach().reshape(p.shape))
            self._check_params("in the model set at step")

    # ------------------------------------------------------------------ collectives
    def do_start(self, rank: int, req: Start) -> Handle:
        if not isinstance(req.request, (AllReduce, AllGather)):
            raise TypeError(f"the trainer starts collectives only, not {type(req.request).__name__}")
        handle = Handle(self._next_handle)
        self._next_handle += 1
        self.handles[handle.id] = self.collectives.start(req.request)
        return handle

    def _pending(self, handle: Handle) -> Pending:
        pending = self.handles.get(handle.id)
        if pending is None:
            raise RuntimeError(f"worker {self.rank} used handle {handle.id}, which is not in flight")
        return pending

    def do_poll(self, rank: int, req: Poll) -> tuple[bool, Any]:
        pending = self._pending(req.handle)
        if not pending.completed():
            return False, None
        del self.handles[req.handle.id]
        return True, pending.get()

    def do_wait(self, rank: int, req: Wait) -> Any:
        pending = self._pending(req.handle)
        del self.handles[req.handle.id]
        return pending.get()

    def do_all_reduce(self, rank: int, req: AllReduce | AllGather) -> Any:
        return self.collectives.run(req)

    do_all_gather = do_all_reduce

    def do_log(self, rank: int, req: Log) -> None:
        if self.staleness is not None:
            self.meters[self.rank].gauge(staleness=self.staleness)
        return None  # the driver writes the step line

    # ------------------------------------------------------------------ parameter server
    def _ps(self) -> Any:
        if self.ps is None:
            raise TypeError("Push/Pull: this trainer has no parameter server (the run's algorithm is not a PS one)")
        return self.ps

    def do_push(self, rank: int, req: Push) -> None:
        ps = self._ps()
        reason = self.stop_reason() if req.stop and self.stop_reason is not None else None
        loss = None if req.loss is None else float(req.loss)  # a lazy loss (edgestream.trainer.losses) read here
        meta = {"reason": reason, "n": int(req.n), "loss": loss, "lr": float(req.lr), "stop": bool(req.stop),
                "commit": bool(req.commit), "losses": [list(x) for x in req.losses] if req.losses is not None else None,
                "nbytes": req.wire_bytes(), "origin": time.time() - self.now(self.rank)}
        step = int(self.push_id()) if self.push_id is not None else 0
        sent = ps.push(req.update, step, version=req.version, meta=meta)
        self.meters[self.rank].count(pushes=1, push_bytes=sent)

    def do_pull(self, rank: int, req: Pull) -> Pulled:
        reply = self._ps().pull()
        blocked = float(reply.meta.get("blocked_s") or 0.0)
        self.meters[self.rank].count(pulls=1, pull_bytes=reply.nbytes, blocked_s=blocked)
        if reply.meta.get("staleness") is not None:
            self.staleness = int(reply.meta["staleness"])
        if reply.stop and reply.meta.get("reason"):
            self.ps_reason = str(reply.meta["reason"])
        return Pulled([t.to(self.device) for t in reply.params], reply.version, reply.stop, reply.info)

    def do_sleep(self, rank: int, req: Sleep) -> None:
        self.stop_event.wait(req.seconds)
