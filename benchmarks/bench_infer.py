"""`edgestream infer` throughput against the raw consume-produce path (issue 57, item 5; goal: >= 0.5 of it for
cnn-small on CPU at batch 64).

Both read the same topic of N records (3x32x32 uint8 images with class labels, edgestream's wire, as a
DeviceProducer sends them) in a fresh consumer group, in batches of `--batch`, and write one message per input
record to an output topic, waiting for the batch's acks before committing its offsets:

* raw: each input value copied to the output as it is (the Kafka cost alone: consume, produce, ack, commit);
* infer: `StreamInference` -- decode the batch, run cnn-small's ONNX graph (ONNX Runtime, CPU), one JSON answer per
  record (edgestream/edge/infer.py).

Records/s of each (median of `--passes` passes, the two alternating), and their ratio; also the model's own
ONNX Runtime rate on a batch (no Kafka) and ONNX Runtime's thread count.

    python benchmarks/bench_infer.py [--records 20000] [--batch 64] [--passes 3] [--model cnn-small]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import bench_broker, record  # noqa: E402


def raw_pass(bootstrap: str, topic: str, out: str, batch: int, n: int) -> float:
    from confluent_kafka import Consumer, Producer, TopicPartition

    from edgestream.kafka.admin import create_topics
    from edgestream.kafka.clients import consumer_config, producer_config

    create_topics(bootstrap, {out: 1})
    c = Consumer(consumer_config(bootstrap, f"raw-{uuid.uuid4().hex[:6]}"))
    c.subscribe([topic])
    p = Producer(producer_config(bootstrap, **{"linger.ms": 2}))
    done, t0 = 0, None
    while done < n:
        msgs = [m for m in c.consume(batch, timeout=1.0) if m.error() is None]
        if not msgs:
            continue
        if t0 is None:
            t0 = time.perf_counter()
        for m in msgs:
            p.produce(out, m.value(), key=m.key())
        while p.flush(1.0):
            pass
        c.commit(offsets=[TopicPartition(msgs[-1].topic(), msgs[-1].partition(), msgs[-1].offset() + 1)],
                 asynchronous=False)
        done += len(msgs)
    dt = time.perf_counter() - t0
    c.close()
    return done / dt


def infer_pass(bootstrap: str, sub, topic: str, out: str, batch: int, n: int) -> float:
    from edgestream.edge.infer import StreamInference

    inf = StreamInference(bootstrap, sub, topic, out, batch=batch, group=f"infer-{uuid.uuid4().hex[:6]}")
    inf.step(timeout_s=5.0, limit=batch)  # the first batch (consumer join) is not timed, as raw's first poll
    t0 = time.perf_counter()
    start = inf.stats.answered
    while inf.stats.answered < n:
        inf.step(limit=n - inf.stats.answered)
    rate = (inf.stats.answered - start) / (time.perf_counter() - t0)
    inf.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--model", default="cnn-small")
    args = ap.parse_args()

    from edgestream import DeviceProducer, ModelSubscriber
    from edgestream.config import load_dict
    from edgestream.edge.onnx_model import Runnable
    from edgestream.kafka.topic_names import device_topic
    from edgestream.kafka.topic_provision import ensure_run_topics
    from edgestream.publish.publisher import ModelPublisher
    from edgestream.runner.plan import RunPlan

    plan = RunPlan.resolve(load_dict({"name": "bench", "model": {"name": args.model}, "publish": {},
                                      "data": {"dataset": "synthetic", "shape": [3, 32, 32], "num_classes": 10,
                                               "n_train": 200, "n_test": 200}}))
    run = f"bench-infer-{uuid.uuid4().hex[:6]}-ddl-r1"
    with bench_broker() as (bootstrap, _), tempfile.TemporaryDirectory() as tmp:
        ensure_run_topics(bootstrap, run, [0])
        ds = plan.dataset
        with DeviceProducer(bootstrap, run, 0) as dev:
            for k in range(args.records):
                dev.send(ds.x_test[k % len(ds.x_test)], int(ds.y_test[k % len(ds.y_test)]))
        pub = ModelPublisher.of(plan, run, Path(tmp), bootstrap)
        pub.final(plan.build_model(), 1, 1.0, {})
        pub.close()
        topic = device_topic(run, 0)
        with ModelSubscriber(bootstrap, run) as sub:
            version = sub.wait_for(1, timeout=120)
            r = Runnable.of(version)
            x = ds.x_test[:args.batch]
            r.predict(x)
            t0 = time.perf_counter()
            reps = 50
            for _ in range(reps):
                r.predict(x)
            model_rate = reps * args.batch / (time.perf_counter() - t0)
            raws, infers = [], []
            for i in range(args.passes):
                raws.append(raw_pass(bootstrap, topic, f"{run}.raw{i}", args.batch, args.records))
                infers.append(infer_pass(bootstrap, sub, topic, f"{run}.out{i}", args.batch, args.records))
                print(f"pass {i}: raw {raws[-1]:.0f}/s, infer {infers[-1]:.0f}/s", flush=True)
    raw, inf = statistics.median(raws), statistics.median(infers)
    import onnxruntime as ort

    record("infer", {"model": args.model, "batch": args.batch, "records": args.records, "passes": args.passes,
                     "raw_records_per_s": round(raw), "infer_records_per_s": round(inf),
                     "ratio": round(inf / raw, 3), "model_only_records_per_s": round(model_rate),
                     "raw_passes": [round(v) for v in raws], "infer_passes": [round(v) for v in infers],
                     "onnxruntime": ort.__version__, "cpus": os.cpu_count(), "input": "3x32x32 uint8, edgestream wire",
                     "numpy": np.__version__})


if __name__ == "__main__":
    main()
