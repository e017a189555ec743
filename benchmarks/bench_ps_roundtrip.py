"""Parameter-server round trip through Kafka: one worker's push + pull (reply with the model), p50 / p99
latency and round trips (pushes) per second, for models of ~0.1M, ~1M and ~11M float32 parameters,
side by side with the raw Kafka path on the same broker in the same run.

* PS: `edgestream.ps.server.ParameterServer` (algorithm asp, 1 worker, in a thread of this process)
  and `edgestream.ps.client.PSClient`: a round trip is `push(update)` (returns once the broker acked
  the update's chunks) then `pull()` (a pull request, then the PS's reply: the whole model). The update
  is dense random float32 (the wire format's sparse layout never applies).
* raw: a plain confluent_kafka producer sends values of exactly the sizes the PS's chunks have (the
  push's chunks, acked, then the pull request's value, acked: the client's two flushes) to an "up"
  topic; an echo thread with its own consumer and producer reads them and, once a whole round trip's
  values arrived, sends values of the reply's chunk sizes to a "down" topic, which the client's
  consumer reads back. Same producer and consumer settings as the PS transport (acks=all, idempotent,
  linger 0; fetch.wait.max.ms 5), topics with the same max.message.bytes. What the raw path leaves
  out is the PS's own work: encode/decode and CRCs, the coordinator's apply, its event lines and
  checkpoints.

Passes alternate PS and raw blocks (which goes first alternates too), so both see the same machine.
Throughput = round trips / summed round-trip time; ratio = PS / raw (target >= 0.7 at 11M).

    python benchmarks/bench_ps_roundtrip.py [--sizes 0.1M,1M,11M] [--trips 300,120,24] [--passes 4]

Figures land in bench-out/ps_roundtrip.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).parent))
from common import bench_broker, record  # noqa: E402

from edgestream.config import validate_dict  # noqa: E402
from edgestream.kafka.admin import create_topics  # noqa: E402
from edgestream.kafka.clients import consumer_config, produce, producer_config  # noqa: E402
from edgestream.ps.client import PSClient  # noqa: E402
from edgestream.ps.server import CHECKPOINT_S, ParameterServer  # noqa: E402
from edgestream.ps.transport import chunk_bytes, topic_bytes  # noqa: E402
from edgestream.ps.wire import Envelope, encode, tensor_bytes  # noqa: E402
from edgestream.runner.plan import RunPlan  # noqa: E402

#: label -> (model, input shape); parameter counts with 10 classes: 109,386 / 1,000,266 / 11,173,962
MODELS: dict[str, tuple[str, list[int]]] = {
    "0.1M": ("mlp", [1, 28, 28]),
    "1M": ("mlp", [1, 88, 88]),
    "11M": ("resnet18", [3, 32, 32]),
}
WARMUP = 3


def plan_for(model: str, shape: list[int]) -> RunPlan:
    return RunPlan.resolve(validate_dict({
        "name": "psrt", "seed": 0,
        "data": {"dataset": "synthetic", "shape": shape, "num_classes": 10, "n_train": 20, "n_test": 10},
        "devices": {"count": 1}, "model": {"name": model},
        "optim": {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0},
        "algorithm": {"name": "asp"}, "stop": {"max_steps": 10**9, "target_accuracy": None}}))


# ------------------------------------------------------------------------------------------- PS
class PSPath:
    """A ParameterServer in a thread and one PSClient; `trip()` is one push + pull."""

    def __init__(self, plan: RunPlan, bootstrap: str, run: str, run_dir: Path, checkpoint_s: float) -> None:
        self.stop_event = threading.Event()
        self.server = ParameterServer(plan, run, bootstrap, run_dir, stop_event=self.stop_event,
                                      checkpoint_s=checkpoint_s, evaluate=False)
        self.summary: dict[str, Any] = {}
        self.thread = threading.Thread(target=lambda: self.summary.update(self.server.run()), daemon=True)
        self.thread.start()
        params = list(plan.build_model().parameters())
        self.client = PSClient(bootstrap, run, 0, 1, params)
        joined = self.client.join()
        self.version = joined.version
        g = torch.Generator().manual_seed(1)
        self.update = [torch.randn(p.shape, generator=g) * 1e-3 for p in params]
        self.step = 0
        self.up_bytes = self.down_bytes = 0

    def trip(self) -> tuple[float, float]:
        """(push seconds, pull seconds) of one round trip."""
        self.step += 1
        t0 = time.perf_counter()
        self.up_bytes = self.client.push(self.update, self.step, version=self.version, meta={"lr": 0.1})
        t1 = time.perf_counter()
        reply = self.client.pull()
        t2 = time.perf_counter()
        self.version, self.down_bytes = reply.version, reply.nbytes
        return t1 - t0, t2 - t1

    def close(self) -> dict[str, Any]:
        self.client.close()
        self.stop_event.set()
        self.thread.join(120)
        return self.summary


# ------------------------------------------------------------------------------------------- raw
def _produce(producer: Producer, topic: str, values: list[bytes]) -> None:
    for v in values:
        produce(producer, topic, v, key=b"0")
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"{left} raw message(s) not acknowledged")


def _consumer(bootstrap: str, topic: str, group: str) -> Consumer:
    c = Consumer(consumer_config(bootstrap, group, **{"fetch.wait.max.ms": 5, "fetch.queue.backoff.ms": 1}))
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + 30
    while True:  # from the topic's current end, as the PS receiver of the replies does
        try:
            end = c.get_watermark_offsets(tp, timeout=5.0)[1]
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    c.assign([TopicPartition(topic, 0, end)])
    return c


def _read(c: Consumer, n: int, stop: threading.Event | None = None) -> int:
    """Read `n` values; returns their bytes (0 when `stop` was set first)."""
    got = nbytes = 0
    while got < n:
        if stop is not None and stop.is_set():
            return 0
        for m in c.consume(min(256, n - got), timeout=0.05):
            if m.error() is None and m.value() is not None:
                got += 1
                nbytes += len(m.value())
    return nbytes


class RawPath:
    """The same bytes through plain producers and consumers: client -> up topic -> echo -> down topic."""

    def __init__(self, bootstrap: str, run: str, push_sizes: list[int], request_size: int,
                 reply_sizes: list[int], model_bytes: int) -> None:
        self.up, self.down = f"{run}.raw.up", f"{run}.raw.down"
        create_topics(bootstrap, {self.up: 1, self.down: 1}, max_message_bytes=topic_bytes(model_bytes))
        self.push_values = [os.urandom(n) for n in push_sizes]
        self.request_values = [os.urandom(request_size)]
        self.reply_values = [os.urandom(n) for n in reply_sizes]
        conf = producer_config(bootstrap, **{"linger.ms": 0})
        self.producer = Producer(conf)
        self.reader = _consumer(bootstrap, self.down, f"{run}.raw.client")
        self.stop = threading.Event()
        self.echo_error: list[BaseException] = []
        echo_producer = Producer(conf)
        echo_reader = _consumer(bootstrap, self.up, f"{run}.raw.echo")
        n_up = len(self.push_values) + 1

        def echo() -> None:
            try:
                while not self.stop.is_set():
                    if _read(echo_reader, n_up, self.stop):
                        _produce(echo_producer, self.down, self.reply_values)
            except BaseException as exc:  # noqa: BLE001 - reported by close()
                self.echo_error.append(exc)
            finally:
                echo_reader.close()
                echo_producer.flush(10)

        self.thread = threading.Thread(target=echo, daemon=True)
        self.thread.start()

    def trip(self) -> tuple[float, float]:
        t0 = time.perf_counter()
        _produce(self.producer, self.up, self.push_values)
        t1 = time.perf_counter()
        _produce(self.producer, self.up, self.request_values)
        _read(self.reader, len(self.reply_values))
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.reader.close()
        self.producer.flush(10)
        if self.echo_error:
            raise self.echo_error[0]


# ------------------------------------------------------------------------------------------- measure
def stats(trips: list[tuple[float, float]]) -> dict[str, Any]:
    rt = [a + b for a, b in trips]
    return {"trips": len(rt), "p50_ms": round(1e3 * float(np.percentile(rt, 50)), 2),
            "p99_ms": round(1e3 * float(np.percentile(rt, 99)), 2), "max_ms": round(1e3 * max(rt), 2),
            "per_s": round(len(rt) / sum(rt), 2),
            "push_p50_ms": round(1e3 * statistics.median(a for a, _ in trips), 2),
            "pull_p50_ms": round(1e3 * statistics.median(b for _, b in trips), 2)}


def measure(label: str, bootstrap: str, trips: int, passes: int, checkpoint_s: float) -> dict[str, Any]:
    model, shape = MODELS[label]
    plan = plan_for(model, shape)
    params = list(plan.build_model().parameters())
    n_params = sum(p.numel() for p in params)
    model_bytes = tensor_bytes(params)
    chunk = chunk_bytes(model_bytes)
    run = f"psrt{label.replace('.', '')}-{int(time.time())}"
    # the raw path's value sizes: exactly the PS's chunks (push, pull request, reply)
    upd = [torch.randn(p.shape) for p in params]
    push_sizes = [len(v) for v in encode(Envelope(run, "push", 0, 1, 0, {"lr": 0.1}, upd), chunk)]
    request_size = len(encode(Envelope(run, "pull", 0, 1, 0, {}), chunk)[0])
    print(f"== {label}: {model} {shape}, {n_params:,} float32 parameters, {model_bytes / 2**20:.2f} MiB, "
          f"push {len(push_sizes)} chunk(s)", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="psrt-") as tmp:
        ps = PSPath(plan, bootstrap, run, Path(tmp), checkpoint_s)
        for _ in range(WARMUP):
            ps.trip()
        reply_sizes = [len(v) for v in encode(Envelope(run, "reply", 0, ps.step + 1, ps.version, {
            "stop": False, "info": {}, "blocked_s": 0.0, "staleness": 0, "reason": None}, params), chunk)]
        raw = RawPath(bootstrap, run, push_sizes, request_size, reply_sizes, model_bytes)
        try:
            for _ in range(WARMUP):
                raw.trip()
            per_pass = max(1, trips // passes)
            got: dict[str, list[tuple[float, float]]] = {"ps": [], "raw": []}
            for i in range(passes):
                for kind in ("ps", "raw") if i % 2 == 0 else ("raw", "ps"):
                    path = ps if kind == "ps" else raw
                    got[kind] += [path.trip() for _ in range(per_pass)]
                print(f"  pass {i + 1}/{passes}: PS {stats(got['ps'])['per_s']}/s raw {stats(got['raw'])['per_s']}/s",
                      file=sys.stderr, flush=True)
        finally:
            raw.close()
            summary = ps.close()
    out_ps, out_raw = stats(got["ps"]), stats(got["raw"])
    return {"size": label, "model": model, "shape": shape, "params": n_params, "model_bytes": model_bytes,
            "chunk_bytes": chunk, "push_chunks": len(push_sizes), "reply_chunks": len(reply_sizes),
            "bytes_per_trip": sum(push_sizes) + request_size + sum(reply_sizes),
            "ps_measured_bytes": {"push": ps.up_bytes, "reply": ps.down_bytes},
            "ps": out_ps, "raw": out_raw, "ratio_per_s": round(out_ps["per_s"] / out_raw["per_s"], 3),
            "ratio_p50_latency": round(out_ps["p50_ms"] / out_raw["p50_ms"], 3),
            "ps_mbyte_per_s": round((sum(push_sizes) + sum(reply_sizes)) * out_ps["per_s"] / 1e6, 1),
            "raw_mbyte_per_s": round((sum(push_sizes) + sum(reply_sizes)) * out_raw["per_s"] / 1e6, 1),
            "ps_summary": {k: summary.get(k) for k in ("pushes_applied", "pulls_answered", "rejected",
                                                       "duplicates_dropped")}}


def table(rows: list[dict]) -> str:
    lines = ["| model | params | MiB | PS p50 / p99 (ms) | PS trips/s | raw p50 / p99 (ms) | raw trips/s "
             "| PS / raw (trips/s) | PS push / pull p50 (ms) | raw up / down p50 (ms) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, w = r["ps"], r["raw"]
        lines.append(f"| {r['size']} ({r['model']} {'x'.join(map(str, r['shape']))}) | {r['params']:,} "
                     f"| {r['model_bytes'] / 2**20:.2f} | {p['p50_ms']} / {p['p99_ms']} | {p['per_s']} "
                     f"| {w['p50_ms']} / {w['p99_ms']} | {w['per_s']} | {r['ratio_per_s']} "
                     f"| {p['push_p50_ms']} / {p['pull_p50_ms']} | {w['push_p50_ms']} / {w['pull_p50_ms']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.1M,1M,11M", help=f"of {', '.join(MODELS)}")
    ap.add_argument("--trips", default="300,120,24", help="round trips per path, per size")
    ap.add_argument("--passes", type=int, default=4, help="alternating PS / raw blocks")
    ap.add_argument("--checkpoint-s", type=float, default=CHECKPOINT_S, help="the PS's checkpoint period")
    args = ap.parse_args()
    sizes = args.sizes.split(",")
    trips = [int(x) for x in args.trips.split(",")]
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    with bench_broker() as (bootstrap, _):
        rows = [measure(s, bootstrap, n, args.passes, args.checkpoint_s) for s, n in zip(sizes, trips, strict=True)]
    print(table(rows), file=sys.stderr)
    name = "ps_roundtrip"
    record(name, {"algorithm": "asp", "workers": 1, "passes": args.passes, "checkpoint_s": args.checkpoint_s,
                            "cpus": os.cpu_count(), "wall_s": round(time.perf_counter() - t0, 1),
                            "target": ">= 0.7 PS / raw round trips per second at 11M", "by_size": rows,
                            "table": table(rows)})


if __name__ == "__main__":
    main()
