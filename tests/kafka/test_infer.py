"""`edgestream infer` (issue 57, item 5; edgestream/edge/infer.py): a run's latest model version on a stream of records;
every input offset answered once, across a version change mid-stream; undecodable records answered with their
reason; the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from support.streams import _read_all

from edgestream import DeviceProducer, ModelSubscriber
from edgestream.config import load_dict
from edgestream.edge.infer import StreamInference
from edgestream.edge.onnx_model import Runnable
from edgestream.kafka.topic_names import device_topic
from edgestream.kafka.topic_provision import ensure_run_topics
from edgestream.publish.publisher import ModelPublisher

LIMIT_S = 90


def _setup(bootstrap: str, run: str, tmp_path, n: int, garbage_at: tuple[int, ...] = ()):
    from edgestream.runner.plan import RunPlan

    plan = RunPlan.resolve(load_dict({"name": "inf", "data": {"dataset": "digits"}, "model": {"name": "cnn-small"},
                                      "publish": {}}))
    ds = plan.dataset
    ensure_run_topics(bootstrap, run, [0])
    with DeviceProducer(bootstrap, run, 0) as dev:
        for k in range(n):
            if k in garbage_at:
                dev.flush(30)
                from confluent_kafka import Producer

                p = Producer({"bootstrap.servers": bootstrap})
                p.produce(device_topic(run, 0), b"not a sample", key=b"0")
                assert p.flush(30) == 0
            dev.send(ds.x_test[k % len(ds.x_test)], int(ds.y_test[k % len(ds.y_test)]))
    pub = ModelPublisher.of(plan, run, tmp_path, bootstrap)
    model = plan.build_model()
    pub.final(model, 1, 1.0, {})
    return plan, pub, model


def test_every_offset_is_answered_once_across_a_version_change_mid_stream(bootstrap, run_prefix, tmp_path):
    run = f"{run_prefix}-ddl-r1"
    plan, pub, model = _setup(bootstrap, run, tmp_path, 300, garbage_at=(70,))
    out_topic = f"{run}.answers"
    with ModelSubscriber(bootstrap, run) as sub:
        sub.wait_for(1, timeout=LIMIT_S)
        inf = StreamInference(bootstrap, sub, device_topic(run, 0), out_topic, batch=64)
        while inf.stats.answered < 150:
            inf.step()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(-1.0)  # another model: other predictions
        pub.final(model, 2, 2.0, {})
        sub.wait_for(2, timeout=LIMIT_S)
        while inf.stats.answered < 301:
            inf.step()
        assert inf.step(timeout_s=1.0) == 0  # nothing more: every record answered
        inf.close()
    pub.close()
    answers = [json.loads(m.value()) for m in _read_all(bootstrap, out_topic, 301, f"{run}.check")]
    assert sorted(a["offset"] for a in answers) == list(range(301))  # every offset once: none dropped or repeated
    assert [a["offset"] for a in answers] == list(range(301))  # in order (one partition)
    versions = [a["version"] for a in answers]
    assert versions == sorted(versions) and set(versions) == {1, 2}  # the change fell between batches
    assert inf.stats.versions[1] >= 150 and inf.stats.versions[2] >= 1
    bad = [a for a in answers if "error" in a]
    assert [a["offset"] for a in bad] == [70] and "prediction" not in bad[0] and bad[0]["error"]
    good = [a for a in answers if "error" not in a]
    ds = plan.dataset
    x = np.stack([ds.x_test[k % len(ds.x_test)] for k in range(300)])
    y = [int(ds.y_test[k % len(ds.y_test)]) for k in range(300)]
    assert [a["label"] for a in good] == y
    with ModelSubscriber(bootstrap, run) as sub:  # each answer is its version's prediction
        v2 = Runnable.of(sub.wait_for(2, timeout=LIMIT_S))
        by_version = {2: v2.predict(x)}
    v1 = Runnable.of(_version(tmp_path, 1))
    by_version[1] = v1.predict(x)
    assert all(a["prediction"] == int(by_version[a["version"]][i]) for i, a in enumerate(good))
    assert (by_version[1] != by_version[2]).any()


def _version(tmp_path, v: int):
    from edgestream.edge.versions import from_dir

    return from_dir(tmp_path)[0][v]


def test_the_command_line_answers_and_says_its_figures(bootstrap, run_prefix, tmp_path):
    run = f"{run_prefix}-ddl-r1"
    _, pub, _ = _setup(bootstrap, run, tmp_path, 100)
    pub.close()
    out_topic = f"{run}.answers"
    done = subprocess.run([sys.executable, "-m", "edgestream.cli", "infer", f"{run}.models", "--topic",
                           device_topic(run, 0), "--out-topic", out_topic, "--bootstrap", bootstrap, "--batch", "32",
                           "--max-records", "100"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["answered"] == 100 and figures["errors"] == 0 and figures["versions"] == {"1": 100}
    answers = [json.loads(m.value()) for m in _read_all(bootstrap, out_topic, 100, f"{run}.check")]
    assert [a["offset"] for a in answers] == list(range(100))
    bad = subprocess.run([sys.executable, "-m", "edgestream.cli", "infer", run, "--topic", "x", "--out-topic", "y",
                          "--bootstrap", bootstrap, "--field", "colour=red"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == ("--field: 'colour=red' is not allowed; must be NAME=VALUE "
                                                          "with NAME one of input, target, target_from, schema, dtype")


def test_a_device_scores_the_versions_on_its_own_stream(bootstrap, run_prefix, tmp_path):
    """The testbed's `devices` profile: `infer --config CFG --run-id ID --device 0 --report-s S` finds the run and
    device 0's own stream from the config, and says each version's accuracy on that device's data."""
    from factories import write_config

    from edgestream.config import load_config
    from edgestream.runner.plan import RunPlan

    rid = run_prefix.rsplit("-", 1)[1]
    cfg = write_config(tmp_path / "c.yaml", {"name": "devs", "data": {"dataset": "digits"},
                                             "model": {"name": "cnn-small"}, "publish": {}})
    run = RunPlan.resolve(load_config(cfg)).run_name(rid)
    _setup(bootstrap, run, tmp_path, 100)[1].close()
    done = subprocess.run([sys.executable, "-m", "edgestream.cli", "infer", "--config", str(cfg), "--run-id", rid,
                           "--device", "0", "--bootstrap", bootstrap, "--max-records", "100", "--report-s", "0.01"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    *reports, final = [json.loads(line) for line in done.stdout.splitlines()]
    assert final["answered"] == 100
    assert sum(r["records"] for r in reports) == 100 and {r["version"] for r in reports} == {1}
    answers = [json.loads(m.value()) for m in _read_all(bootstrap, f"{run}.answers.0", 100, f"{run}.check")]
    right = sum(a["prediction"] == a["label"] for a in answers)
    assert sum(r["accuracy"] * r["records"] for r in reports) == pytest.approx(right, abs=0.01)
    assert all(r["topic"] == device_topic(run, 0) for r in reports)


def test_a_version_published_while_infer_runs_swaps_in_between_batches(bootstrap, run_prefix, tmp_path):
    """The version changes while `run` answers in another thread: every offset answered once, the versions in
    order, and the records that arrive once version 2 is in use are answered by it."""
    import threading
    import time
    from collections import Counter

    run = f"{run_prefix}-ddl-r1"
    plan, pub, model = _setup(bootstrap, run, tmp_path, 500)
    out_topic = f"{run}.answers"
    with ModelSubscriber(bootstrap, run) as sub:
        sub.wait_for(1, timeout=LIMIT_S)
        inf = StreamInference(bootstrap, sub, device_topic(run, 0), out_topic, batch=16)
        worker = threading.Thread(target=inf.run, kwargs={"max_records": 1000})
        worker.start()
        deadline = time.monotonic() + LIMIT_S
        while inf.stats.answered < 100:  # mid-stream (a bound for a regression, not a figure)
            assert time.monotonic() < deadline and worker.is_alive()
            time.sleep(0.01)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(-1.0)
        pub.final(model, 2, 2.0, {})
        sub.wait_for(2, timeout=LIMIT_S)
        ds = plan.dataset
        with DeviceProducer(bootstrap, run, 0, start_seq=500) as dev:  # what arrives once version 2 is in use
            for k in range(500, 1000):
                dev.send(ds.x_test[k % len(ds.x_test)], int(ds.y_test[k % len(ds.y_test)]))
        worker.join(timeout=300)
        assert not worker.is_alive()
        inf.close()
    pub.close()
    answers = [json.loads(m.value()) for m in _read_all(bootstrap, out_topic, 1000, f"{run}.check")]
    assert [a["offset"] for a in answers] == list(range(1000))
    versions = [a["version"] for a in answers]
    assert versions == sorted(versions) and versions[0] == 1 and set(versions[500:]) == {2}
    assert inf.stats.versions == dict(Counter(versions))


def test_json_records_of_a_users_topic_are_answered(bootstrap, run_prefix, tmp_path):
    """Any supported record format: JSON records ({"pixels": [...], "digit": k}) on a topic a plain client wrote,
    answered like the wire's (the same predictions as the version on the same inputs)."""
    from confluent_kafka import Producer

    from edgestream.kafka.admin import create_topics

    run = f"{run_prefix}-ddl-r1"
    plan, pub, _ = _setup(bootstrap, run, tmp_path, 0)
    pub.close()
    ds = plan.dataset
    topic, out_topic = f"{run_prefix}.plant", f"{run_prefix}.plant.answers"
    create_topics(bootstrap, {topic: 1})
    p = Producer({"bootstrap.servers": bootstrap})
    for k in range(50):
        p.produce(topic, json.dumps({"pixels": ds.x_test[k].tolist(), "digit": int(ds.y_test[k])}).encode(),
                  key=str(k % 3).encode())
    assert p.flush(30) == 0
    with ModelSubscriber(bootstrap, run) as sub:
        version = sub.wait_for(1, timeout=LIMIT_S)
        inf = StreamInference(bootstrap, sub, topic, out_topic, fmt="json", fields={"input": "pixels",
                                                                                    "target": "digit"})
        inf.run(max_records=50)
        inf.close()
    answers = [json.loads(m.value()) for m in _read_all(bootstrap, out_topic, 50, f"{run}.check")]
    assert [a["offset"] for a in answers] == list(range(50)) and not any("error" in a for a in answers)
    assert [a["prediction"] for a in answers] == Runnable.of(version).predict(ds.x_test[:50]).tolist()
    assert [a["label"] for a in answers] == ds.y_test[:50].tolist()
    assert [a["key"] for a in answers] == [str(k % 3) for k in range(50)]


def test_infer_started_before_its_input_topic_waits_for_it(bootstrap, run_prefix, tmp_path):
    """A device container starts before the producer that creates its stream (the testbed's `devices` profile):
    `run` waits for the input topic to exist instead of failing on the subscription (UNKNOWN_TOPIC_OR_PART, exit 1
    before), then answers every record; the output topic is made like the input once it is there."""
    import threading

    from edgestream.kafka.admin import admin_client

    run = f"{run_prefix}-ddl-late"
    out_topic = f"{run}.answers"
    sub = ModelSubscriber(bootstrap, run)
    inf = StreamInference(bootstrap, sub, device_topic(run, 0), out_topic, batch=16)
    worker = threading.Thread(target=inf.run, kwargs={"max_records": 50, "version_timeout_s": LIMIT_S})
    worker.start()
    assert not inf._subscribed and out_topic not in admin_client(bootstrap).list_topics(timeout=30).topics
    _setup(bootstrap, run, tmp_path, 50)[1].close()  # the stream's topic, its records, version 1
    worker.join(timeout=LIMIT_S)
    assert not worker.is_alive() and inf.stats.answered == 50 and inf.stats.errors == 0
    inf.close()
    sub.close()
    answers = [json.loads(m.value()) for m in _read_all(bootstrap, out_topic, 50, f"{run}.check")]
    assert sorted(a["offset"] for a in answers) == list(range(50))
