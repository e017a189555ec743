"""Consumer decode: samples/s delivered as normalised float32 batch tensors by KafkaStreamDataset
(persist, fixed batch, ack per batch with async commits) vs the raw poll throughput of the same
consumer settings on the same topic (consume() asking for one batch of messages a call, as the
dataset does, and taking each message's bytes), as a ratio of medians over interleaved passes.
Target >= 0.8 at the primary batch size (the first of --batches).

    python benchmarks/bench_consumer_decode.py [--samples 200000] [--batches 256,64,1024] [--passes 15]
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


def raw_poll(bootstrap: str, run: str, n: int, per_call: int, group: str = "raw") -> float:
    c = Consumer(consumer_config(bootstrap, f"{run}.{group}"))
    c.assign([TopicPartition(device_topic(run, 0), 0, 0)])
    got, t0 = 0, time.perf_counter()
    while got < n:
        # a raw poll that receives the bytes (value()), without decoding them, asking consume() for
        # `per_call` messages a call (the dataset asks for one batch; ask only for what remains:
        # consume() waits its full timeout for a count that never comes)
        got += sum(1 for m in c.consume(min(per_call, n - got), timeout=1.0) if m.error() is None and m.value())
    dt = time.perf_counter() - t0
    c.close()
    return n / dt


def dataset_rate(bootstrap: str, run: str, n: int, batch: int, group: str = "ds") -> float:
    from edgestream.consumers.device_stream import KafkaDeviceStream
    from edgestream.data.validate import SampleSpec

    ds = KafkaStreamDataset(bootstrap, run, 0, num_devices=1, spec=SampleSpec(np.uint8, (3, 32, 32), 10),
                            batch={"policy": "fixed", "size": batch},
                            buffer="persist", timeout=10, commit="async")
    ds.stream.close()  # a fresh group per pass, so every pass reads the whole topic
    ds.stream = KafkaDeviceStream(bootstrap, run, 0, batch_policy=ds.stream.rule.batch_policy,
                                  buffer_policy=ds.stream.rule.buffer_policy, group=f"{run}.{group}")
    got, t0 = 0, time.perf_counter()
    while got < n - batch:
        item = ds.next_batch()
        assert item.x.dtype.is_floating_point
        got += len(item)
        ds.ack(item)
    dt = time.perf_counter() - t0
    ds.close()
    return got / dt


def measure(bootstrap: str, run: str, n: int, batch: int, passes: int) -> dict:
    raw_poll(bootstrap, run, n, batch, f"warm-raw-{batch}")  # one pass each to warm the broker's JIT
    dataset_rate(bootstrap, run, n, batch, f"warm-ds-{batch}")
    raws, ourss = [], []
    for i in range(passes):  # interleaved, alternating which goes first, so both see the same machine
        for kind in ("raw", "ds") if i % 2 == 0 else ("ds", "raw"):
            if kind == "raw":
                raws.append(raw_poll(bootstrap, run, n, batch, f"raw{batch}.{i}"))
            else:
                ourss.append(dataset_rate(bootstrap, run, n, batch, f"ds{batch}.{i}"))
        print(f"  batch {batch} pass {i + 1}/{passes}: raw {raws[-1]:,.0f}/s dataset {ourss[-1]:,.0f}/s",
              file=sys.stderr, flush=True)
    raw, ours = float(np.median(raws)), float(np.median(ourss))
    pair_ratios = [o / r for o, r in zip(ourss, raws, strict=True)]
    return {"batch": batch, "raw_poll_per_s": round(raw), "dataset_float32_per_s": round(ours),
            "ratio": round(ours / raw, 3), "ratio_median_of_passes": round(float(np.median(pair_ratios)), 3),
            "passes": {"raw": [round(r) for r in raws], "dataset": [round(o) for o in ourss]}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--batches", default="256,64,1024", help="batch sizes; the first is the one with the target")
    ap.add_argument("--passes", type=int, default=15)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    from edgestream.data import wire

    with bench_broker() as (bootstrap, _):
        run = f"decode-{int(time.time())}"
        fill(bootstrap, run, args.samples)
        rows = [measure(bootstrap, run, args.samples, b, args.passes) for b in batches]
    record("consumer_decode", {"samples": args.samples, "sample_bytes": 3072, "c_extension": wire._wirefast is not None,
                               **{k: v for k, v in rows[0].items() if k != "batch"}, "batch": batches[0],
                               "by_batch": rows, "target": f">= 0.8 at batch {batches[0]} (ratio of medians)"})


if __name__ == "__main__":
    main()
