"""What the parameter server (ps/server.py) does with each message of its push topic, and its replies:

* push: an update from a worker (`Envelope` kind "push", seq = the worker's step: the push id). A push
  whose id is not above the last one applied for that worker is a duplicate (a replay after a PS
  restart, a resumed worker re-sending) and is dropped; otherwise `Coordinator.push(worker, Push, now)`.
* pull: a pull request (seq = the worker's request id). It waits in `pending` until
  `Coordinator.ready(worker, now)`; then the reply (`Coordinator.pull`: the model, version, stop, info)
  goes to `<run>.ps.pull.<worker>`. Blocking semantics (SSP's bound, ElasticBSP's barrier, BSP's
  round) are the PS delaying this reply; the reply says how long it was held (`blocked_s`) and the
  staleness of the worker's pushes since its last reply (versions applied between the model the
  update was computed on and its arrival).
* hello: a worker joining (its first message, and again after a restart): answered at once with the
  current model and version and the worker's last applied push id, outside the coordinator.
* timers: `Coordinator.next_timer()` is honoured between messages (ADSP's checkpoints, barriers).

A message that is malformed, truncated, fails its checksum or names another run is rejected with a
reason into the run's DLQ and counted (`rejected`); it is never applied.

`MessageHandling` is `ParameterServer`'s half that reads and answers messages; the server (its state, checkpoint,
evaluation and loop) holds what these methods read and write: the coordinator `coord`, the bookkeeping
(`offset`, `last_push`, `last_request`, `pending`, `staleness_since`, `told_stop`, `counts`, `blocked_s`,
`partial_start`, `replay_until`, `reason`, `origin_wall`), `reasm`, `dlq`, `sender`, `events`, `params`,
`buffers`, and its clocks (`now`, `stream_now`) and evaluation (`evaluation`, `_eval`) for a run's first push.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from edgestream.ps.transport import pull_topic, push_topic
from edgestream.ps.wire import Envelope, WireError, peek, split_buffers
from edgestream.sync.requests import Push

log = logging.getLogger("edgestream.ps")


class MessageHandling:
    """The push topic's messages as `ParameterServer` handles them (the module doc)."""

    def _reject(self, raw: Any, reason: str, *, keep_value: bool = True) -> None:
        self.counts["rejected"] += 1
        log.warning("rejected a message at %s offset %d: %s", push_topic(self.run_name), raw.offset, reason)
        self.dlq.send(raw.value if keep_value else None, reason, source_topic=push_topic(self.run_name),
                      offset=raw.offset, key=raw.key)

    def handle_raw(self, raw: Any) -> None:
        """One Kafka message of the push topic: reassemble, then act on a complete envelope."""
        self.offset = raw.offset + 1
        if raw.value is None:
            self._reject(raw, "empty message")
            return
        try:
            head = peek(raw.value)
        except WireError as exc:
            self._reject(raw, str(exc))
            return
        key = (head.kind, head.worker)
        started = key not in self.partial_start
        if started:  # the replay offset must not pass a message still being collected
            self.partial_start[key] = raw.offset
        try:
            env = self.reasm.add(raw.value)
        except WireError as exc:
            if started:
                self.partial_start.pop(key, None)
            self._reject(raw, str(exc))
            return
        for reason in self.reasm.drain_lost():  # an older message lost chunks; this one began here
            self.partial_start[key] = raw.offset
            self._reject(raw, reason, keep_value=False)
        if env is None:
            return
        self.partial_start.pop(key, None)
        if not 0 <= env.worker < self.world:
            self._reject(raw, f"worker {env.worker} is outside the run's devices 0-{self.world - 1}")
            return
        if self.replay_until is not None and raw.offset < self.replay_until:
            self.counts["replayed"] += 1
        try:
            {"push": self._push, "pull": self._pull, "hello": self._hello}[env.kind](env)
        except KeyError:
            self._reject(raw, f"a {env.kind!r} message on the push topic")
        except (ValueError, TypeError, RuntimeError) as exc:  # a push that does not fit the model
            self._reject(raw, f"{env.kind} of worker {env.worker} seq {env.seq}: {exc}")

    def _push(self, env: Envelope) -> None:
        w = env.worker
        self.counts["pushes_received"] += 1
        if env.seq <= self.last_push[w]:
            self.counts["duplicates_dropped"] += 1
            log.info("dropped a duplicate push of worker %d (id %d, last applied %d)", w, env.seq, self.last_push[w])
            return
        m = env.meta
        update, buffers = split_buffers(env.tensors, m)
        shapes = [tuple(t.shape) for t in update]
        if shapes != [tuple(p.shape) for p in self.params]:
            raise ValueError(f"{len(update)} tensors do not match the model's {len(self.params)} parameters")
        if buffers and [tuple(t.shape) for t in buffers] != [tuple(b.shape) for b in self.buffers]:
            raise ValueError(f"{len(buffers)} buffers do not match the model's {len(self.buffers)} floating buffers")
        if self.origin_wall is None and m.get("origin") is not None:
            self.origin_wall = float(m["origin"])
            if self._evaluate and self.evaluation.last_time is None:
                self._eval()  # W0 at t = 0, as every engine scores it
        losses = m.get("losses")
        push = Push([t.to(p.dtype) for t, p in zip(update, self.params, strict=True)], version=env.version,
                    n=int(m.get("n", 0)), loss=m.get("loss"), lr=float(m.get("lr", 0.0)), stop=bool(m.get("stop")),
                    commit=bool(m.get("commit")), losses=[tuple(x) for x in losses] if losses is not None else None,
                    nbytes=m.get("nbytes"))
        if buffers:
            self.coord.push_buffers(w, buffers)
        facts = self.coord.push(w, push, self.now())
        lag = int(facts.get("staleness", 0))
        self.last_push[w] = env.seq
        self.counts["pushes_applied"] += 1
        self.counts["commits"] += int(push.commit)
        self.counts["staleness_sum"] += lag
        self.counts["staleness_max"] = max(self.counts["staleness_max"], lag)
        self.staleness_since[w] = max(self.staleness_since[w], lag)
        self.events.record("ps_push", time=self.stream_now(), worker=w, id=env.seq, version=env.version,
                           staleness=lag, applied_version=self.coord.version)
        if push.stop and self.reason is None:
            self.reason = str(m.get("reason") or "worker_stop")

    def _pull(self, env: Envelope) -> None:
        w = env.worker
        if env.seq <= self.last_request[w]:
            return  # replayed request, registered (and answered) before
        self.last_request[w] = env.seq
        self.pending[w] = (env.seq, self.now())

    def _hello(self, env: Envelope) -> None:
        w = env.worker
        self.counts["hellos"] += 1
        meta = {"hello": env.meta.get("nonce"), "last_push": self.last_push[w],
                "next_request": self.last_request[w] + 1, "stop": self.coord.stopping, "info": {}}
        tensors = self._with_buffers(list(self.coord.model()), meta)
        reply = Envelope(self.run_name, "reply", w, env.seq, self.coord.version, meta, tensors)
        self.sender.send(pull_topic(self.run_name, w), reply)
        log.info("worker %d joined (last push %d)", w, self.last_push[w])

    def release(self) -> None:
        """Answer every pending pull the coordinator lets return now."""
        now = self.now()
        for w in sorted(self.pending):
            if not self.coord.ready(w, now):
                continue
            seq, since = self.pending.pop(w)
            reply = self.coord.pull(w, now, copy=False)  # encoded (sent) below, before W changes
            blocked = max(0.0, now - since)
            self.blocked_s[w] += blocked
            self.counts["blocked_s_total"] += blocked
            self.counts["pulls_answered"] += 1
            stale, self.staleness_since[w] = self.staleness_since[w], 0
            info = _plain(reply.info)
            meta = {"stop": bool(reply.stop), "info": info, "blocked_s": blocked, "staleness": stale,
                    "reason": self.reason}
            tensors = self._with_buffers(reply.params, meta)
            self.sender.send(pull_topic(self.run_name, w), Envelope(self.run_name, "reply", w, seq, reply.version,
                                                                    meta, tensors))
            if reply.stop:
                self.told_stop[w] = True
            self.events.record("ps", time=self.stream_now(), ps_time=round(now, 6), worker=w, request=seq,
                               version=reply.version, stop=bool(reply.stop), blocked_s=round(blocked, 6),
                               staleness=stale, pushes=list(self.coord.pushes), info=info)

    def _with_buffers(self, params: list[torch.Tensor], meta: dict[str, Any]) -> list[torch.Tensor]:
        """A reply's tensors: W, then the coordinator's floating buffers (counted in `meta`), if the model has any."""
        if not self.buffers:
            return params
        meta["buffers"] = len(self.buffers)
        return params + self.coord.buffers()

    def timers(self) -> None:
        at = self.coord.next_timer()
        if at is not None and self.now() >= at:
            self.coord.timer(self.now())


def _plain(v: Any) -> Any:
    """JSON-able copy of coordinator info (tensors and numpy scalars to plain values)."""
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, torch.Tensor):
        return v.tolist()
    if hasattr(v, "item") and callable(v.item):
        return v.item()
    return v
