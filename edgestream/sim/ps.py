"""The parameter server in virtual time: a run's coordinator hosted as a PS node.

Each device has a full-duplex link to the PS (the config's devices.network: latency + bytes /
bandwidth per message); a device's messages in one direction queue on its link, different devices'
links are independent, and the PS itself answers instantly.

* Push: the update's wire bytes (`Push.wire_bytes`: compressed updates count their real bytes) cross
  the device's uplink; the worker is busy while they do. On arrival the coordinator applies or
  buffers it (`Coordinator.push`), then pending pulls are re-checked and the coordinator's timer
  re-armed.
* Pull: blocks while the coordinator says the pull may not return (`ready`; the blocked time is
  recorded), then the reply (a copy of W taken at that moment) crosses the downlink.
* Buffers (a model with floating buffers: BatchNorm running statistics; edgestream.sync.buffers): a
  push carries the worker's replica's floating buffers (read when the push arrives: the worker is busy
  while it uploads) and costs their bytes too; a reply carries the coordinator's buffers of the moment
  it is answered, written into the worker's replica when the download ends, and costs their bytes.
  Evaluation scores W with the coordinator's buffers (`eval_model`). A model without floating buffers
  moves and costs exactly what it did before.
* Timers: when `next_timer()` names a time, a SimPy timeout calls `timer(now)` then (and re-checks
  pulls); a timer the coordinator has since moved is ignored.

Recorded on the worker's `StepMeter` (so in its events.jsonl step lines): pushes, push_bytes,
staleness (the largest version lag of the step's pushes at arrival), pulls, pull_bytes, blocked_s;
run totals go to the summary (`summary()`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from edgestream.compression import payload_nbytes
from edgestream.runner.driver import StepMeter
from edgestream.sim.costs import NetworkModel
from edgestream.sync.buffers import floating_buffers, load_buffers
from edgestream.sync.coordinator import Coordinator
from edgestream.sync.requests import Pulled, Push


class PSNode:
    """Hosts `coordinator` for `world` workers on `env` with `network` links; `meters` are the
    workers' StepMeters (the driver's), looked up at record time; `replicas` (edgestream.sim.replicas)
    the workers' models, whose floating buffers travel with pushes and replies (None: no buffers move)."""

    def __init__(self, env: simpy.Environment, coordinator: Coordinator, network: NetworkModel, world: int,
                 meters: dict[int, StepMeter], replicas: Any = None) -> None:
        self.env = env
        self.coord = coordinator
        self.replicas = replicas
        initial = floating_buffers(replicas.base) if replicas is not None else []
        self.buffered = bool(initial)
        if self.buffered:
            coordinator.init_buffers(initial)
        self.buffer_bytes = payload_nbytes(initial)
        self.network = network
        self.world = world
        self.meters = meters
        self.up_free = [0.0] * world
        self.down_free = [0.0] * world
        self.waiting: dict[int, list[simpy.Event]] = {}  # rank -> its pulls held back (a background one too)
        self.armed: float | None = None
        self.blocked_s = [0.0] * world
        self.push_bytes = [0] * world
        self.pull_bytes = [0] * world
        self.staleness_sum = 0
        self.staleness_max = 0
        self.applied_pushes = 0

    def _meter(self, rank: int) -> StepMeter:
        return self.meters.setdefault(rank, StepMeter())

    def _send(self, free: list[float], rank: int, nbytes: int) -> float:
        """Queue `nbytes` on a link of `rank`; the virtual time the transfer ends."""
        start = max(float(self.env.now), free[rank])
        end = start + self.network.transfer(nbytes)
        free[rank] = end
        return end

    # ------------------------------------------------------------------ requests
    def _buffers_of(self, rank: int) -> list[Any]:
        """Worker `rank`'s replica's floating buffers (the tensors themselves); a model with buffers
        always has per-worker replicas (edgestream.sim.replicas)."""
        return floating_buffers(self.replicas.models[rank])

    def push(self, rank: int, req: Push) -> Generator[Any, Any, None]:
        nbytes = req.wire_bytes() + self.buffer_bytes
        end = self._send(self.up_free, rank, nbytes)
        yield self.env.timeout(end - self.env.now)
        if self.buffered:
            self.coord.push_buffers(rank, self._buffers_of(rank))
        facts = self.coord.push(rank, req, float(self.env.now))
        lag = int(facts.get("staleness", 0))
        self.push_bytes[rank] += nbytes
        self.staleness_sum += lag
        self.staleness_max = max(self.staleness_max, lag)
        self.applied_pushes += 1
        meter = self._meter(rank)
        meter.count(pushes=1, push_bytes=nbytes)
        meter.gauge(staleness=max(lag, int(meter.gauges.get("staleness", 0))))
        self.changed()
        return None

    def pull(self, rank: int) -> Generator[Any, Any, Pulled]:
        t0 = float(self.env.now)
        while not self.coord.ready(rank, float(self.env.now)):
            ev = self.env.event()
            self.waiting.setdefault(rank, []).append(ev)
            yield ev
        blocked = float(self.env.now) - t0
        reply = self.coord.pull(rank, float(self.env.now))
        buffers = self.coord.buffers()  # of this moment: the coordinator never changes these tensors
        nbytes = payload_nbytes(reply.params) + self.buffer_bytes
        end = self._send(self.down_free, rank, nbytes)
        yield self.env.timeout(end - self.env.now)
        if self.buffered:
            load_buffers(self._buffers_of(rank), buffers)
        self.blocked_s[rank] += blocked
        self.pull_bytes[rank] += nbytes
        self._meter(rank).count(pulls=1, pull_bytes=nbytes, blocked_s=blocked)
        return reply

    # ------------------------------------------------------------------ wake-ups
    def changed(self) -> None:
        """After a push or timer: release pulls that may return now; arm the coordinator's timer."""
        now = float(self.env.now)
        for rank in sorted(self.waiting):
            if self.coord.ready(rank, now):
                for ev in self.waiting.pop(rank):
                    ev.succeed()
        self._arm()

    def _arm(self) -> None:
        at = self.coord.next_timer()
        if at is None or at == self.armed:
            return
        self.armed = at
        ev = self.env.timeout(max(0.0, at - float(self.env.now)))
        ev.callbacks.append(self._fire(at))

    def _fire(self, at: float) -> Callable[[Any], None]:
        def fire(_ev: Any) -> None:
            if self.armed != at:
                return  # a newer timer is armed
            if self.coord.next_timer() != at:  # the coordinator moved its timer since (a pull advanced it)
                self.armed = None
                self._arm()
                return
            self.armed = None
            self.coord.timer(float(self.env.now))
            self.changed()

        return fire

    def eval_model(self) -> Any:
        """The model evaluation scores: W with the coordinator's floating buffers (a scratch model)."""
        model = self.replicas.model_with(self.coord.model())
        if self.buffered:
            load_buffers(floating_buffers(model), self.coord.buffers())
        return model

    def stop(self) -> None:
        """End the run at the PS (hard limit): every pending pull returns with stop."""
        self.coord.stop()
        self.changed()

    # ------------------------------------------------------------------ results
    def summary(self) -> dict[str, Any]:
        pushes = self.applied_pushes
        return {
            **self.coord.summary(),
            "push_bytes": list(self.push_bytes),
            "pull_bytes": list(self.pull_bytes),
            "blocked_s": [round(b, 6) for b in self.blocked_s],
            "blocked_s_total": round(sum(self.blocked_s), 6),
            "staleness_mean": round(self.staleness_sum / pushes, 4) if pushes else 0.0,
            "staleness_max": self.staleness_max,
        }
