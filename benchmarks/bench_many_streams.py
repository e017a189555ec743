"""Many device streams (issue 31 item 6): 100, 1,000 and 5,000 devices on one managed broker
(edgestream.kafka.LocalBroker) or a three-node cluster (edgestream.kafka.cluster.LocalCluster), per-device
layout (`<run>.dev.<i>` + `<run>.inj.<i>`: 2 topics per device) vs partitioned (`<run>.streams` + `<run>.inj`
of min(devices, 64) partitions: kafka.topics.layout), side by side in the same run and on the same broker:

- topic creation: seconds for edgestream's run-topic creation (kafka/topic_provision.py ensure_run_topics, with the
  run's resolved kafka.topics settings: replication min(3, brokers)) to return with every topic ready, or its
  error line and the seconds until they were all ready after all (`create_total_s`, waiting up to 120 s more);
- producer rate held: edgestream's StreamProducer drives every device at `--rate` samples/s for `--duration`
  seconds (one process, 64-byte digits-like samples); per device delivered / due -- the mean, the 5th
  percentile and the worst device -- and the seconds its final flush took (acknowledging what was queued);
  `live_*`: the same fractions of what the broker had acknowledged by 90 % of the time (while producing);
- broker memory: the broker JVMs' resident set (VmRSS, summed over the nodes) before the run's topics, after
  creating them and after producing;
- consumer start: for `--sample` devices spread over the range, seconds from opening the device's reader
  (KafkaDeviceStream: its consumer group, committed offset, watermarks) to its first sample taken
  (median and worst);
- topic deletion: seconds to delete the run's topics again (the next case starts on a clean broker).

Every load is bounded in count and time (creation timeout 120 s; producing `--duration` s plus a 30 s flush;
consumer starts at most 30 s each). Run one size at a time on a shared machine:

    python benchmarks/bench_many_streams.py [--devices 100,1000] [--cluster] [--rate 2] [--duration 10]
                                            [--sample 10] [--layouts per-device,partitioned]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import bench_broker, record  # noqa: E402

from edgestream.config.kafka import TopicsConfig  # noqa: E402
from edgestream.consumers.kafka_stream import KafkaDeviceStream  # noqa: E402
from edgestream.data import encode_sample  # noqa: E402
from edgestream.kafka.admin import create_topics, delete_run_topics  # noqa: E402
from edgestream.kafka.layout import StreamLayout  # noqa: E402
from edgestream.kafka.topic_provision import ensure_run_topics  # noqa: E402
from edgestream.kafka.topic_settings import TopicSettings  # noqa: E402
from edgestream.producers.stream_producer import StreamProducer  # noqa: E402
from edgestream.streams import build_batch_policy, build_buffer_policy  # noqa: E402

PER_DEVICE_SAMPLES = 4  # each device's shard (its stream loops over it)


class ConstantRates:
    """Every device at `rate` samples/s (the producer's rate-model interface)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def cumulative(self, device: int, t: float) -> float:
        return self.rate * t

    def due_time(self, device: int, k: int) -> float:
        return k / self.rate

    def base_rate(self, device: int) -> float:
        return self.rate


def rss_mb(pids: list[int]) -> float | None:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            return None
    return round(total / 1024, 1)


def one_case(bootstrap: str, pids: list[int], devices: int, layout_name: str, args, settings) -> dict:
    run = f"bench-many-{layout_name[:3]}-{devices}-{uuid.uuid4().hex[:6]}"
    topics = TopicsConfig(layout=layout_name)
    layout = StreamLayout.of(run, devices, topics)
    out: dict = {"devices": devices, "layout": layout_name, "partitions": layout.partitions or 1,
                 "topics": len(layout.topics()) + 1, "rss_before_mb": rss_mb(pids)}
    t0 = time.monotonic()
    try:
        ensure_run_topics(bootstrap, run, range(devices), layout=layout, settings=settings)
        out["create_s"] = round(time.monotonic() - t0, 2)
    except Exception as exc:  # noqa: BLE001 - the figure is the error line
        out["create_s"], out["create_error"] = round(time.monotonic() - t0, 2), str(exc)[:200]
        try:  # finish creating them (bounded) so that the other figures can still be measured
            create_topics(bootstrap, {**layout.topics(), f"{run}.dlq": 1}, timeout=120, settings=settings)
            out["create_total_s"] = round(time.monotonic() - t0, 2)
        except Exception as exc2:  # noqa: BLE001
            out["error"] = f"topics not created: {str(exc2)[:200]}"
            out["delete_s"] = _delete(bootstrap, run)
            return out
    out["rss_topics_mb"] = rss_mb(pids)
    # producing: every device at args.rate for args.duration seconds
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(devices * PER_DEVICE_SAMPLES, 1, 8, 8), dtype=np.uint8)
    y = np.arange(len(x)) % 10
    shards = [np.arange(d * PER_DEVICE_SAMPLES, (d + 1) * PER_DEVICE_SAMPLES) for d in range(devices)]
    prod = StreamProducer(bootstrap, run, range(devices), x, y, shards, ConstantRates(args.rate),
                          encode_sample, create_topics=False, resume=False, layout=layout)
    live: list[dict] = []  # one report near the end: each device's acknowledged rate while producing
    summary = prod.run_for(args.duration, report=live.append, report_every_s=0.9 * args.duration,
                           flush_timeout_s=30)
    if live:
        now = np.array([min(1.0, r / args.rate) for _, _, r in live[0]["devices"]])
        out.update({"live_mean": round(float(now.mean()), 3), "live_p5": round(float(np.percentile(now, 5)), 3),
                    "live_min": round(float(now.min()), 3)})
    due = math.ceil(args.rate * args.duration - 1e-9)  # samples 0, 1/rate, ... before the end
    held = np.array([min(1.0, d["delivered"] / due) for d in summary.devices])
    out.update({"rate_asked": args.rate, "duration_s": args.duration, "held_mean": round(float(held.mean()), 3),
                "held_p5": round(float(np.percentile(held, 5)), 3), "held_min": round(float(held.min()), 3),
                "flush_s": round(summary.duration_s - args.duration, 2),
                "unacknowledged": summary.unacknowledged, "failed": summary.failed,
                "rss_produced_mb": rss_mb(pids)})
    # consumer start: open a device's reader, take its first 5 samples
    starts, errors = [], 0
    for d in np.linspace(0, devices - 1, min(args.sample, devices)).astype(int).tolist():
        t1 = time.monotonic()
        try:
            stream = KafkaDeviceStream(bootstrap, run, d, batch_policy=build_batch_policy({"policy": "fixed",
                                                                                           "size": 1}),
                                       buffer_policy=build_buffer_policy("persist"), layout=layout)
            try:
                got = stream.take_raw(timeout=30, size=1)
            finally:
                stream.close()
            if got is None or len(got.messages) != 1:
                errors += 1
        except Exception:  # noqa: BLE001
            errors += 1
        starts.append(time.monotonic() - t1)
    out.update({"consumer_start_median_s": round(float(np.median(starts)), 3),
                "consumer_start_max_s": round(float(max(starts)), 3), "consumer_errors": errors})
    out["delete_s"] = _delete(bootstrap, run)
    return out


def _delete(bootstrap: str, run: str) -> float:
    t0 = time.monotonic()
    try:
        delete_run_topics(bootstrap, run)
    except Exception as exc:  # noqa: BLE001
        print(f"deleting {run}'s topics: {exc}", file=sys.stderr)
    time.sleep(2.0)
    return round(time.monotonic() - t0, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="100,1000", help="device counts, comma-separated (5000: run it alone)")
    ap.add_argument("--layouts", default="per-device,partitioned")
    ap.add_argument("--cluster", action="store_true", help="a three-node LocalCluster instead of one broker")
    ap.add_argument("--rate", type=float, default=2.0, help="samples/s asked of each device")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of producing per case")
    ap.add_argument("--sample", type=int, default=10, help="devices whose consumer start is timed")
    args = ap.parse_args()
    counts = [int(c) for c in args.devices.split(",")]
    layouts = args.layouts.split(",")
    cases = []
    if args.cluster:
        from edgestream.kafka.cluster import LocalCluster

        with LocalCluster(nodes=3) as cluster:
            pids = [n.running_pid() for n in cluster.nodes]
            settings = TopicSettings.resolve(TopicsConfig(), cluster.bootstrap)
            for n in counts:
                for lay in layouts:
                    cases.append(one_case(cluster.bootstrap, pids, n, lay, args, settings))
                    print(cases[-1], flush=True)
        where = "three-node LocalCluster (3 JVMs, heap 384m each, replication factor 3, min.insync.replicas 2)"
    else:
        with bench_broker() as (bootstrap, broker):
            pids = [broker.pid] if broker is not None else []
            settings = TopicSettings.resolve(TopicsConfig(), bootstrap)
            for n in counts:
                for lay in layouts:
                    cases.append(one_case(bootstrap, pids, n, lay, args, settings))
                    print(cases[-1], flush=True)
        where = "one managed LocalBroker (heap 512m)"
    name = "many_streams" + ("_cluster" if args.cluster else "") + "_" + "-".join(map(str, counts))
    record(name, {"where": where, "cases": cases})


if __name__ == "__main__":
    main()
