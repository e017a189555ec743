"""`edgestream infer`: a run's latest model version on a stream of records, predictions to another topic.

    edgestream infer plant-ddl-k3x9a1 --topic plant.sensors --out-topic plant.predictions --format edgestream

`StreamInference` reads the input topic in a consumer group (`<out topic>.infer` unless told), decodes each batch
of up to `batch` records with the run's record decoders (edgestream.data.records: any supported format, the
samples' shape and dtype from the version's metadata), runs the version in use on the batch (ONNX Runtime,
`ModelSubscriber`: it follows the models topic and swaps in a new version whenever one is complete and checked),
writes one JSON answer per input record to the output topic (keyed like the input record; the topic is created
with the input's partition count when it is not there). An input topic that does not exist yet is waited for
(`subscribe`: the testbed's device containers start before the producer that creates their streams):

    {"partition": 0, "offset": 812, "key": "3", "version": 7, "prediction": 4, "label": 4}

(`prediction`: the class index, or the values of a regression; `label`: the record's own target when it carries
one; a record that cannot be decoded gets {"...", "error": "<reason>"} instead of a prediction), and commits the
input offsets only after the broker acknowledged the batch's answers.

Versions change only between batches (each batch is answered by one version, which its answers name), so a
version change never drops or repeats a record. Delivery is at-least-once: every input offset is answered;
a crash between a batch's answers and its commit answers that batch again after the restart (the same
partition/offset, perhaps by a newer version), so a reader that must see each offset once keeps the last answer
per (partition, offset). Kafka away: the subscriber waits through it (`outage_s`) and the input consumer retries;
the answers stay queued in the producer for librdkafka's message timeout (300 s), after which a batch whose answers
were not delivered ends `step` with one line (RuntimeError) and its inputs, not committed, are answered again by
the next run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgestream.edge.onnx_model import Runnable

log = logging.getLogger("edgestream.infer")


@dataclass
class InferStats:
    answered: int = 0          # input records answered (predictions and errors)
    errors: int = 0            # of them: records that could not be decoded
    batches: int = 0
    versions: dict[int, int] = field(default_factory=dict)  # version -> records it answered
    seconds: float = 0.0
    #: version -> [records with a label, correct (classification) or squared-error sum (regression)] since the
    #: last `figures()`: how each version does on this stream's own data
    scores: dict[int, list[float]] = field(default_factory=dict)

    def figures(self) -> list[dict[str, Any]]:
        """Per version since the last call: records scored and accuracy (classification) or rmse (regression)."""
        out = []
        for v, (n, s, labels) in sorted(self.scores.items()):
            if n:
                out.append({"version": v, "records": int(n),
                            **({"accuracy": round(s / n, 4)} if labels else {"rmse": round(float(np.sqrt(s / n)), 4)})})
        self.scores = {}
        return out


def _spec_of(runnable: Runnable) -> Any:
    """The samples a version takes, as a record decoder checks them (edgestream.data.validate.SampleSpec)."""
    from edgestream.data.validate import SampleSpec

    meta = runnable.version.meta
    out = meta.get("output") or {}
    if runnable.labels:
        return SampleSpec(runnable.dtype, runnable.shape, int(out.get("size") or 1))
    return SampleSpec(runnable.dtype, runnable.shape, 0, tuple(out.get("target_shape") or ()))


class StreamInference:
    """Answers every record of `in_topic` with the latest model version (module doc). `subscriber`: a
    ModelSubscriber of the run; `fmt`: the records' format (streams.format's names) and its `fields`
    (streams.input, target, schema, dtype, options)."""

    def __init__(self, bootstrap: str, subscriber: Any, in_topic: str, out_topic: str, *, fmt: str = "edgestream",
                 fields: Mapping[str, Any] | None = None, batch: int = 64, group: str | None = None,
                 security: Mapping[str, str] | None = None, echo: Callable[[str], Any] | None = None) -> None:
        from confluent_kafka import Consumer, Producer

        from edgestream.kafka.admin import admin_client
        from edgestream.kafka.clients import consumer_config, producer_config

        if not isinstance(batch, int) or batch < 1:
            raise ValueError(f"--batch: {batch!r} is not allowed; must be an int >= 1")
        self.subscriber, self.in_topic, self.out_topic = subscriber, in_topic, out_topic
        self.fmt, self.fields, self.batch = fmt, dict(fields or {}), batch
        self.bootstrap, self.security, self.echo = bootstrap, security, echo or log.warning
        self._admin = admin_client(bootstrap, security)
        self._subscribed = False
        self.consumer = Consumer(consumer_config(bootstrap, group or f"{out_topic}.infer", security))
        self.producer = Producer(producer_config(bootstrap, security, **{"linger.ms": 2}))
        self.stats = InferStats()
        self._decoders: dict[tuple, Any] = {}
        self._failed: list[str] = []

    def subscribe(self, stop: Callable[[], bool] = lambda: False) -> bool:
        """Waits until the input topic exists (a device's stream is created by its producer, which may start after
        this: the testbed's device containers do; saying every 10 s what it waits for), makes the output topic like
        it (its partition count) unless it is there, and subscribes. False when `stop()` ended the wait."""
        from edgestream.kafka.admin import create_topics

        if self._subscribed:
            return True
        t0 = said = time.monotonic()
        while True:
            md = self._admin.list_topics(timeout=30)
            topic = md.topics.get(self.in_topic)
            if topic is not None and topic.error is None and topic.partitions:
                break
            if stop():
                return False
            if time.monotonic() - said >= 10:
                said = time.monotonic()
                self.echo(f"still waiting for the input topic {self.in_topic} to exist ({said - t0:.0f} s; is its "
                          "producer running?)")
            time.sleep(0.5)
        if self.out_topic not in md.topics:  # made like the input (its partition count), unless it is there
            create_topics(self.bootstrap, {self.out_topic: len(topic.partitions)}, security=self.security)
        # subscribed only once the topic is there: a subscription to a missing topic fails at the first consume
        # (UNKNOWN_TOPIC_OR_PART) and would see the topic only at librdkafka's next metadata refresh
        self.consumer.subscribe([self.in_topic])
        self._subscribed = True
        return True

    def _decoder(self, runnable: Runnable) -> Any:
        from edgestream.data.records import RecordFormat, build_decoder

        spec = _spec_of(runnable)
        key = (spec.dtype.str, spec.shape, spec.num_classes, spec.target_shape)
        if key not in self._decoders:
            self._decoders[key] = build_decoder(RecordFormat(name=self.fmt, spec=spec, **self.fields))
        return self._decoders[key]

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failed.append(f"{msg.topic()}: {err.str()}")

    def step(self, timeout_s: float = 0.5, limit: int | None = None) -> int:
        """One batch: consume up to `batch` records, answer them, wait for the answers' acks, commit; returns the
        records answered (0 when none came within `timeout_s`)."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        from edgestream.data.validate import DeviceRule

        if not self.subscribe():
            return 0
        msgs = []
        for m in self.consumer.consume(min(self.batch, limit or self.batch), timeout=timeout_s):
            err = m.error()
            if err is None:
                msgs.append(m)
            elif err.code() != KafkaError._PARTITION_EOF and not err.retriable():
                raise KafkaException(err)
        if not msgs:
            return 0
        runnable = self.subscriber.runnable()  # one version per batch: a new one is taken between batches
        version = runnable.version.version
        decoded, rejected = self._decoder(runnable).decode(msgs, DeviceRule(0, 2**31 - 1, injected=True))
        answers: dict[int, dict] = {}
        if decoded is not None:
            # the decoders give the values as sent, in float32 (exact for the wire's integer dtypes): the
            # version's graph takes them in the records' own dtype and normalises them itself
            preds = runnable.predict(np.asarray(decoded.x).astype(runnable.dtype, copy=False))
            labels = decoded.labels
            rows = {id(m): i for i, m in enumerate(decoded.accepted)}
            for j, m in enumerate(msgs):
                i = rows.get(id(m))
                if i is not None:
                    answers[j] = {"prediction": preds[i].tolist(), "label": labels[i].tolist()}
            score = self.stats.scores.setdefault(version, [0, 0.0, runnable.labels])
            score[0] += len(preds)
            if runnable.labels:
                score[1] += float((preds == labels).sum())
            else:
                score[1] += float(((preds - labels.reshape(preds.shape)) ** 2).mean(axis=1).sum())
        for j, reason in rejected:
            answers[j] = {"error": reason}
        commit: dict[tuple[str, int], int] = {}
        for j, m in enumerate(msgs):
            key = m.key()
            doc = {"partition": m.partition(), "offset": m.offset(), "key": key.decode("utf-8", "replace")
                   if key is not None else None, "version": version,
                   **answers.get(j, {"error": "not decoded"})}
            self.producer.produce(self.out_topic, json.dumps(doc, separators=(",", ":")).encode(), key=key,
                                  on_delivery=self._delivered)
            commit[(m.topic(), m.partition())] = m.offset() + 1
            self.stats.errors += "error" in doc
        while self.producer.flush(1.0):  # the answers acknowledged before their inputs are committed
            pass
        if self._failed:
            failed, self._failed = self._failed, []
            raise RuntimeError(f"{len(failed)} answer(s) not delivered (first: {failed[0]}); their inputs are not "
                               "committed and will be answered again")
        self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in commit.items()], asynchronous=False)
        self.stats.answered += len(msgs)
        self.stats.batches += 1
        self.stats.versions[version] = self.stats.versions.get(version, 0) + len(msgs)
        return len(msgs)

    def run(self, stop: Callable[[], bool] = lambda: False, *, max_records: int | None = None,
            version_timeout_s: float | None = None, report_s: float | None = None,
            report: Callable[[list[dict[str, Any]]], Any] | None = None) -> InferStats:
        """Answer batches until `stop()` or `max_records` answered; waits first for a model version. Every
        `report_s` seconds (and at the end) `report(stats.figures())` when there are figures."""
        if not self.subscribe(stop):
            return self.stats
        self.subscriber.wait_for(timeout=version_timeout_s)
        t0 = last = time.monotonic()
        try:
            while not stop() and (max_records is None or self.stats.answered < max_records):
                self.step(limit=None if max_records is None else max_records - self.stats.answered)
                if report is not None and report_s and time.monotonic() - last >= report_s:
                    last = time.monotonic()
                    figures = self.stats.figures()
                    if figures:
                        report(figures)
        finally:
            self.stats.seconds = time.monotonic() - t0
            if report is not None:
                figures = self.stats.figures()
                if figures:
                    report(figures)
        return self.stats

    def close(self) -> None:
        self.producer.flush(10.0)
        self.consumer.close()
