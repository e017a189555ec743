"""`edgestream ps`: the parameter server of a real run, reached only through Kafka.

It hosts the run's coordinator (the algorithm's `sync/` object, the one the simulator hosts as a PS
node) behind the run's PS topics (edgestream.ps.transport) and answers in real time; what each message of
the push topic does (push, pull, hello, timers; a rejection into the DLQ): ps/messages.py.

Kafka outages (edgestream.kafka.outage): the PS waits for Kafka for up to runtime.kafka_outage_s, saying
so on stderr, in ps.log and with "wait" records in ranks/ps.jsonl (state start, end or gave_up:
edgestream.kafka.outage_calls.WaitLines); its replies stay queued meanwhile and it goes on where it was
(no push lost or applied twice: the ids decide). Past the budget it stops like a crash (checkpoint,
summary with status "failed", one line): the orchestrator restarts it, and a PS restarted while Kafka is
away waits the budget again.

Crash safety: every `checkpoint_s` seconds (and at a stop) the PS writes `checkpoints/ps.pt`: the
coordinator's state (model, server optimizer, algorithm state), the push-topic offset to replay from,
the per-worker last push and request ids, the pending pulls and the counters. A restarted PS loads it
and reads the push topic from that offset: pushes after it are applied (none is lost: a worker's push
returns only once the broker acknowledged it), those before it are dropped by id (none is applied
twice). The offset never passes a message whose chunks are still being collected.

Buffers (edgestream.sync.buffers): a push whose meta says "buffers": k carries the worker's k floating
buffers (BatchNorm running statistics) after the update; they go to `Coordinator.push_buffers` (by
default the PS's buffers are the mean of every worker's latest). Every reply (hello and pull) carries
the coordinator's buffers after W, with "buffers": k in its meta; a model without floating buffers
sends and expects none (its messages are unchanged). The checkpoint holds them with the coordinator's
state; a checkpoint without them (written before buffers reached the PS) loads with the initial
buffers, which each worker's next push replaces.

Evaluation: the PS scores its W (with the PS's buffers) every `eval.every_s` seconds of stream time
(time since the workers' streams began, as the workers' step lines count it) into `ranks/ps.jsonl`; reaching
stop.target_accuracy stops the run (`Coordinator.stop()`: every pull then returns with stop). The PS
exits once every worker received a reply that says stop. Files: `ranks/ps.jsonl` (eval lines,
"ps" lines: one per reply, and a "ps_stats" line every second), `ranks/ps.log`,
`ranks/ps.summary.json`, `checkpoints/ps.pt`.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import torch

from edgestream import settings
from edgestream.consumers.from_plan import eval_data
from edgestream.kafka.admin import KafkaUnavailable
from edgestream.kafka.outage import Outage
from edgestream.kafka.outage_calls import WaitLines, call_through
from edgestream.ps.checkpoint import (
    CHECKPOINT_FORMAT,
    PSCheckpointFile,
    PSError,
    ps_checkpoint_path,
    read_ps_checkpoint,
)
from edgestream.ps.malloc import keep_large_buffers
from edgestream.ps.messages import MessageHandling
from edgestream.ps.transport import Receiver, Sender, SendInterrupted, chunk_bytes, ensure_ps_topics, push_topic
from edgestream.ps.wire import Reassembler, tensor_bytes
from edgestream.sync.buffers import floating_buffers, load_buffers

log = logging.getLogger("edgestream.ps")

#: seconds between the PS's checkpoints (and its stats lines)
CHECKPOINT_S = settings.ps_checkpoint_s()
STATS_S = 1.0


def ps_outage(plan: Any, bootstrap: str) -> Outage:
    """The PS's account of Kafka outages (runtime.kafka_outage_s): its lines go to ps.log and stderr
    (ps.out), its records to ps.jsonl once `WaitLines.record` is set."""
    return Outage(bootstrap, plan.cfg.runtime.kafka_outage_s, listener=WaitLines("parameter server"))


def expected_step_s(plan: Any, model: Any) -> float | None:
    """The slowest device's expected step time (ServerContext.step_s), for a coordinator that uses it
    (`uses_step_time`; None for the others): a compute profile's t(b) when the config gives one (the real
    trainers emulate it), else a copy of the model timed here at the run's batch, on this process's CPU
    (the real trainers run the same model; base_s / per_sample_s are the simulator's and ignored here),
    times the slowest device's static factor."""
    if not getattr(plan.algorithm.coordinator, "uses_step_time", False):
        return None
    curve = plan.compute.curve
    if curve is not None:
        return plan.slowest_step_s(curve)
    from edgestream.profiles.measure import time_steps

    ds = plan.dataset
    b = plan.nominal_batch()
    with torch.random.fork_rng(devices=[]):  # a copy: the PS's model (its batch-norm statistics) and RNG untouched
        (t,) = time_steps(copy.deepcopy(model), tuple(ds.shape), int(ds.num_classes), [b], repeats=3, warmup=1)
    return plan.slowest_step_s(lambda _b: t)


class ParameterServer(MessageHandling):
    """The PS of run `run` for `plan` (module doc). `run()` serves until every worker was told to stop
    (returns the summary) or `stop_event` is set (checkpoints, returns the summary with status stopped)."""

    def __init__(self, plan: Any, run: str, bootstrap: str, run_dir: Path, *,
                 stop_event: threading.Event | None = None, checkpoint_s: float = CHECKPOINT_S,
                 evaluate: bool = True) -> None:
        from edgestream.consumers.dlq import DeadLetters

        if plan.algorithm.coordinator is None:
            raise PSError(f"algorithm.name: {plan.algorithm.name!r} is not a parameter-server algorithm "
                          "(it runs with --engine local without a PS)")
        self.plan, self.run_name, self.bootstrap = plan, run, bootstrap
        self.run_dir = Path(run_dir)
        self.world = plan.world
        self.stop_event = stop_event or threading.Event()
        self.checkpoint_s = float(checkpoint_s)
        self.ckpt_file = PSCheckpointFile(ps_checkpoint_path(self.run_dir))  # written in the background
        self.model = plan.build_model()
        initial = [p for p in self.model.parameters() if p.requires_grad]
        self.params = initial
        self.coord = plan.algorithm.coordinator(plan.server_context(expected_step_s(plan, self.model)), initial)
        self.buffers = floating_buffers(self.model)  # the evaluation model's: the PS's are the coordinator's
        if self.buffers:
            self.coord.init_buffers(self.buffers)
        self.model_bytes = tensor_bytes(initial + self.buffers)
        self.chunk = chunk_bytes(self.model_bytes)
        keep_large_buffers(self.model_bytes)
        # ids and bookkeeping (all in the checkpoint)
        self.offset: int | str = "beginning"   # push-topic offset to replay from
        self.last_push = [0] * self.world      # highest push id applied per worker
        self.last_request = [0] * self.world   # highest pull request id registered per worker
        self.pending: dict[int, tuple[int, float]] = {}  # worker -> (request id, when it arrived: PS time)
        self.staleness_since = [0] * self.world  # largest staleness of the worker's pushes since its last reply
        self.told_stop = [False] * self.world
        self.counts = {"pushes_received": 0, "pushes_applied": 0, "duplicates_dropped": 0, "rejected": 0,
                       "pulls_answered": 0, "hellos": 0, "commits": 0, "staleness_sum": 0, "staleness_max": 0,
                       "blocked_s_total": 0.0, "replayed": 0}
        self.blocked_s = [0.0] * self.world
        self.starts = 1
        self.elapsed0 = 0.0
        self.origin_wall: float | None = None   # wall time of the streams' start (from the workers' pushes)
        # the run's session: 0, then +1 per `edgestream run --resume` (ranks/sessions.json, written by the
        # orchestrator before it starts the children); an in-session restart of the PS keeps it
        from edgestream.runner.rundir import read_sessions

        self.session = len(read_sessions(self.run_dir / "ranks").get(0, []))
        ckpt = ps_checkpoint_path(self.run_dir)
        self.resumed = ckpt.exists()
        self.reason: str | None = None
        if self.resumed:
            self._load(ckpt)
        self.t0 = time.monotonic() - self.elapsed0
        self.partial_start: dict[tuple[str, int], int] = {}  # (kind, worker) -> offset of its first chunk
        self.reasm = Reassembler(run)
        self.dlq = DeadLetters(bootstrap, run, plan.security)
        self.outage = ps_outage(plan, bootstrap)
        self.error: str | None = None  # why it stopped, when it failed (Kafka away past the budget)
        self._evaluate = evaluate
        self.replay_until: int | None = None
        self.publisher: Any = None

    # ------------------------------------------------------------------ time
    def now(self) -> float:
        """PS time: monotonic seconds since the PS first started (continued across restarts)."""
        return time.monotonic() - self.t0

    def stream_now(self) -> float:
        """Seconds since the workers' streams began (their engine time), once a push said when."""
        return 0.0 if self.origin_wall is None else max(0.0, time.time() - self.origin_wall)

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        first_partial = min(self.partial_start.values(), default=None)
        offset = self.offset if first_partial is None else first_partial
        return {"format": CHECKPOINT_FORMAT, "run": self.run_name, "coordinator": self.coord.state_dict(),
                "offset": offset, "last_push": list(self.last_push), "last_request": list(self.last_request),
                "pending": {int(w): [int(s), float(t)] for w, (s, t) in self.pending.items()},
                "staleness_since": list(self.staleness_since), "told_stop": list(self.told_stop),
                "counts": dict(self.counts), "blocked_s": list(self.blocked_s), "starts": self.starts,
                "elapsed_s": self.now(), "origin_wall": self.origin_wall, "reason": self.reason,
                "session": self.session}

    def checkpoint(self, *, wait: bool = False) -> None:
        """Take the state now (a deep copy: consistent with its replay offset whatever is applied after) and
        write it (ps/checkpoint.py: in the background, or before this returns with `wait`, at a stop)."""
        self.ckpt_file.write(copy.deepcopy(self.state_dict()), wait=wait)

    def _load(self, path: Path) -> None:
        st = read_ps_checkpoint(path, self.run_name)
        self.coord.load_state_dict(st["coordinator"])
        self.offset = st["offset"]
        self.last_push = [int(x) for x in st["last_push"]]
        self.last_request = [int(x) for x in st["last_request"]]
        self.pending = {int(w): (int(v[0]), float(v[1])) for w, v in st["pending"].items()}
        self.staleness_since = [int(x) for x in st["staleness_since"]]
        self.told_stop = [bool(x) for x in st["told_stop"]]
        self.counts.update(st["counts"])
        self.blocked_s = [float(x) for x in st["blocked_s"]]
        self.starts = int(st["starts"]) + 1
        self.elapsed0 = float(st["elapsed_s"])
        self.origin_wall = st.get("origin_wall")
        self.reason = st.get("reason")
        if int(st.get("session", 0)) != self.session and (self.coord.stopping or any(self.told_stop)):
            # a resumed run's new session: the previous session's stop (a signal, its max_steps) is over; the
            # resumed workers say hello and train on from their checkpoints
            log.info("session %d: the previous session's stop (%s) is cleared", self.session, self.reason)
            self.coord.stopping = False
            self.told_stop = [False] * self.world
            self.reason = None

    # ------------------------------------------------------------------ evaluation
    def _score(self) -> dict[str, float] | None:
        """The metrics of W on the evaluation data (the run's one `evaluate`); None while there is none (a
        stream hold-out still empty)."""
        from edgestream.runner.evaluate import evaluate

        data = self.eval_data.get()
        if data is None:
            return None
        self._model_now()
        return evaluate(self.model, *data, task=self.plan.task)

    def _model_now(self) -> None:
        """`self.model` holds W and the PS's buffers (what is scored and published)."""
        with torch.no_grad():
            for p, w in zip(self.params, self.coord.model(), strict=True):
                p.copy_(w)
        if self.buffers:  # the trained statistics, not the model's initial ones
            load_buffers(self.buffers, self.coord.buffers())

    # ------------------------------------------------------------------ model versions
    def _figures(self) -> dict[str, Any]:
        """The run's latest figures for a model version (edgestream.publish.metrics): the PS's held-out ones
        (the workers' prequential figures stay in their step lines)."""
        ev = getattr(self, "evaluation", None)
        held = None if ev is None or ev.last_metrics is None else {**ev.last_metrics, "time_s": ev.last_time}
        return {"heldout": held, "prequential": None}

    def _publish(self, final: bool = False) -> None:
        """A model version of W when one is due (publish.every_s of stream time, publish.every_steps of model
        versions), and at the end of the run (`final`)."""
        pub, now, step = self.publisher, self.stream_now(), self.coord.version
        if pub is None or self.origin_wall is None or not (final or pub.due(step, now)):
            return
        self._model_now()
        if final:
            pub.final(self.model, step, now, self._figures())
        else:
            pub.offer(self.model, step, now, self._figures)

    def _eval_due(self) -> bool:
        last = self.evaluation.last_time
        return last is None or self.stream_now() >= last + self.evaluation.every_s

    def _eval(self, final: bool = False) -> None:
        """An evaluation of W (the shared `Evaluation`: eval line, the run's StopRule); the stop rule firing
        on target accuracy stops the run at the coordinator."""
        now, version = self.stream_now(), self.coord.version
        if final:
            self.evaluation.final(now, version)
        else:
            self.evaluation.run(now, version)
        if self.stop_rule.reason in ("target_accuracy", "target_metric") and not self.coord.stopping:
            self.reason = self.stop_rule.reason
            self.coord.stop()

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        from edgestream.metrics import EventLog

        run_dir = self.run_dir
        closes: list = []  # what else closes with the PS (an evaluation source)
        (run_dir / "ranks").mkdir(parents=True, exist_ok=True)
        self.events = EventLog(run_dir / "ranks" / "ps.jsonl", append=True, live=True)
        self.outage.listener.record, self.outage.listener.now = self.events.record, self.stream_now
        call_through(self.outage, lambda: ensure_ps_topics(self.bootstrap, self.run_name, self.world,
                                                           self.model_bytes, self.plan.security,
                                                           settings=self.plan.topic_settings(self.bootstrap)),
                     "creating the parameter server's topics")
        if self._evaluate:
            from edgestream.runner.evaluate import Evaluation

            # the test split or eval.path; eval.holdout: the external streams' held-out records, read as they come
            self.eval_data = eval_data(self.plan, self.bootstrap, self.run_name)
            closes.append(self.eval_data.close)
            self.stop_rule = self.plan.stop_rule()
            self.evaluation = Evaluation(self._score, self.events, self.stop_rule, self.plan.eval_every_s,
                                         on_eval=lambda t, v, acc: log.info("eval t=%.1fs version %d accuracy %.4f",
                                                                            t, v, acc))
        self.sender = Sender(self.bootstrap, self.chunk, self.plan.security, outage=self.outage,
                             stop=self.stop_event.is_set)
        from edgestream.publish.publisher import ModelPublisher

        self.publisher = ModelPublisher.of(self.plan, self.run_name, run_dir, self.bootstrap, outage=self.outage,
                                           stop=self.stop_event.is_set)  # model versions, with `publish:`
        if self.publisher is not None:
            closes.append(self.publisher.close)
        receiver = Receiver(self.bootstrap, push_topic(self.run_name), f"{self.run_name}.ps", self.offset,
                            self.plan.security, outage=self.outage)
        if self.resumed:
            try:
                _, high = receiver.consumer.get_watermark_offsets(receiver.consumer.assignment()[0], timeout=10.0)
                self.replay_until = int(high)
            except Exception:  # noqa: BLE001 - only a counter depends on it
                self.replay_until = None
            log.info("restarted (start %d): replaying %s from offset %s", self.starts, push_topic(self.run_name),
                     self.offset)
        log.info("serving run %s (%s, %d workers, model %.2f MB, chunks of %.2f MB) on %s; device cpu (the PS "
                 "applies what Kafka brings; its workers take GPUs by edgestream.trainer.gpus)", self.run_name,
                 self.plan.algorithm.name, self.world, self.model_bytes / 1e6, self.chunk / 1e6, self.bootstrap)
        self.events.record("ps_start", time=self.stream_now(), start=self.starts, offset=self.offset,
                           last_push=list(self.last_push), version=self.coord.version)
        last_ckpt = last_stats = time.monotonic()
        pushes_at_stats = self.counts["pushes_applied"]
        status = "finished"
        try:
            while not all(self.told_stop):
                if self.stop_event.is_set():
                    status = "stopped"
                    break
                timeout = 0.05
                at = self.coord.next_timer()
                if at is not None:
                    timeout = min(timeout, max(0.0, at - self.now()))
                for raw in receiver.poll(timeout):
                    self.handle_raw(raw)
                    self.timers()
                    self.release()
                self.timers()
                self.release()
                if self._evaluate and self.origin_wall is not None and self._eval_due():
                    self._eval()
                    self.release()
                self._publish()
                t = time.monotonic()
                if t - last_stats >= STATS_S:
                    applied = self.counts["pushes_applied"]
                    self.events.record("ps_stats", time=self.stream_now(), version=self.coord.version,
                                       pushes_per_s=round((applied - pushes_at_stats) / (t - last_stats), 3),
                                       pending=sorted(self.pending), **{k: self.counts[k] for k in (
                                           "pushes_applied", "duplicates_dropped", "rejected", "commits")})
                    last_stats, pushes_at_stats = t, applied
                if t - last_ckpt >= self.checkpoint_s:
                    self.checkpoint()
                    last_ckpt = t
            if status == "finished" and self._evaluate and self.origin_wall is not None:
                self._eval(final=True)
            if status == "finished":
                self._publish(final=True)
        except SendInterrupted:  # a stop while a reply waited for Kafka
            status = "stopped"
        except KafkaUnavailable as exc:  # Kafka away past runtime.kafka_outage_s
            status, self.error = "failed", str(exc)
        finally:
            try:
                self.checkpoint(wait=True)
            finally:
                for close in (receiver.close, self.sender.close, self.dlq.flush, self.events.close, *closes):
                    try:
                        close()
                    except Exception as exc:  # noqa: BLE001 - close the rest; the first error stays the one raised
                        log.error("closing: %s: %s", type(exc).__name__, exc)
        summary = self.summary(status)
        (run_dir / "ranks" / "ps.summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if self.error is not None:
            raise PSError(self.error)
        return summary

    def summary(self, status: str = "finished") -> dict[str, Any]:
        c = self.counts
        applied, waits = c["pushes_applied"], self.outage.listener
        return {"status": status, "stop_reason": self.reason, "starts": self.starts, "error": self.error,
                "device": "cpu", "kafka_waits": waits.waits, "kafka_wait_s": round(waits.total_s(self.outage), 3),
                "pushes_received": c["pushes_received"], "pushes_applied": applied,
                "duplicates_dropped": c["duplicates_dropped"], "rejected": c["rejected"],
                "replayed": c["replayed"], "pulls_answered": c["pulls_answered"], "hellos": c["hellos"],
                "commits": c["commits"], "staleness_mean": round(c["staleness_sum"] / applied, 4) if applied else 0.0,
                "staleness_max": c["staleness_max"], "blocked_s": [round(b, 6) for b in self.blocked_s],
                "blocked_s_total": round(c["blocked_s_total"], 6), "last_push": list(self.last_push),
                "model_bytes": self.model_bytes, "chunk_bytes": self.chunk, **self.coord.summary()}


__all__ = ["CHECKPOINT_FORMAT", "PSError", "ParameterServer", "expected_step_s", "ps_checkpoint_path", "ps_outage"]
