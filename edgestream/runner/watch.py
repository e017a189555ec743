"""`DeviceWatch`: one device's prequential counters and drift detector, fed at every step, in every engine.

The driver notes each Compute's per-sample scores on the step's meter (`StepMeter.scores`: the task's
`sample_sums` of the forward pass the step's gradients come from, so each sample is scored by the model before
the step that trains on it); at the step's `Log` the session hands them here (`DeviceWatch.step`), which

* adds them to the device's `PrequentialCounter` (cumulative, window, fading; edgestream.metrics.prequential)
  and gives the step line its `preq_<metric>` (the device's window figures), `preq_n` (samples scored so far)
  and `preq_err` (the step's mean prequential error: what the all-devices detector reads);
* feeds the samples' prequential errors (`Task.sample_errors`: 1 - correct, or the absolute error) to the
  device's drift detector (edgestream.drift), in the order they were scored, and returns one `drift` record per
  detection: the device, the samples it had seen, the sequence number (for external streams: the Kafka offset)
  of the sample at which it fired when that sample came from the device's own stream, the detector and its
  statistic.

`state_dict()` holds both (plain lists and numbers): a trainer's checkpoint keeps it, so a resumed run scores
and detects exactly as an uninterrupted one (docs/stream-learning.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgestream.metrics.prequential import line_fields
from edgestream.runner.divergence import ADVICE, Diverged


class DeviceWatch:
    """Device `device`'s prequential counter (`counter`, a PrequentialCounter) and drift detector (`detector`, or
    None) for `task` (module doc)."""

    def __init__(self, device: int, task: Any, counter: Any, detector: Any = None,
                 detector_name: str | None = None) -> None:
        self.device, self.task, self.counter, self.detector = device, task, counter, detector
        self.detector_name = detector_name
        self.detections = 0

    @classmethod
    def of(cls, plan: Any, device: int) -> DeviceWatch | None:
        """The watch of `plan`'s device `device`, or None when the run has no prequential evaluation."""
        counter = plan.prequential_counter()
        if counter is None:
            return None
        drift = getattr(plan.cfg, "drift", None)
        return cls(device, plan.task, counter, plan.drift_detector(),
                   None if drift is None else str(drift.detector))

    def step(self, scored: list[tuple[Any, Any]], *, time: float, step: int) -> tuple[dict[str, Any], list[dict]]:
        """The step's scores ((rows, own-stream seqs) per Compute, oldest first) added: (the step line's fields,
        the drift records of the detections among them)."""
        drifts: list[dict] = []
        if not scored:
            return {}, drifts
        err_sum, err_n = 0.0, 0
        for rows, seqs in scored:
            rows = np.asarray(rows.numpy() if hasattr(rows, "numpy") else rows, dtype=np.float64)
            if len(rows) == 0:
                continue
            before = self.counter.n
            self.counter.update(rows)
            errors = np.asarray(self.task.sample_errors(rows), dtype=np.float64)
            if not np.isfinite(errors).all():  # the model's outputs are: the run diverged (a GPU's lazy loss check
                # may not have said so yet), one line naming the device and the step, as check_loss does
                raise Diverged(f"device {self.device}: the model's predictions are non-finite at step {step}: "
                               f"training diverged ({ADVICE})")
            err_sum += float(errors.sum())
            err_n += len(errors)
            if self.detector is None:
                continue
            positions = self.detector.update_many(errors)
            # each detection's own figures (a later one in the same batch would overwrite statistic()'s)
            stats = getattr(self.detector, "last_statistics", None) or [self.detector.statistic()] * len(positions)
            for pos, stat in zip(positions, stats, strict=False):
                self.detections += 1
                seq = int(seqs[pos]) if seqs is not None and pos < len(seqs) else None
                drifts.append({"time": float(time), "device": self.device, "step": int(step),
                               "samples": before + int(pos) + 1, "seq": seq, "detector": self.detector_name,
                               "scope": "device", "statistic": _plain(stat)})
        fields = line_fields(self.task, self.counter)
        if err_n:
            fields["preq_err"] = round(err_sum / err_n, 6)
        return fields, drifts

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {"counter": self.counter.state_dict(), "detections": self.detections,
                "detector": None if self.detector is None else self.detector.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.counter.load_state_dict(state["counter"])
        self.detections = int(state.get("detections", 0))
        if self.detector is not None and state.get("detector") is not None:
            self.detector.load_state_dict(state["detector"])


class GroupWatch:
    """The all-devices drift detector: reads each step's mean prequential error (`preq_err` of the step lines of
    every device, in the order they are written) and returns a `drift` record (scope "all") per detection."""

    def __init__(self, detector: Any, name: str | None) -> None:
        self.detector, self.name, self.steps, self.detections = detector, name, 0, 0

    @classmethod
    def of(cls, plan: Any) -> GroupWatch | None:
        """The run's all-devices detector, or None: no `drift:` section, or a detector that reads 0/1 errors only
        (ddm: a step's mean error is not one; its devices' detectors still run)."""
        drift = getattr(plan.cfg, "drift", None)
        if drift is None:
            return None
        detector = plan.drift_detector()
        if getattr(detector, "BINARY", False):
            return None
        return cls(detector, str(drift.detector))

    def line(self, line: dict[str, Any]) -> dict | None:
        err = line.get("preq_err")
        if err is None:
            return None
        self.steps += 1
        if not self.detector.update(float(err)):
            return None
        self.detections += 1
        return {"time": float(line.get("time", 0.0)), "device": None, "step": line.get("step"),
                "samples": None, "steps_seen": self.steps, "seq": None, "detector": self.name, "scope": "all",
                "statistic": _plain(self.detector.statistic())}


def with_group_detections(plan: Any, records: list[dict]) -> list[dict]:
    """`records` (a run's merged event lines, in time order) with the all-devices detector's `drift` lines inserted
    after the step lines that triggered them: how a run whose ranks are separate processes (engine local) gets the
    detector the in-process engines run live (`GroupWatch`, over the same per-step errors in the same order)."""
    watch = GroupWatch.of(plan)
    if watch is None:
        return records
    out: list[dict] = []
    for rec in records:
        out.append(rec)
        if rec.get("kind", "step") == "step":
            drift = watch.line(rec)
            if drift is not None:
                out.append({"kind": "drift", **drift})
    return out


def _plain(stat: Any) -> dict[str, Any]:
    return {str(k): (float(v) if isinstance(v, int | float | np.floating | np.integer) else v)
            for k, v in dict(stat or {}).items()}
