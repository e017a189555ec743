"""`make demo`: the platform's main job in one command.

Starts the managed local broker (unless a bootstrap address is given), streams a few thousand
digit images through one Kafka topic per device, consumes them back and reports counts, rates and
ordering. Later work turns this into the full experiment.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table


def run_demo(samples: int = 4000, devices: int = 4, bootstrap: str | None = None,
             console: Console | None = None) -> dict:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from sklearn.datasets import load_digits

    from edgestream.kafka import LocalBroker, consumer_config, create_topics, device_topic, new_run_id, producer_config

    console = console or Console()
    broker = None
    if bootstrap is None:
        console.print("starting the managed local Kafka broker ...")
        t0 = time.monotonic()
        broker = LocalBroker(log=console.print).start()
        bootstrap = broker.bootstrap
        console.print(f"broker up at {bootstrap} in {time.monotonic() - t0:.1f} s")
    try:
        run = f"demo-{new_run_id()}"
        topics = [device_topic(run, d) for d in range(devices)]
        create_topics(bootstrap, topics)
        digits = load_digits()
        images = (digits.images * (255 / 16)).round().astype("uint8")
        producer = Producer(producer_config(bootstrap))
        t0 = time.monotonic()
        for k in range(samples):
            d = k % devices
            img = images[k % len(images)]
            value = int(digits.target[k % len(images)]).to_bytes(1, "little") + k.to_bytes(8, "little") + img.tobytes()
            while True:
                try:
                    producer.produce(topics[d], key=str(d).encode(), value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        producer.flush()
        produce_s = time.monotonic() - t0
        table = Table(title=f"{samples} samples through Kafka ({run})")
        for col in ("device", "topic", "consumed", "in order", "bytes"):
            table.add_column(col)
        total = 0
        t0 = time.monotonic()
        for d, topic in enumerate(topics):
            consumer = Consumer(consumer_config(bootstrap, f"{run}.demo.{d}"))
            consumer.assign([TopicPartition(topic, 0, 0)])
            want = len(range(d, samples, devices))
            seqs, nbytes = [], 0
            deadline = time.monotonic() + 60
            while len(seqs) < want and time.monotonic() < deadline:
                for msg in consumer.consume(1000, timeout=1.0):
                    if msg.error():
                        continue
                    seqs.append(int.from_bytes(msg.value()[1:9], "little"))
                    nbytes += len(msg.value())
            consumer.close()
            total += len(seqs)
            table.add_row(str(d), topic, f"{len(seqs)}/{want}", str(seqs == sorted(seqs)), str(nbytes))
        consume_s = time.monotonic() - t0
        console.print(table)
        console.print(f"produced {samples} in {produce_s:.2f} s ({samples / produce_s:,.0f}/s), "
                      f"consumed {total} in {consume_s:.2f} s ({total / max(consume_s, 1e-9):,.0f}/s)")
        return {"produced": samples, "consumed": total}
    finally:
        if broker is not None:
            broker.stop()
            console.print("broker stopped")
