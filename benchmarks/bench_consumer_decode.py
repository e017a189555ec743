"""Consumer decode: samples/s delivered as normalised float32 batch tensors by KafkaStreamDataset
(persist, fixed batch, ack per batch with async commits) on its `torch_device` vs the raw poll
throughput of the same consumer settings (the dataset's read-ahead, `STREAM_PREFETCH`) on the same topic
(consume() asking for one batch of messages a call, as the dataset does, and taking each message's
bytes), as a ratio of medians over interleaved passes. Both ratios side by side: vs the raw poll and vs
the floor (below). Target (issue 36): >= 0.9 of the floor at batch 64 and 256.

--device auto (default): a CUDA GPU when there is one -- the batch then crosses as uint8 and is
converted and normalised on the GPU, and each pass ends with torch.cuda.synchronize(), so the GPU's
work is inside the timed loop -- else the CPU, where the host normalises while it decodes. A third
column, the dataset with normalize=None (raw uint8 batches on the host), is the host's share of the
device path: what the host does per batch when a GPU normalises (less the pinned copy's launch).
A fourth, the raw poll that also copies each batch's bytes into one contiguous buffer (b"".join), is
the floor of any batch builder: a batch tensor needs its samples in one buffer, and the raw poll's
messages each hold their own bytes. A fifth, the raw poll with librdkafka's read-ahead defaults (the
"raw poll" of the figures before issue 36), shows what the dataset's bounded read-ahead costs.

    python benchmarks/bench_consumer_decode.py [--samples 200000] [--batches 256,64,1024] [--passes 15]
                                               [--device auto|cpu|cuda]
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
from edgestream.consumers.device_stream import STREAM_PREFETCH  # noqa: E402
from edgestream.data import Affine, encode_sample  # noqa: E402
from edgestream.kafka import consumer_config, device_topic, producer_config  # noqa: E402
from edgestream.kafka.topic_provision import ensure_run_topics  # noqa: E402


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


def raw_poll(bootstrap: str, run: str, n: int, per_call: int, group: str = "raw", copy: bool = False,
             defaults: bool = False) -> float:
    """Samples/s of a raw poll with the dataset's consumer settings (defaults=True: librdkafka's
    read-ahead defaults); copy=True also copies each call's message bytes into one contiguous
    buffer (b"".join: one copy, no checks, no conversion) -- the least any batch builder must add."""
    c = Consumer(consumer_config(bootstrap, f"{run}.{group}", **({} if defaults else STREAM_PREFETCH)))
    c.assign([TopicPartition(device_topic(run, 0), 0, 0)])
    got, t0 = 0, time.perf_counter()
    while got < n:
        # a raw poll that receives the bytes (value()), without decoding them, asking consume() for
        # `per_call` messages a call (the dataset asks for one batch; ask only for what remains:
        # consume() waits its full timeout for a count that never comes)
        values = [m.value() for m in c.consume(min(per_call, n - got), timeout=1.0) if m.error() is None]
        if copy and values:
            np.frombuffer(b"".join(values), dtype=np.uint8)
        got += sum(1 for v in values if v)
    dt = time.perf_counter() - t0
    c.close()
    return n / dt


#: (batch, normalize) -> per pass, the share of the dataset's batches handed out of blocks of batches
BLOCK_SHARE: dict[tuple[int, bool], list[float]] = {}


def dataset_rate(bootstrap: str, run: str, n: int, batch: int, group: str = "ds", device: str = "cpu",
                 normalize: bool = True) -> float:
    """Samples/s of next_batch + ack over the whole topic; x float32 normalised on `device` (normalize:
    False: the raw uint8 batches on the host, normalize=None)."""
    import torch

    from edgestream.consumers.kafka_stream import KafkaDeviceStream
    from edgestream.data import SampleSerde
    from edgestream.data.validate import SampleSpec

    spec = SampleSpec(np.uint8, (3, 32, 32), 10)
    ds = KafkaStreamDataset(bootstrap, run, 0, num_devices=1, serde=SampleSerde(spec, Affine() if normalize else None),
                            batch={"policy": "fixed", "size": batch}, buffer="persist", timeout=10, commit="async",
                            torch_device=device if normalize else None)
    ds.stream.close()  # a fresh group per pass, so every pass reads the whole topic
    ds.stream = KafkaDeviceStream(bootstrap, run, 0, batch_policy=ds.stream.rule.batch_policy,
                                  buffer_policy=ds.stream.rule.buffer_policy, group=f"{run}.{group}")
    cuda = normalize and torch.device(device).type == "cuda"
    got, k, t0 = 0, 0, time.perf_counter()
    while got < n - batch:
        item = ds.next_batch()
        got += len(item)
        k += 1
        ds.ack(item)
    if cuda:
        torch.cuda.synchronize()  # the GPU's conversions are part of the pass
    dt = time.perf_counter() - t0
    want = (torch.float32, torch.device(device).type) if normalize else (torch.uint8, "cpu")
    assert (item.x.dtype, item.x.device.type) == want, (item.x.dtype, item.x.device)
    BLOCK_SHARE.setdefault((batch, normalize), []).append(getattr(ds, "block_batches", 0) / max(1, k))
    ds.close()
    return got / dt


def measure(bootstrap: str, run: str, n: int, batch: int, passes: int, device: str) -> dict:
    kinds = {"raw": lambda g: raw_poll(bootstrap, run, n, batch, g),
             "copy": lambda g: raw_poll(bootstrap, run, n, batch, g, copy=True),
             "ds": lambda g: dataset_rate(bootstrap, run, n, batch, g, device),
             "u8": lambda g: dataset_rate(bootstrap, run, n, batch, g, device, normalize=False),
             "rawdef": lambda g: raw_poll(bootstrap, run, n, batch, g, defaults=True)}
    for kind, rate in kinds.items():  # one pass each to warm the broker's JIT
        rate(f"warm-{kind}-{batch}")
    got: dict[str, list[float]] = {kind: [] for kind in kinds}
    order = list(kinds)
    for i in range(passes):  # interleaved, rotating which goes first, so all see the same machine
        k = i % len(order)
        for kind in order[k:] + order[:k]:
            got[kind].append(kinds[kind](f"{kind}{batch}.{i}"))
        print(f"  batch {batch} pass {i + 1}/{passes}: raw {got['raw'][-1]:,.0f}/s raw+copy {got['copy'][-1]:,.0f}/s "
              f"dataset {got['ds'][-1]:,.0f}/s uint8 {got['u8'][-1]:,.0f}/s "
              f"raw (librdkafka defaults) {got['rawdef'][-1]:,.0f}/s", file=sys.stderr, flush=True)
    raws, ourss, u8s, copies, defs = got["raw"], got["ds"], got["u8"], got["copy"], got["rawdef"]
    raw, ours, u8, copied, rawdef = (float(np.median(v)) for v in (raws, ourss, u8s, copies, defs))
    pair_ratios = [o / r for o, r in zip(ourss, raws, strict=True)]
    floor_pairs = [o / c for o, c in zip(ourss, copies, strict=True)]
    row = {"batch": batch, "raw_poll_per_s": round(raw), "dataset_float32_per_s": round(ours),
           "ratio": round(ours / raw, 3), "ratio_median_of_passes": round(float(np.median(pair_ratios)), 3),
           "floor_ratio": round(ours / copied, 3),
           "floor_ratio_median_of_passes": round(float(np.median(floor_pairs)), 3),
           "dataset_uint8_per_s": round(u8), "uint8_ratio": round(u8 / raw, 3),
           "uint8_floor_ratio": round(u8 / copied, 3),
           "raw_copy_per_s": round(copied), "raw_copy_ratio": round(copied / raw, 3),
           "raw_defaults_per_s": round(rawdef), "raw_vs_defaults": round(raw / rawdef, 3),
           "passes": {"raw": [round(r) for r in raws], "dataset": [round(o) for o in ourss],
                      "uint8": [round(u) for u in u8s], "raw_copy": [round(c) for c in copies],
                      "raw_defaults": [round(d) for d in defs]}}
    print(f"batch {batch}: dataset float32 {row['ratio']:.3f} of the raw poll, {row['floor_ratio']:.3f} of the floor "
          f"(raw poll + copy; median of per-pass ratios {row['ratio_median_of_passes']:.3f} / "
          f"{row['floor_ratio_median_of_passes']:.3f}); uint8 {row['uint8_ratio']:.3f} / {row['uint8_floor_ratio']:.3f}; "
          f"the floor {row['raw_copy_ratio']:.3f} of the raw poll; the raw poll {row['raw_vs_defaults']:.3f} of "
          "librdkafka's defaults", file=sys.stderr, flush=True)
    row["block_share"] = {kind: round(float(np.median(BLOCK_SHARE.get((batch, norm), [0.0]))), 3)
                          for kind, norm in (("float32", True), ("uint8", False))}
    print(f"batch {batch}: batches handed out of blocks (median of passes): float32 {row['block_share']['float32']:.0%}, "
          f"uint8 {row['block_share']['uint8']:.0%}", file=sys.stderr, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--batches", default="256,64,1024", help="batch sizes; the first is the one with the target")
    ap.add_argument("--passes", type=int, default=15)
    ap.add_argument("--device", default="auto", help="where x is normalised: auto (cuda when present), cpu, cuda")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    import torch

    from edgestream.data import wire

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    with bench_broker() as (bootstrap, _):
        run = f"decode-{int(time.time())}"
        fill(bootstrap, run, args.samples)
        rows = [measure(bootstrap, run, args.samples, b, args.passes, device) for b in batches]
    record("consumer_decode", {"samples": args.samples, "sample_bytes": 3072, "c_extension": wire._wirefast is not None,
                               "device": device, "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
                               **{k: v for k, v in rows[0].items() if k != "batch"}, "batch": batches[0],
                               "by_batch": rows, "target": ">= 0.9 of the floor (floor_ratio, ratio of medians) at every batch size"})


if __name__ == "__main__":
    main()
