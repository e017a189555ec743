"""TensorBoard event files for every run (`<run dir>/tensorboard/`), from the run's event lines.

Written when a run directory is finished (`edgestream.runner.rundir.finish`), for every engine (the
simulator, the real runtime's merged rank files, the lockstep engine), so `tensorboard --logdir runs/`
shows simulated and real runs side by side. The x axis is each series' step; every point also carries
the run's time (virtual seconds for the simulator, seconds since the streams began for a real run) as
its wall time, so TensorBoard's "relative" time axis is the run's own clock.

Scalars (tags `group/series`, one chart per tag in TensorBoard):

* `eval/<metric>` for each of the task's metrics at the evaluation's step (classification:
  `eval/accuracy`, `eval/loss`; regression: `eval/rmse`, `eval/mae`, `eval/loss`);
* per device i, at its own step: `loss/device_i`, `rate/device_i` (its stream's rate S_i(t) at the step's
  time, from the run's rate model), `batch/device_i`,
  `buffer/device_i` (samples buffered: the lag in samples), `lag_seconds/device_i` (the lag in seconds of
  data: how old the oldest unread sample is), `share_wait|share_compute|share_comm/device_i` (the step's
  time split), `floats_sent/device_i` (cumulative), and `staleness/device_i` for parameter-server runs;
* `run/floats_sent` (all devices, cumulative);
* with prequential evaluation (docs/stream-learning.md): `prequential/<metric>` (all devices, since the run began)
  and `prequential_window/<metric>` (all devices, their last `window` samples) at every step line, per device
  `prequential_window_<metric>/device_i` and `prequential_<metric>/device_i`; drift markers: `drift/device_i`
  (1 at each detection on device i), `drift/all` (the all-devices detector) and `drift_start/device_i` (where a
  drift scenario's change began on device i).

Above 32 devices (`MAX_DEVICE_SERIES`) every per-device series is written as `group/mean`, `group/min`
and `group/max` over the devices at each step instead (a 1,000-device run stays readable and quick).

An optional MLflow copy (`log_mlflow`) runs when the `mlflow` package is importable and
`MLFLOW_TRACKING_URI` is set; it is not a dependency.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edgestream.metrics.events import is_stream_key

FOLDER = "tensorboard"
RateOf = Callable[[int, float], float]
#: step-line fields written per device: (field, tag group)
DEVICE_FIELDS = (("loss", "loss"), ("batch", "batch"), ("buffer_samples", "buffer"), ("lag_s", "lag_seconds"),
                 ("staleness", "staleness"))
SHARES = ("wait_s", "compute_s", "comm_s")
#: eval-line fields that are not metrics
EVAL_KEYS = ("kind", "time", "step")
#: above this many devices, per-device series are written as mean / min / max over the devices
MAX_DEVICE_SERIES = 32


def scalars(records: Iterable[dict], rate_of: RateOf | None = None) -> list[tuple[str, float, int, float]]:
    """(tag, value, step, time) of every scalar the module doc lists, in the order of `records`; with more
    than MAX_DEVICE_SERIES devices the per-device series become their mean / min / max over the devices
    at each step (`aggregate`). `rate_of(device, time)`: the stream rate S_i(t) (the run's rate model)."""
    records = list(records)
    devices = {int(r["device"]) for r in records if r.get("kind") == "step" and "device" in r}
    out = _scalars(records, rate_of)
    return aggregate(out) if len(devices) > MAX_DEVICE_SERIES else out


def aggregate(points: list[tuple[str, float, int, float]]) -> list[tuple[str, float, int, float]]:
    """Per-device series `group/device_i` -> `group/mean`, `group/min`, `group/max` per step (time: the
    latest device's); other tags unchanged."""
    out: list[tuple[str, float, int, float]] = []
    per: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for tag, value, step, t in points:
        group, _, series = tag.partition("/")
        if series.startswith("device_"):
            per.setdefault((group, step), []).append((value, t))
        else:
            out.append((tag, value, step, t))
    for (group, step), vals in sorted(per.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        values, t = [v for v, _ in vals], max(t for _, t in vals)
        out += [(f"{group}/mean", sum(values) / len(values), step, t), (f"{group}/min", min(values), step, t),
                (f"{group}/max", max(values), step, t)]
    return out


def _prequential(rec: dict, dev: int, step: int, t: float, pool: Any,
                 out: list[tuple[str, float, int, float]]) -> None:
    """The prequential series of one step line (module doc); pool: the all-devices figures (LivePool)."""
    fields = {k: v for k, v in rec.items() if k.startswith("preq_")}
    pool.update(dev, fields)
    for key, value in fields.items():
        if key in ("preq_n", "preq_wn", "preq_err") or not isinstance(value, (int, float)):
            continue
        if key.startswith("preq_cum_"):
            out.append((f"prequential_{key[9:]}/device_{dev}", float(value), step, t))
        else:
            out.append((f"prequential_window_{key[5:]}/device_{dev}", float(value), step, t))
    for prefix, group in (("preq_cum_", "prequential"), ("preq_", "prequential_window")):
        for name, value in pool.figures(prefix).items():
            out.append((f"{group}/{name}", value, step, t))


def _scalars(records: list[dict], rate_of: RateOf | None) -> list[tuple[str, float, int, float]]:
    out: list[tuple[str, float, int, float]] = []
    floats: dict[int, float] = {}
    pool = None  # the devices' newest prequential fields, pooled (edgestream.metrics.prequential.LivePool)
    for rec in records:
        kind, t = rec.get("kind"), float(rec.get("time", 0.0) or 0.0)
        if kind in ("drift", "drift_start"):
            dev = rec.get("device")
            series = "all" if dev is None else f"device_{dev}"
            out.append((f"{kind}/{series}", 1.0, int(rec.get("step", 0) or 0), t))
            continue
        if kind == "eval":
            step = int(rec.get("step", 0) or 0)
            for key, value in rec.items():
                if (key not in EVAL_KEYS and not is_stream_key(key) and isinstance(value, (int, float))
                        and not isinstance(value, bool)):  # the prequential series come from the step lines
                    out.append((f"eval/{key}", float(value), step, t))
        elif kind == "step" and "device" in rec:
            dev, step = int(rec["device"]), int(rec.get("step", 0) or 0)
            if rate_of is not None:
                out.append((f"rate/device_{dev}", float(rate_of(dev, t)), step, t))
            for field, group in DEVICE_FIELDS:
                value = rec.get(field)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out.append((f"{group}/device_{dev}", float(value), step, t))
            parts = [float(rec.get(k) or 0.0) for k in SHARES]
            total = sum(parts)
            if total > 0:
                for key, part in zip(SHARES, parts, strict=True):
                    out.append((f"share_{key[:-2]}/device_{dev}", part / total, step, t))
            if "preq_n" in rec:
                if pool is None:
                    from edgestream.metrics.prequential import LivePool

                    pool = LivePool()
                _prequential(rec, dev, step, t, pool, out)
            if isinstance(rec.get("floats_sent"), (int, float)):
                floats[dev] = floats.get(dev, 0.0) + float(rec["floats_sent"])
                out.append((f"floats_sent/device_{dev}", floats[dev], step, t))
                out.append(("run/floats_sent", sum(floats.values()), step, t))
    return out


def write_tensorboard(run_dir: str | Path, records: Iterable[dict], *, label: str = "",
                      rate_of: RateOf | None = None) -> Path:
    """Write the run's scalars as TensorBoard event files under `run_dir`/tensorboard; returns that folder.
    `label` (e.g. "ssp@sim") is stored as a text summary so the run names itself in TensorBoard."""
    # TensorBoard's own event-file writer and protos (what torch.utils.tensorboard wraps), without torch: the
    # end of every run pays 0.3 s here, not torch's 2.5 s import
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    folder = Path(run_dir) / FOLDER
    with _writer_errors_raised_here():
        writer = EventFileWriter(str(folder), max_queue_size=1024, flush_secs=3600)
        try:
            if label:  # a text summary, as SummaryWriter.add_text writes it
                meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
                    plugin_name="text", content=TextPluginData(version=0).SerializeToString()))
                tensor = TensorProto(dtype="DT_STRING", string_val=[label.encode()],
                                     tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
                writer.add_event(Event(wall_time=time.time(), step=0, summary=Summary(
                    value=[Summary.Value(tag="run/text_summary", metadata=meta, tensor=tensor)])))
            for tag, value, step, t in scalars(records, rate_of):
                writer.add_event(Event(wall_time=t, step=int(step),
                                       summary=Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])))
        finally:
            writer.close()
    return folder


@contextmanager
def _writer_errors_raised_here() -> Iterator[None]:
    """While the event files are written: an OSError in TensorBoard's writer thread (a full disk) is not
    printed as that thread's traceback; the writer raises it again in this thread, whose caller names it
    in one line (the run's "no space left on device")."""
    hook = threading.excepthook

    def quiet(args: threading.ExceptHookArgs) -> None:
        if not (args.exc_type is not None and issubclass(args.exc_type, OSError)):
            hook(args)

    threading.excepthook = quiet
    try:
        yield
    finally:
        threading.excepthook = hook


def log_mlflow(run_dir: str | Path, records: Iterable[dict], summary: dict[str, Any]) -> bool:
    """Log the run's summary figures and scalars to MLflow when it is installed and MLFLOW_TRACKING_URI is
    set; returns whether it did. Never required: edgestream does not depend on mlflow."""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        return False
    try:
        import mlflow  # type: ignore[import-not-found]
    except ImportError:
        return False
    try:  # the experiment: MLFLOW_EXPERIMENT_NAME, else "edgestream" (created when missing)
        mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or "edgestream")
        with mlflow.start_run(run_name=Path(run_dir).name):
            mlflow.log_params({k: v for k, v in summary.items() if isinstance(v, str)})
            mlflow.log_metrics({k: float(v) for k, v in summary.items()
                                if isinstance(v, (int, float)) and not isinstance(v, bool)})
            for tag, value, step, _ in scalars(records):
                mlflow.log_metric(tag.replace("/", "."), value, step=step)
    except Exception as exc:  # noqa: BLE001 -- an optional logger never fails the run
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        print(f"warning: MLflow logging to {os.environ['MLFLOW_TRACKING_URI']} failed: {first}", file=sys.stderr)
        return False
    return True
