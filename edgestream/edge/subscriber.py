"""`ModelSubscriber`: a device's (or a service's) copy of a run's latest model version, from its models topic.

    from edgestream import ModelSubscriber
    with ModelSubscriber("broker:9092", "myrun-ddl-abc123") as sub:     # or topic="plant.models", run=...
        v = sub.wait_for(newer_than=0)        # the first version there is (a late joiner: the latest one)
        y = sub.predict(x)                    # class indices (classification) or values (regression)
        sub.wait_for(newer_than=v.version)    # block until a newer one is in

It reads the topic (`<run>.models` by default: docs/model-format.md) from its beginning in a background
thread: compaction keeps the newest versions' chunks, so a subscriber that joins late catches up to the
latest version and loads only that one. Each version is reassembled and checked (every chunk's SHA-256,
the body's, each file's; its run, its format), then loaded into ONNX Runtime and checked against its
metadata's input; a version that fails any check, or that it cannot run (no model.onnx, a graph ONNX Runtime
refuses), is refused with one line (logger edgestream.models, and `refused`) and the last good version is
kept. `on_version(version)` is called (in the subscriber's thread) for each version taken.

Kafka away: the reader waits through the outage (edgestream.kafka.outage, `outage_s` as DeviceProducer's,
300 s by default), saying it in the log after 2 s, and `predict` goes on with the last good version; once
the wait has lasted `outage_s`, `wait_for` raises `KafkaUnavailable` (one line: address and budget), and
the reader keeps trying: versions flow again when Kafka answers.

Needs confluent-kafka, numpy and onnxruntime; nothing here imports torch (docs/model-format.md, "Devices").
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from edgestream.edge.model_format import Assembler, FormatError, ModelVersion
from edgestream.edge.onnx_model import NotRunnable, Runnable
from edgestream.kafka.admin import KafkaUnavailable
from edgestream.kafka.topic_names import models_topic, run_of_topic

log = logging.getLogger("edgestream.models")
log.addHandler(logging.NullHandler())

#: seconds between looks for a models topic that does not exist yet (the run has published nothing)
TOPIC_WAIT_S = 0.5


class ModelSubscriber:
    """The latest good version of run `run`'s model (module doc). `topic`: the models topic when it is not
    `<run>.models` (then `run` may be omitted when the topic is named `<run>.models`)."""

    def __init__(self, bootstrap: str, run: str | None = None, *, topic: str | None = None,
                 security: Mapping[str, str] | None = None,
                 on_version: Callable[[ModelVersion], Any] | None = None, outage_s: float | None = 300.0,
                 providers: list[str] | None = None) -> None:
        if run is None and topic is None:
            raise ValueError("run: give the run (its topic <run>.models) or topic=")
        if run is None:
            run = run_of_topic(topic)
            if run is None:
                raise ValueError(f"run: topic {topic!r} is not named <run>.models; give the run as well")
        self.run, self.topic = run, topic or models_topic(run)
        self.bootstrap, self.security, self.on_version, self.providers = bootstrap, security, on_version, providers
        from edgestream.kafka.outage import Outage

        self.outage = Outage(bootstrap, outage_s, field="outage_s", listener=self._outage_event) \
            if outage_s is not None else None
        self.unavailable: str | None = None  # the give-up line of an outage past outage_s, until Kafka answers
        self.refused: list[str] = []
        self.error: str | None = None  # an error no wait cures (the thread ended)
        self._current: Runnable | None = None
        self._cv = threading.Condition()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"models {self.topic}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the caller's side
    def latest(self) -> ModelVersion | None:
        """The version in use (None before the first one)."""
        cur = self._current
        return None if cur is None else cur.version

    def wait_for(self, version: int | None = None, *, newer_than: int | None = None,
                 timeout: float | None = None) -> ModelVersion:
        """Block until the version in use is `version` or later and newer than `newer_than` (neither: any version);
        returns it. TimeoutError after `timeout` seconds; KafkaUnavailable once an outage lasted `outage_s`."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def ok() -> bool:
            cur = self._current
            return cur is not None and (version is None or cur.version.version >= version) and \
                (newer_than is None or cur.version.version > newer_than)

        with self._cv:
            while not ok():
                if self.error is not None:
                    raise RuntimeError(self.error)
                if self.unavailable is not None:  # past outage_s: unless Kafka answers now, say so
                    from edgestream.kafka.outage_calls import fresh_answers

                    line = self.unavailable
                    if not fresh_answers(self.bootstrap, self.security):
                        raise KafkaUnavailable(line)
                    self.unavailable = None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    have = self.latest()
                    raise TimeoutError(f"no model version {'>= ' + str(version) if version is not None else ''}"
                                       f"{' > ' + str(newer_than) if newer_than is not None else ''} on {self.topic} "
                                       f"within {timeout:g} s (latest: {have.version if have else 'none'})")
                self._cv.wait(0.5 if left is None else min(0.5, left))
            return self._current.version

    def runnable(self) -> Runnable:
        """The version in use, ready to run (RuntimeError before the first one)."""
        cur = self._current
        if cur is None:
            raise RuntimeError(f"no model version yet on {self.topic} (wait_for() first)")
        return cur

    def predict(self, x: Any) -> Any:
        """Class indices (classification) or values (regression) of the latest version for `x` (one sample of
        the version's input shape, or a batch of them)."""
        return self.runnable().predict(x)

    def outputs(self, x: Any) -> Any:
        """The latest version's raw outputs (logits, or values) for `x`."""
        return self.runnable().outputs(x)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=30)

    def __enter__(self) -> ModelSubscriber:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ the reader's thread
    def _outage_event(self, state: str, info: Any) -> None:
        """The outage's listener: past the budget `wait_for` raises (the reader keeps trying); its end clears it."""
        if state == "gave_up":
            self.unavailable = self.outage.message(info.what)
            with self._cv:
                self._cv.notify_all()
        elif state == "end":
            self.unavailable = None

    def _refuse(self, line: str) -> None:
        cur = self.latest()
        line = f"{self.topic}: refused: {line} (keeping {'version ' + str(cur.version) if cur else 'no version'})"
        self.refused.append(line)
        log.warning("%s", line)

    def _take(self, got: dict[int, ModelVersion]) -> None:
        """Of the complete versions `got`, the newest one that runs and is newer than the one in use."""
        for v in sorted(got, reverse=True):
            cur = self.latest()
            if cur is not None and v <= cur.version:
                return
            try:
                runnable = Runnable.of(got[v], self.providers)
            except NotRunnable as exc:
                self._refuse(str(exc))
                continue
            with self._cv:
                self._current = runnable
                self._cv.notify_all()
            log.info("%s: version %d (step %s) in use", self.topic, v, got[v].meta.get("step"))
            if self.on_version is not None:
                try:
                    self.on_version(got[v])
                except Exception:  # noqa: BLE001 - the caller's callback must not end the reader
                    log.exception("on_version raised")
            return

    def _wait_topic(self) -> bool:
        """Wait until the topic exists (a run that has not published yet); False once closed."""
        from confluent_kafka import KafkaException

        from edgestream.kafka.admin import admin_client

        admin = admin_client(self.bootstrap, self.security)
        while not self._closed.is_set():
            try:
                md = admin.list_topics(self.topic, timeout=5.0)
                t = md.topics.get(self.topic)
                if t is not None and t.error is None and t.partitions:
                    if self.outage is not None:
                        self.outage.up()
                    return True
                if self.outage is not None:
                    self.outage.up()
                self.unavailable = None  # Kafka answers
            except KafkaException as exc:
                if self.outage is not None:
                    try:
                        self.outage.down(f"waiting for {self.topic}", error=str(exc))
                    except KafkaUnavailable:
                        pass
            self._closed.wait(TOPIC_WAIT_S)
        return False

    def _run(self) -> None:
        from edgestream.kafka.topic_reader import Receiver

        try:
            if not self._wait_topic():
                return
            rx = Receiver(self.bootstrap, self.topic, f"{self.run}.models.sub.{uuid.uuid4().hex[:8]}",
                          "beginning", self.security, outage=self.outage)
        except Exception as exc:  # noqa: BLE001 - e.g. a setting no wait cures: said once, by wait_for
            self.error = f"{self.topic}: cannot read: {' '.join(str(exc).split())[:200]}"
            log.error("%s", self.error)
            with self._cv:
                self._cv.notify_all()
            return
        from confluent_kafka import KafkaException

        asm = Assembler(self.run)
        got: dict[int, ModelVersion] = {}
        end: int | None = None  # what was there when we joined: caught up before a version is loaded
        try:
            while not self._closed.is_set():
                try:
                    if end is None:
                        end = rx.end()
                    for raw in rx.poll(0.5):
                        self.unavailable = None  # a message: Kafka answers
                        if raw.value is None:
                            continue  # a tombstone: an old version's chunk deleted
                        try:
                            version = asm.add(raw.value)
                        except FormatError as exc:
                            self._refuse(str(exc))
                            continue
                        if version is not None:
                            got[version.version] = version
                except KafkaUnavailable:  # the budget ran out (said by the outage, `unavailable` set): keep trying
                    continue
                except KafkaException as exc:  # outage_s=None: no wait is watched; said, and tried again
                    log.warning("%s: %s", self.topic, " ".join(str(exc).split())[:200])
                    self._closed.wait(1.0)
                    continue
                if got and end is not None and rx.position >= end:
                    self._take(got)
                    got = {}
        finally:
            rx.close()
