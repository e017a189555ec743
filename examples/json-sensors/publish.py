"""Sensors publishing JSON readings to Kafka with a PLAIN confluent-kafka producer: no edgestream code runs
on the device side. Each device writes records like {"v": [8 floats], "cls": 0|1|2, "site": "..."} to its
own topic (plant.sensor-0, plant.sensor-1, ...; created with one partition when missing), keyed by the
device id, at its own rate. edgestream trains on them with sensors.yaml (streams.source: external).

    python publish.py --bootstrap localhost:9092 --devices 3 --rates 50,100,200 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import random
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

#: the hidden rule the model learns: class = argmax(W v)
W = [[1.5, -1.0, 0.5, 0.0, 0.3, -0.2, 0.8, 0.1], [-0.5, 1.0, 1.0, -1.0, 0.2, 0.6, -0.4, 0.0],
     [0.0, 0.5, -1.5, 1.5, -0.6, 0.1, 0.2, 0.9]]


def reading(rng: random.Random) -> dict:
    v = [rng.gauss(0.0, 1.0) for _ in range(8)]
    scores = [sum(w * x for w, x in zip(row, v, strict=True)) for row in W]
    return {"v": v, "cls": scores.index(max(scores)), "site": "north"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="localhost:9092")
    ap.add_argument("--topic", default="plant.sensor-{device}", help="topic per device ({device}: its id)")
    ap.add_argument("--devices", type=int, default=3)
    ap.add_argument("--rates", default="50,100,200", help="records/s per device (cycled over the devices)")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to publish")
    ap.add_argument("--records", type=int, default=0, help="instead: this many records per device, at once")
    args = ap.parse_args()
    topics = [args.topic.replace("{device}", str(d)) for d in range(args.devices)]
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    missing = [t for t in topics if t not in admin.list_topics(timeout=10).topics]
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in missing]).values() if missing else []:
        f.result(30)
    producer = Producer({"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    rngs = [random.Random(d) for d in range(args.devices)]
    if args.records:
        for d, topic in enumerate(topics):
            for _ in range(args.records):
                producer.produce(topic, json.dumps(reading(rngs[d])).encode(), key=str(d).encode())
                producer.poll(0)
    else:
        rates = [float(r) for r in args.rates.split(",")]
        rate = [rates[d % len(rates)] for d in range(args.devices)]
        sent, t0 = [0] * args.devices, time.monotonic()
        while (now := time.monotonic() - t0) < args.seconds:
            for d, topic in enumerate(topics):
                while sent[d] < rate[d] * now:  # each device at its own pace
                    producer.produce(topic, json.dumps(reading(rngs[d])).encode(), key=str(d).encode())
                    sent[d] += 1
            producer.poll(0)
            time.sleep(0.01)
    left = producer.flush(30)
    print(f"published to {', '.join(topics)}; {left} record(s) not acknowledged")


if __name__ == "__main__":
    main()
