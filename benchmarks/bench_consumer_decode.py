"""Consumer decode: samples/s delivered as float32 batch tensors by KafkaStreamDataset vs the raw
poll() throughput of the same consumer settings on the same topic, as a ratio. Target >= 0.8.

    python benchmarks/bench_consumer_decode.py [--samples 100000] [--batch 256]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).parent))
from common import bench_broker, record  # noqa: E402

from edgestream.consumers import KafkaStreamDataset  # noqa: E402
from edgestream.data import encode_sample  # noqa: E402
from edgestream.kafka import consumer_config, device_topic, producer_config  # noqa: E402
from edgestream.kafka.run_topics import ensure_run_topics  # noqa: E402


def fill(bootstrap: str, run: str, n: int) -> None:
    ensure_run_topics(bootstrap, run, [0])
    p = Producer(producer_config(bootstrap))
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, size=(256, 3, 32, 32), dtype=np.uint8)
    topic = device_topic(run, 0)
    for k in range(n):
        v = encode_sample(imgs[k % 256], k % 10, 0, k, time.time())
        while True:
            try:
                p.produce(topic, value=v, key=b"0")
                break
            except BufferError:
                p.poll(0.01)
    p.flush()


def raw_poll(bootstrap: str, run: str, n: int) -> float:
    c = Consumer(consumer_config(bootstrap, f"{run}.raw"))
    c.assign([TopicPartition(device_topic(run, 0), 0, 0)])
    got, t0 = 0, time.perf_counter()
    while got < n:
        got += sum(1 for m in c.consume(5000, timeout=1.0) if m.error() is None)
    dt = time.perf_counter() - t0
    c.close()
    return n / dt


def dataset_rate(bootstrap: str, run: str, n: int, batch: int) -> float:
    ds = KafkaStreamDataset(bootstrap, run, 0, num_devices=1, batch={"policy": "fixed", "size": batch},
                            buffer="persist", timeout=10, commit="async")
    got, t0 = 0, time.perf_counter()
    while got < n - batch:
        x, y, meta = ds.next_batch()
        assert x.dtype.is_floating_point
        got += len(y)
        ds.ack(meta)
    dt = time.perf_counter() - t0
    ds.close()
    return got / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    with bench_broker() as (bootstrap, _):
        run = f"decode-{int(time.time())}"
        fill(bootstrap, run, args.samples)
        raw = raw_poll(bootstrap, run, args.samples)
        ours = dataset_rate(bootstrap, run, args.samples, args.batch)
    record("consumer_decode", {"samples": args.samples, "batch": args.batch, "sample_bytes": 3072,
                               "raw_poll_per_s": round(raw), "dataset_float32_per_s": round(ours),
                               "ratio": round(ours / raw, 3), "target": ">= 0.8"})


if __name__ == "__main__":
    main()
