"""events.jsonl: one JSON line per step per device and per evaluation.

Step lines carry: time, device, step, batch, wait_s, compute_s, comm_s, buffer_samples, buffer_bytes,
dropped, injected, bytes_sent, floats_sent, compressed, loss. Evaluation lines: kind "eval", time,
step, accuracy, loss and the task's other metrics (regression: rmse, mae, loss, with accuracy null).
`EventLog` also keeps the running aggregates the summary needs, so a summary never re-reads the file.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import orjson

from edgestream.tasks import reached

STEP_FIELDS = ("time", "device", "step", "batch", "wait_s", "compute_s", "comm_s", "buffer_samples",
               "buffer_bytes", "dropped", "injected", "bytes_sent", "floats_sent", "compressed", "loss")


def _clean(v):
    kind = type(v)  # the common plain types first: a step line has ~25 fields, written per device-step
    if kind is float:
        return round(v, 6) if math.isfinite(v) else None
    if kind is int or kind is bool or kind is str or v is None:
        return v
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else round(v, 6)
    if getattr(v, "lazy_number", False):  # read when the line is encoded (the trainer's LazyLoss): `_plain`
        return v
    if hasattr(v, "item"):
        return _clean(v.item())
    return v


def _plain(v):
    if getattr(v, "lazy_number", False):
        return _clean(float(v))
    return str(v)


#: the fallback encoder (json.dumps with options builds a new encoder per call)
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_plain)
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS


def _line(rec: dict) -> str:
    """One JSONL line: orjson (~15x the standard library's encoder on a step line; the same values, compact
    separators, floats in their shortest repr, only an exponent written 1e-7 where Python writes 1e-07),
    else the standard library's: for what orjson refuses (an int beyond 64 bits) and for non-ASCII text
    (escaped as before, whatever the reader's locale)."""
    try:
        out = orjson.dumps(rec, default=_plain, option=_ORJSON_OPTIONS)
    except TypeError:
        out = b""
    return out.decode() + "\n" if out and out.isascii() else _ENCODER.encode(rec) + "\n"


#: seconds a live EventLog keeps step lines buffered at most (what the orchestrator's live view lags by)
LIVE_FLUSH_S = 0.25
#: a live EventLog drains at once when this many lines are pending (bounds what lazy values hold)
LIVE_MAX_PENDING = 64


class EventLog:
    """Append-only JSONL event writer with running aggregates.

    keep=True also keeps every record in `records` (in memory, as written), for callers that want the
    events without reading the file back (tests, in-process comparisons). append=True continues an
    existing file (a resumed trainer); live=True (the orchestrator tails a trainer's rank file) buffers
    step lines and a flusher thread encodes and writes them through at least every LIVE_FLUSH_S seconds
    (at once from LIVE_MAX_PENDING lines), other lines (evaluations, outage waits, PS records) at once,
    and everything at `flush()` and `close()`: encoding and writing a step line was on the step's critical
    path. A value the encoder does not know is written as str(value) when the line is encoded (the
    trainer's `ParamDigest` hashes then). Lines written from two threads
    (steps, background evaluations) never interleave.
    """

    def __init__(self, path: str | Path | None, keep: bool = False, *, append: bool = False,
                 live: bool = False) -> None:
        self._f = (open(path, "a" if append else "w", buffering=1 << 16)  # noqa: SIM115
                   if path is not None else None)
        self._lock = threading.Lock()
        self._live = live and self._f is not None
        self._pending: list[dict] = []           # live: lines not yet encoded and written (in order)
        self._drain_lock = threading.Lock()      # one drain at a time: lines keep their order
        self._kick = threading.Event()           # many lines pending: the flusher drains at once
        self._closed = False
        self._error: Exception | None = None     # the flusher's failed write, raised by the next one
        if self._live:
            threading.Thread(target=self._flusher, name="edgestream-events-flush", daemon=True).start()
        self.records: list[dict] | None = [] if keep else None
        self.steps = 0                          # step lines, all devices together (device-steps)
        self.written_steps = 0                  # of them, written through to the file (live: by a drain)
        self.device_steps: dict[int, int] = {}  # per device: the steps it took (its last step index + 1)
        self.samples = 0
        self.buffer_max = 0
        self.dropped = 0
        self.injected = 0
        self.floats_sent = 0
        self.bytes_sent = 0
        self.exchanges = 0
        self.compressed = 0
        self.evals: list[tuple[float, float]] = []   # (time, accuracy), evaluations that have one
        self.eval_metrics: list[tuple[float, dict]] = []  # (time, the task's metrics) of every evaluation
        self._last_loss = None

    def step(self, **fields) -> None:
        self.steps += 1
        device, step = fields.get("device", 0), fields.get("step")
        if isinstance(device, int) and isinstance(step, int):
            self.device_steps[device] = max(self.device_steps.get(device, 0), step + 1)
        self.samples += int(fields.get("batch", 0) or 0)
        self.buffer_max = max(self.buffer_max, int(fields.get("buffer_samples", 0) or 0))
        self.dropped += int(fields.get("dropped", 0) or 0)
        self.injected += int(fields.get("injected", 0) or 0)
        self.floats_sent += int(fields.get("floats_sent", 0) or 0)
        self.bytes_sent += int(fields.get("bytes_sent", 0) or 0)
        if fields.get("compressed") is not None:
            self.exchanges += 1
            self.compressed += int(bool(fields["compressed"]))
        if fields.get("loss") is not None:
            self._last_loss = fields["loss"]  # read when asked for (a lazy loss is not waited for here)
        if self._f is None and self.records is None:  # no file, nothing kept: the line goes nowhere
            return
        self._write({"kind": "step", **{k: _clean(v) for k, v in fields.items()}}, now=False)

    @property
    def last_loss(self) -> float | None:
        """The loss of the newest step line that has one."""
        return None if self._last_loss is None else float(self._last_loss)

    def evaluation(self, time: float, step: int, accuracy: float | None = None, loss: float | None = None,
                   **metrics: float) -> None:
        """An eval line: accuracy (null when the task has none), loss and the task's other metrics."""
        values = {k: _clean(v) for k, v in {"accuracy": accuracy, "loss": loss, **metrics}.items()}
        if accuracy is not None:
            self.evals.append((float(time), float(accuracy)))
        # the model's metrics (not the stream-learning figures an eval line may carry beside them: `preq_*`, drifts)
        self.eval_metrics.append((float(time), {k: v for k, v in values.items()
                                                if v is not None and not is_stream_key(k)}))
        self._write({"kind": "eval", "time": _clean(float(time)), "step": step, **values})

    def series(self, metric: str) -> list[tuple[float, float]]:
        """(time, value) of `metric` over the evaluations that have it."""
        return [(t, float(m[metric])) for t, m in self.eval_metrics if m.get(metric) is not None]

    def record(self, kind: str, **fields) -> None:
        """A line of another kind (e.g. the parameter server's "ps" lines): written as given, not counted
        in the step aggregates."""
        self._write({"kind": kind, **{k: _clean(v) for k, v in fields.items()}})

    def _write(self, rec: dict, now: bool = True) -> None:
        if self._live:  # encoded and written by the flusher (values may be resolved then: ParamDigest)
            with self._lock:
                if self.records is not None:
                    self.records.append(rec)
                if self._error is not None:  # a full disk met by the flusher: the writer's own line names it
                    raise self._error
                self._pending.append(rec)
                # many pending, or the first step line: the run's start shows at once (status "training")
                many = len(self._pending) >= LIVE_MAX_PENDING or self.steps == 1 and rec.get("kind") == "step"
            if now:
                self._drain()
            elif many:
                self._kick.set()
            return
        text = _line(rec) if self._f is not None else ""  # no file: nothing to encode
        with self._lock:
            if self.records is not None:
                self.records.append(rec)
            if self._f is not None:
                self._f.write(text)
                if rec.get("kind") == "step":
                    self.written_steps += 1

    def _drain(self) -> None:
        """Encode and write through the pending lines of a live log, in order."""
        with self._drain_lock:
            with self._lock:
                lines, self._pending = self._pending, []
            if lines and self._f is not None:
                self._f.write("".join(_line(rec) for rec in lines))
                self._f.flush()
                self.written_steps += sum(1 for rec in lines if rec.get("kind") == "step")

    def _flusher(self) -> None:
        while not self._closed:
            self._kick.wait(LIVE_FLUSH_S)
            self._kick.clear()
            try:
                self._drain()
            except Exception as exc:  # noqa: BLE001 - raised by the next write, in the writer's thread
                self._error = exc
                return

    def flush(self) -> None:
        """Write the buffered lines through (a live log's flusher does this every LIVE_FLUSH_S)."""
        if self._live:
            self._drain()
        else:
            with self._lock:
                if self._f is not None:
                    self._f.flush()

    def close(self) -> None:
        self._closed = True
        self._kick.set()
        try:
            if self._live:
                self._drain()
        finally:
            with self._drain_lock, self._lock:
                if self._f is not None:
                    self._f.close()
                    self._f = None

    def summary(self, *, target_accuracy: float | None = None, wall_s: float, engine: str,
                target: tuple[str, float] | None = None, **extra) -> dict:
        """summary.json fields (DESIGN.md "Run directory"). target: (metric, value) that time_to_target_s
        is measured to, in the metric's direction (default: ("accuracy", target_accuracy));
        final_metrics: the last evaluation's metrics."""
        if target is None and target_accuracy is not None:
            target = ("accuracy", float(target_accuracy))
        ttt = (next((t for t, m in self.eval_metrics if reached(target[0], m.get(target[0]), target[1])), None)
               if target is not None else None)
        return {
            "time_to_target_s": ttt,
            "final_accuracy": self.evals[-1][1] if self.evals else None,
            "best_accuracy": max((a for _, a in self.evals), default=None),
            "final_metrics": dict(self.eval_metrics[-1][1]) if self.eval_metrics else None,
            # the run's steps: the most any device took (a synchronous run's max_steps); every device's
            # steps added up are device_steps_total
            "steps": max(self.device_steps.values(), default=self.steps),
            "device_steps_total": self.steps,
            "samples_trained": self.samples,
            "buffer_max_samples": self.buffer_max,
            "dropped_total": self.dropped,
            "injected_total": self.injected,
            "cnc_ratio": (self.compressed / self.exchanges) if self.exchanges else 0.0,
            "floats_sent_total": self.floats_sent,
            "bytes_sent_total": self.bytes_sent,
            "final_loss": self.last_loss,
            "wall_s": round(wall_s, 3),
            "engine": engine,
            **extra,
        }


def is_stream_key(key: str) -> bool:
    """Whether an eval line's `key` is a stream-learning figure (the prequential figures, the drifts so far) rather
    than a metric of the evaluated model."""
    return key.startswith("preq_") or key == "drifts"


def read_events(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
