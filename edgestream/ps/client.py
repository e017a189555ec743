"""A worker's side of the Kafka parameter server (edgestream.ps.server): join, push, pull.

* `join()`: sends "hello" and waits for the PS's answer (the current model, its version, the worker's
  last applied push id and next request id). A worker started before the PS waits here and says every
  `note_s` seconds what it waits for.
* `push(update, push_id, ...)`: the update's chunks go to `<run>.ps.push`; returns once the broker
  acknowledged them (then the push survives a PS crash: the restarted PS replays it). push_id is the
  worker's step: ids only grow, so the PS drops a re-sent one.
* `pull()`: sends a pull request (id `next_request`) after the worker's pushes (one partition: the PS
  sees them in order) and waits for the reply with that id on `<run>.ps.pull.<i>`, ignoring replies to
  earlier requests (re-sent by a restarted PS). The PS holds the reply as long as the algorithm says.

Outages (edgestream.kafka.outage): a push or pull that meets a Kafka outage waits for Kafka, keeping its
messages queued, for up to the process's `Outage` budget (runtime.kafka_outage_s; the trainer passes its
own, shared with its readers), saying when the wait starts and ends; then it continues (a push is
acknowledged once: the producer is idempotent; the PS drops a re-sent push id), or, past the budget,
raises KafkaUnavailable naming the address. A stop (signal) while it waits: PSStopped.

Buffers (edgestream.sync.buffers): given the model's floating buffers (`buffers=`, the live tensors), a
push carries their current values after the update's tensors (meta "buffers": their count), and a
pull writes the PS's buffers from its reply into them; a join's reply carries them in `Reply.buffers`
(the trainer loads them when it starts fresh: `set_buffers`). Without floating buffers nothing is
added: the messages are byte for byte those of a model without them.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from edgestream.kafka.outage import Outage
from edgestream.kafka.outage_calls import WaitLines, call_through
from edgestream.kafka.topic_settings import TopicSettings
from edgestream.ps.malloc import keep_large_buffers
from edgestream.ps.transport import (
    Receiver,
    Sender,
    SendInterrupted,
    chunk_bytes,
    ensure_ps_topics,
    pull_topic,
    push_topic,
)
from edgestream.ps.wire import Envelope, Reassembler, WireError, split_buffers, tensor_bytes
from edgestream.sync.buffers import load_buffers

log = logging.getLogger("edgestream.ps.client")


def default_outage_s() -> float:
    """runtime.kafka_outage_s's default (a client given no `Outage` waits this long)."""
    from edgestream.config import RuntimeConfig

    return float(RuntimeConfig.model_fields["kafka_outage_s"].default)


class PSStopped(RuntimeError):
    """The worker was asked to stop (signal) while it waited for the PS."""


@dataclass
class Reply:
    """A PS reply: the model, its version, stop, the coordinator's info and the PS's facts
    (blocked_s, staleness, ...), the bytes it took on the wire and the PS's floating buffers."""

    params: list[Tensor]
    version: int
    stop: bool
    info: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    nbytes: int = 0
    buffers: list[Tensor] = field(default_factory=list)


#: seconds a worker asked to stop (SIGTERM / SIGINT) still waits for the reply it is waiting for (the PS
#: answers within milliseconds while it runs), so that it ends at a step boundary with its checkpoint
STOP_REPLY_WAIT_S = 4.0


class PSClient:
    """Worker `worker`'s connection to the PS of run `run` (module doc)."""

    def __init__(self, bootstrap: str, run: str, worker: int, world: int, model: Sequence[Tensor], *,
                 security: Mapping[str, str] | None = None, stop: Callable[[], bool] | None = None,
                 note_s: float = 10.0, device: Any = "cpu", echo: Callable[[str], None] | None = None,
                 buffers: Sequence[Tensor] = (), outage: Outage | None = None,
                 topic_settings: Callable[[], TopicSettings | None] | None = None) -> None:
        self.run, self.worker = run, worker
        self.buffers = list(buffers)  # the model's floating buffers: live tensors (module doc)
        self.model_bytes = tensor_bytes(list(model) + self.buffers)
        keep_large_buffers(self.model_bytes)
        self.stop = stop or (lambda: False)
        self.outage = outage if outage is not None else Outage(
            bootstrap, default_outage_s(), listener=WaitLines(f"worker {worker}", echo=echo or log.warning))
        # the run's kafka.topics settings (`topic_settings()`: resolved within the outage's wait, it may ask Kafka)
        call_through(self.outage, lambda: ensure_ps_topics(
            bootstrap, run, world, self.model_bytes, security,
            settings=topic_settings() if topic_settings is not None else None),
            f"creating the parameter server's topics of run {run}", should_stop=self.stop)
        self.topic = push_topic(run)
        self.reply_topic = pull_topic(run, worker)
        # read replies from the topic's current end: replies to an earlier session's requests are not ours
        self.receiver = Receiver(bootstrap, self.reply_topic, f"{run}.ps.worker.{worker}", None, security,
                                 outage=self.outage)
        self.sender = Sender(bootstrap, chunk_bytes(self.model_bytes), security, outage=self.outage, stop=self.stop)
        self.reasm = Reassembler(run, device=device)
        self.note_s = float(note_s)
        self.echo = echo  # where "still waiting" notes also go (the trainer: its stderr)
        self.next_request = 1
        self.last_push_id = 0
        self.rejected = 0

    def _await(self, match: Callable[[Envelope], bool], what: str) -> tuple[Envelope, int]:
        """The first reply `match` accepts (its envelope and the bytes of its chunks)."""
        t0 = last_note = time.monotonic()
        nbytes = 0
        asked = None  # when a stop request (a signal) was first seen: the reply may still come (the PS is stopped
        while True:   # after the workers), so the worker waits STOP_REPLY_WAIT_S for it to end at a step boundary
            if self.stop():
                asked = time.monotonic() if asked is None else asked
                if time.monotonic() - asked >= STOP_REPLY_WAIT_S:
                    raise PSStopped(f"stopped while waiting for {what}")
            for raw in self.receiver.poll(0.05):
                if raw.value is None:
                    continue
                nbytes += len(raw.value)
                try:
                    env = self.reasm.add(raw.value)
                except WireError as exc:
                    self.rejected += 1
                    log.warning("worker %d: rejected a message on %s: %s", self.worker, self.reply_topic, exc)
                    continue
                if env is None:
                    continue
                if env.kind == "reply" and env.worker == self.worker and match(env):
                    return env, nbytes
                nbytes = 0  # a reply to an earlier request: not ours
            t = time.monotonic()
            if self.outage.waiting:  # said by the outage; the PS is not the one that is late
                last_note = t
            elif t - last_note >= self.note_s:
                last_note = t
                note = (f"worker {self.worker}: still waiting for {what} on {self.reply_topic} ({t - t0:.0f} s; is "
                        f"`edgestream ps` running for run {self.run}?)")
                log.info("%s", note)
                if self.echo is not None and what.startswith("the parameter server to answer hello"):
                    self.echo(note)

    def join(self) -> Reply:
        """Say hello and wait for the PS; the reply carries the current model."""
        nonce = uuid.uuid4().hex[:12]
        log.info("worker %d: joining the parameter server of run %s (hello on %s, waiting on %s)", self.worker,
                 self.run, self.topic, self.reply_topic)
        self._send(Envelope(self.run, "hello", self.worker, 0, 0, {"nonce": nonce}))
        env, nbytes = self._await(lambda e: e.meta.get("hello") == nonce, "the parameter server to answer hello")
        self.next_request = int(env.meta.get("next_request", 1))
        self.last_push_id = int(env.meta.get("last_push", 0))
        log.info("worker %d: joined at model version %d", self.worker, env.version)
        return self._reply(env, nbytes)

    def _reply(self, env: Envelope, nbytes: int) -> Reply:
        params, buffers = split_buffers(env.tensors, env.meta)
        return Reply(params, env.version, bool(env.meta.get("stop")), dict(env.meta.get("info") or {}), env.meta,
                     nbytes, buffers)

    def set_buffers(self, tensors: Sequence[Tensor]) -> None:
        """Write the PS's floating buffers into the model's (none sent, or none here: nothing changes)."""
        if self.buffers and tensors:
            load_buffers(self.buffers, tensors)

    def push(self, update: Sequence[Tensor], push_id: int, *, version: int, meta: dict[str, Any]) -> int:
        """Send one update (id `push_id`, computed on model `version`); returns the bytes sent."""
        if push_id <= self.last_push_id:
            log.info("worker %d: push %d was applied before (last %d): the PS will drop it", self.worker, push_id,
                     self.last_push_id)
        tensors = [t.detach() for t in update]
        if self.buffers:
            meta = {**meta, "buffers": len(self.buffers)}
            tensors += [b.detach() for b in self.buffers]
        return self._send(Envelope(self.run, "push", self.worker, int(push_id), int(version), meta, tensors))

    def pull(self) -> Reply:
        """Ask for the model and wait for the PS's reply to this request."""
        seq = self.next_request
        self.next_request += 1
        self._send(Envelope(self.run, "pull", self.worker, seq, 0, {}))
        env, nbytes = self._await(lambda e: e.seq == seq and "hello" not in e.meta,
                                  f"the parameter server's reply to pull {seq}")
        reply = self._reply(env, nbytes)
        self.set_buffers(reply.buffers)
        return reply

    def _send(self, env: Envelope) -> int:
        """Send `env` to the push topic and wait for its acknowledgement (through an outage, module doc)."""
        try:
            return self.sender.send(self.topic, env)
        except SendInterrupted as exc:
            raise PSStopped(str(exc)) from None

    def close(self) -> None:
        self.sender.close()
        self.receiver.close()

