"""Model versions on Kafka (issue 57; docs/model-format.md): `ModelPublisher` writes them chunked and checked to the
run directory and the compacted models topic, `ModelSubscriber` (no torch) takes the latest good one, refuses a
damaged or foreign one in one line keeping the last good, joins late, and rides out a Kafka outage."""

from __future__ import annotations

import hashlib
import json
import logging
import time

import numpy as np
import pytest
import torch
from confluent_kafka import Producer
from support.streams import _read_all

from edgestream import KafkaUnavailable, ModelSubscriber
from edgestream.config import load_dict
from edgestream.edge.model_format import (
    META_FILE,
    ONNX_FILE,
    WEIGHTS_FILE,
    body_of,
    chunk_body,
    encode,
    metadata,
)
from edgestream.kafka.topic_names import models_topic
from edgestream.publish.publisher import PUBLISHED_FILE, ModelPublisher

#: how long a version may take to reach a subscriber before the test fails (a bound for a regression, not a figure)
LIMIT_S = 90


def _plan(**publish):
    from edgestream.runner.plan import RunPlan

    return RunPlan.resolve(load_dict({"name": "mv", "data": {"dataset": "digits"}, "model": {"name": "cnn-small"},
                                      "publish": {"chunk_bytes": 4096, "keep": 2, **publish}}))


def _nudge(model: torch.nn.Module, k: int) -> None:
    """Another model (as training would make it): every parameter moved, deterministically."""
    gen = torch.Generator().manual_seed(k)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))


def _torch_out(plan, model, x):
    with torch.no_grad():
        return model.eval()(torch.from_numpy(plan.serde.normalize(x))).numpy()


def _until(cond, what: str, limit_s: float = LIMIT_S) -> None:
    """Wait for `cond()` (an event the test causes), failing after `limit_s` (a bound, not a figure)."""
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def test_versions_reach_a_subscriber_chunked_and_a_late_joiner_loads_only_the_latest(bootstrap, run_prefix,
                                                                                    tmp_path):
    plan = _plan()
    run = f"{run_prefix}-ddl-r1"
    model = plan.build_model()
    x = plan.dataset.x_test[:50]
    pub = ModelPublisher.of(plan, run, tmp_path, bootstrap)
    seen = []
    with ModelSubscriber(bootstrap, run, on_version=lambda v: seen.append(v.version)) as sub:
        assert sub.latest() is None
        with pytest.raises(RuntimeError, match=r"no model version yet on .*\.models \(wait_for\(\) first\)"):
            sub.predict(x)
        assert pub.final(model, 10, 5.0, {"heldout": {"accuracy": 0.25, "loss": 2.0}}) == 1
        v1 = sub.wait_for(1, timeout=LIMIT_S)
        assert (v1.version, v1.step, v1.run) == (1, 10, run)
        assert v1.meta["metrics"] == {"heldout": {"accuracy": 0.25, "loss": 2.0}, "prequential": None}
        assert v1.meta["input"] == {"shape": [1, 8, 8], "dtype": "uint8",
                                    "normalization": plan.model_facts()["input"]["normalization"]}
        want = _torch_out(plan, model, x)
        assert np.abs(sub.outputs(x) - want).max() <= 1e-4  # the ONNX graph applies the trainer's normalisation
        assert (sub.predict(x) == want.argmax(1)).all() and sub.predict(x[0]).shape == (1,)
        _nudge(model, 2)
        assert pub.final(model, 20, 9.0, {}) == 2
        v2 = sub.wait_for(newer_than=1, timeout=LIMIT_S)
        assert v2.version == 2 and np.abs(sub.outputs(x) - _torch_out(plan, model, x)).max() <= 1e-4
        assert seen == [1, 2]
        _nudge(model, 3)
        assert pub.final(model, 30, 12.0, {}) == 3
        sub.wait_for(3, timeout=LIMIT_S)
    pub.close()
    # the run directory: whole versions, the files the metadata names with their checksums
    for v in (1, 2, 3):
        d = tmp_path / "models" / f"v{v}"
        meta = json.loads((d / META_FILE).read_text())
        assert meta["version"] == v and meta["run"] == run and meta["format_version"] == 1
        assert [f["name"] for f in meta["files"]] == [ONNX_FILE, WEIGHTS_FILE]
        for f in meta["files"]:
            assert hashlib.sha256((d / f["name"]).read_bytes()).hexdigest() == f["sha256"]
        assert json.loads((d / PUBLISHED_FILE).read_text())["chunks"] > 1  # 4 KiB chunks: many per version
    late_seen = []
    with ModelSubscriber(bootstrap, topic=models_topic(run), on_version=lambda v: late_seen.append(v.version)) as late:
        assert late.wait_for(timeout=LIMIT_S).version == 3
        assert np.abs(late.outputs(x) - _torch_out(plan, model, x)).max() <= 1e-4
    assert late_seen == [3]  # caught up first: only the latest version was loaded
    # keep 2: version 1's chunks were deleted by tombstones (compaction then removes them)
    msgs = _read_all(bootstrap, models_topic(run), 1, f"{run}.check", limit_s=60)
    tombstoned = {m.key() for m in msgs if m.value() is None}
    chunks1 = json.loads((tmp_path / "models" / "v1" / PUBLISHED_FILE).read_text())["chunks"]
    assert tombstoned == {f"v1.{i}".encode() for i in range(chunks1)}


def test_resumed_numbering_continues_and_the_cadence_with_it(tmp_path):
    """A publisher made again on the same run directory (a resumed run) numbers on from the highest version there;
    a directory of a version killed mid-write (`.v<N>.tmp`) is not a version; the cadence continues."""
    plan = _plan(every_steps=5)
    model = plan.build_model()
    pub = ModelPublisher.of(plan, "mv-ddl-r2", tmp_path, None)
    assert not pub.due(4, 100.0) and pub.due(5, 0.0)
    assert [pub.final(model, s, float(s), {}) for s in (5, 10)] == [1, 2]
    (tmp_path / "models" / ".v3.tmp").mkdir()  # killed while writing version 3
    before = {v: (tmp_path / "models" / f"v{v}" / ONNX_FILE).read_bytes() for v in (1, 2)}
    again = ModelPublisher.of(plan, "mv-ddl-r2", tmp_path, None)
    assert (again.next, again.last_step) == (3, 10) and not again.due(14, 0.0) and again.due(15, 0.0)
    _nudge(model, 1)
    assert again.final(model, 15, 15.0, {}) == 3
    assert {v: (tmp_path / "models" / f"v{v}" / ONNX_FILE).read_bytes() for v in (1, 2)} == before
    assert not (tmp_path / "models" / ".v3.tmp").exists()


def _produce(bootstrap: str, topic: str, msgs) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for key, value, headers in msgs:
        p.produce(topic, value, key=key, headers=headers)
    assert p.flush(30) == 0


def test_damaged_foreign_and_unrunnable_versions_are_refused_in_one_line_keeping_the_last_good(
        bootstrap, run_prefix, tmp_path, caplog):
    plan = _plan()
    run = f"{run_prefix}-ddl-r1"
    topic = models_topic(run)
    model = plan.build_model()
    x = plan.dataset.x_test[:20]
    pub = ModelPublisher.of(plan, run, tmp_path, bootstrap)
    pub.final(model, 1, 1.0, {})
    d = tmp_path / "models" / "v1"
    files = {n: (d / n).read_bytes() for n in (ONNX_FILE, WEIGHTS_FILE)}
    meta = {k: v for k, v in json.loads((d / META_FILE).read_text()).items()
            if k not in ("files", "run", "version", "format", "format_version")}
    with caplog.at_level(logging.WARNING, logger="edgestream.models"), ModelSubscriber(bootstrap, run) as sub:
        sub.wait_for(1, timeout=LIMIT_S)
        good = sub.outputs(x)
        damaged = encode(run, 101, meta, files, 4096)
        key, value, headers = damaged[1]
        damaged[1] = (key, value[:-1] + bytes([value[-1] ^ 1]), headers)  # one bit of chunk 1's slice
        doc = metadata(run, 102, meta, files)
        doc["files"][1]["sha256"] = hashlib.sha256(b"other weights").hexdigest()  # a file that is not what it says
        wrong_sum = chunk_body(run, 102, body_of(doc, files), 4096)
        foreign = encode("another-ddl-r9", 103, meta, files, 4096)
        no_onnx = encode(run, 104, {**meta, "onnx_error": "model x: ONNX export failed (...)"},
                         {WEIGHTS_FILE: files[WEIGHTS_FILE]}, 4096)
        _produce(bootstrap, topic, damaged + wrong_sum + foreign + no_onnx)
        _until(lambda: len(sub.refused) >= 4, "four refusals")
        assert sub.latest().version == 1 and np.array_equal(sub.outputs(x), good)
        lines = list(sub.refused)
        assert all("\n" not in line and line.endswith("(keeping version 1)") for line in lines), lines
        assert lines[0] == f"{topic}: refused: bad checksum: chunk 1 of {len(damaged)} of version 101 (keeping version 1)"
        assert lines[1] == f"{topic}: refused: file {WEIGHTS_FILE}: sha256 mismatch (keeping version 1)"
        assert f"foreign run: version 103 is of run another-ddl-r9, this is {run}" in lines[2]
        assert f"version 104: no {ONNX_FILE} to run (model x: ONNX export failed (...))" in lines[3]
        assert [r.getMessage() for r in caplog.records if r.name == "edgestream.models"] == lines
        _nudge(model, 5)  # a good version after them is taken
        assert pub.final(model, 2, 2.0, {}) == 2
        assert sub.wait_for(2, timeout=LIMIT_S).version == 2
    pub.close()


def test_a_subscriber_rides_out_a_kafka_outage_and_keeps_predicting(broker, tmp_path, caplog):
    plan = _plan()
    bs, run = broker.bootstrap, "away-ddl-r1"
    model = plan.build_model()
    x = plan.dataset.x_test[:20]
    pub = ModelPublisher.of(plan, run, tmp_path, bs)
    pub.final(model, 1, 1.0, {})
    with caplog.at_level(logging.WARNING, logger="edgestream.kafka.outage"), \
            ModelSubscriber(bs, run, outage_s=300) as sub:
        sub.wait_for(1, timeout=LIMIT_S)
        before = sub.predict(x)
        broker.stop()
        _until(lambda: sub.outage.waiting, "the subscriber noticed the outage")
        assert np.array_equal(sub.predict(x), before)  # the last good version serves meanwhile
        broker.start()
        _nudge(model, 7)
        pub2 = ModelPublisher.of(plan, run, tmp_path, bs)
        assert pub2.final(model, 2, 2.0, {}) == 2
        assert sub.wait_for(2, timeout=240).version == 2
        _until(lambda: not sub.outage.waiting, "the outage ended")
        pub2.close()
    pub.close()
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"waiting for Kafka at {bs} since ") and "outage_s" in m for m in said), said
    assert any(m.startswith(f"Kafka at {bs} answers again after ") for m in said), said


def test_the_spec_reader_reads_the_vectors_and_a_publishers_versions_off_a_topic(bootstrap, run_prefix, tmp_path):
    """docs/model-format.md's reader (tests/support/spec_reader.py: confluent-kafka, numpy, onnxruntime, no edgestream)
    on a real topic: the committed vectors produced as they are, and versions a ModelPublisher sent."""
    from pathlib import Path

    from confluent_kafka import Consumer, TopicPartition
    from support import spec_reader

    from edgestream.kafka.admin import create_topics

    vectors = Path(__file__).resolve().parents[1] / "vectors" / "model_format"
    doc = json.loads((vectors / "vectors.json").read_text())
    topic = f"{run_prefix}.vectors"
    create_topics(bootstrap, {topic: 1}, config={"cleanup.policy": "compact"})
    _produce(bootstrap, topic, [(m["key"].encode(), (vectors / m["file"]).read_bytes() if m["file"] else None,
                                 [(k, v.encode()) for k, v in m["headers"]]) for m in doc["messages"]])
    plan = _plan()
    run = f"{run_prefix}-ddl-r1"
    model = plan.build_model()
    pub = ModelPublisher.of(plan, run, tmp_path, bootstrap)
    pub.final(model, 1, 1.0, {})
    _nudge(model, 1)
    pub.final(model, 2, 2.0, {})
    pub.close()

    def read(topic_name: str, run_name: str) -> dict:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic_name}.spec", "enable.auto.commit": False})
        tp = TopicPartition(topic_name, 0, 0)
        c.assign([tp])
        end = c.get_watermark_offsets(tp, timeout=10)[1]
        reader, good, pos = spec_reader.Reader(run_name), {}, 0
        while pos < end:
            for m in c.consume(100, timeout=1.0):
                if m.error() is None:
                    pos = m.offset() + 1
                    try:
                        got = reader.add(m.value())
                    except spec_reader.Refused:
                        continue
                    if got is not None:
                        good[got["version"]] = got
        c.close()
        return good

    good = read(topic, doc["expect"]["run"])
    assert sorted(good) == [1, 2]
    x = np.array(doc["expect"]["input"], dtype=np.uint8)
    assert spec_reader.predict(good[2], x).argmax(1).tolist() == doc["expect"]["versions"]["2"]["predictions"]
    published = read(models_topic(run), run)
    assert sorted(published) == [1, 2]
    xs = plan.dataset.x_test[:10]
    assert np.abs(spec_reader.predict(published[2], xs) - _torch_out(plan, model, xs)).max() <= 1e-4


def _cli(*args: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "edgestream.cli", *args], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_models_list_show_pull_from_the_topic_and_the_run_directory(bootstrap, run_prefix, tmp_path):
    plan = _plan()
    run = f"{run_prefix}-ddl-r1"
    run_dir = tmp_path / run
    model = plan.build_model()
    pub = ModelPublisher.of(plan, run, run_dir, bootstrap)
    pub.final(model, 10, 4.0, {"heldout": {"accuracy": 0.5, "loss": 1.2}})
    _nudge(model, 1)
    pub.final(model, 20, 8.0, {"heldout": {"accuracy": 0.75, "loss": 0.6}})
    pub.close()
    for where in (run, str(run_dir)):  # the topic, the run directory
        code, out, err = _cli("models", "list", where, "--bootstrap", bootstrap, "--json")
        assert code == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        assert [(r["version"], r["step"], r["metrics"]["heldout"]["accuracy"]) for r in rows] == [(1, 10, 0.5),
                                                                                                  (2, 20, 0.75)]
        code, out, err = _cli("models", "show", where, "1", "--bootstrap", bootstrap)
        assert code == 0 and json.loads(out)["version"] == 1 and json.loads(out)["run"] == run, err
        dest = tmp_path / f"pulled-{where == run}"
        code, out, err = _cli("models", "pull", where, "--out", str(dest), "--bootstrap", bootstrap)
        assert code == 0, err
        for name in (ONNX_FILE, WEIGHTS_FILE, META_FILE):
            assert (dest / "v2" / name).read_bytes() == (run_dir / "models" / "v2" / name).read_bytes()
    code, out, err = _cli("models", "list", run, "--bootstrap", bootstrap)
    assert code == 0 and "accuracy 0.7500" in out, err
    assert _cli("models", "show", run, "9", "--bootstrap", bootstrap)[2].strip() == \
        f"VERSION: 9 is not in {models_topic(run)} (there: 1, 2)"
    code, _, err = _cli("models", "list", f"{run_prefix}-none-r1", "--bootstrap", bootstrap)
    assert code == 2 and err.strip() == (f"RUN: no topic {run_prefix}-none-r1.models on {bootstrap} (the run has "
                                         "published no version)")
    (tmp_path / "empty").mkdir()
    code, _, err = _cli("models", "list", str(tmp_path / "empty"))
    assert code == 2 and err.strip().startswith(f"RUN: {tmp_path / 'empty'} holds no model versions")


def test_past_outage_s_wait_for_raises_one_line_and_versions_flow_again_after(broker, tmp_path):
    plan = _plan()
    bs, run = broker.bootstrap, "gone-ddl-r1"
    model = plan.build_model()
    ModelPublisher.of(plan, run, tmp_path, bs).final(model, 1, 1.0, {})
    with ModelSubscriber(bs, run, outage_s=3) as sub:
        sub.wait_for(1, timeout=LIMIT_S)
        broker.stop()
        with pytest.raises(KafkaUnavailable) as err:
            sub.wait_for(newer_than=1, timeout=240)
        # (while reading the topic, or waiting for its partition's leader: what the reader was doing when it stopped)
        assert str(err.value).startswith(f"no answer from Kafka at {bs} for 3 s (outage_s) while ")
        assert models_topic(run) in str(err.value) and "\n" not in str(err.value)
        assert sub.latest().version == 1 and sub.predict(plan.dataset.x_test[:3]).shape == (3,)
        broker.start()
        _nudge(model, 9)
        pub = ModelPublisher.of(plan, run, tmp_path, bs)
        assert pub.final(model, 2, 2.0, {}) == 2
        assert sub.wait_for(2, timeout=240).version == 2 and sub.unavailable is None
        pub.close()
