"""Training on streams edgestream did not write (issue 33 items 1-3): external topics (a topic per device, or one
keyed topic), records in JSON, Avro and raw float32 written by PLAIN confluent-kafka producers (no edgestream code
on the device side), malformed records dead-lettered with reasons naming the field, the deterministic hold-out
never trained on, kill + --resume continuing at the checkpointed offsets.

Real broker (the session's `bootstrap`), real `edgestream run --engine local` orchestrators and trainers.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.runs import finish, kill_run, resume_ckpts, run, start, step_lines, wait_steps

from edgestream.config import ConfigError, load_config, load_dict
from edgestream.consumers.from_plan import eval_data, kafka_dataset
from edgestream.data.holdout import held_out
from edgestream.kafka.layout import StreamLayout, key_partition

W = np.array([[1.5, -1.0, 0.5, 0.0], [-0.5, 1.0, 1.0, -1.0], [0.0, 0.5, -1.5, 1.5]], np.float32)  # 3 classes


def _samples(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, np.argmax(x @ W.T, axis=1).astype(np.int64)


def _topics(bootstrap: str, names: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, p, 1) for t, p in names.items()]).values():
        f.result(30)


def _produce(bootstrap: str, items: list[tuple[str, bytes | None, bytes, list | None]], **conf) -> None:
    """Plain confluent-kafka: (topic, key, value, headers) in order."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **conf})
    for topic, key, value, headers in items:
        p.produce(topic, value, key=key, headers=headers)
        p.poll(0)
    assert p.flush(30) == 0


def _dlq(bootstrap: str, run: str) -> list[dict]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{run}.test-dlq", "auto.offset.reset": "earliest"})
    c.subscribe([f"{run}.dlq"])
    out, deadline = [], time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            if out:
                break
            continue
        if m.error() is None:
            out.append({k: v.decode() for k, v in (m.headers() or [])} | {"value": m.value(), "key": m.key()})
    c.close()
    return out


def _cfg(tmp_path: Path, name: str, streams: dict, *, devices: int = 2, max_steps: int = 30, every_steps=None,
         eval_: dict | None = None, task: str = "classification", data: dict | None = None,
         lr: float = 0.1) -> Path:
    cfg = {"name": name, "seed": 0, "task": task,
           "data": data or {"shape": [4], "num_classes": 3},
           "devices": {"count": devices},
           "model": {"name": "mlp"},
           "optim": {"lr": lr, "momentum": 0.9},
           "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 16}},
           "stop": {"max_time_s": 120, "max_steps": max_steps, **({"target_accuracy": None}
                                                                 if task == "classification" else {})},
           "eval": {"every_s": 1, **(eval_ or {})},
           "streams": {"source": "external", **streams},
           "runtime": {"engine": "local"}}
    if every_steps:
        cfg["checkpoint"] = {"every_steps": every_steps}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _test_file(tmp_path: Path) -> Path:
    x, y = _samples(600, seed=99)
    np.savez(tmp_path / "test.npz", x=x, y=y)
    return tmp_path / "test.npz"


def _evals(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines() if '"kind":"eval"' in ln]


# ---------------------------------------------------------------- config (no broker)


BASE = {"name": "x", "runtime": {"engine": "local"}, "data": {"shape": [4], "num_classes": 3},
        "streams": {"source": "external", "topic": "plant.s-{device}", "format": "json", "input": "v",
                    "target": "cls"}}


@pytest.mark.parametrize("change, words", [
    ({"streams": {"source": "external"}}, "streams.topic: required"),
    ({"streams": {"topic": "a.b"}}, "streams.topic: only external streams take it"),
    ({"runtime": {"engine": "sim"}}, "set runtime.engine: local"),
    ({"data": {"shape": [4], "num_classes": 3, "dataset": "synthetic"}}, "data.dataset: external streams bring"),
    ({"data": {"num_classes": 3}}, "data.shape: required"),
    ({"data": {"shape": [4]}}, "data.num_classes: required"),
    ({"streams": {**BASE["streams"], "topic": "bad topic {device}"}}, "is not a Kafka topic name"),
    ({"streams": {**BASE["streams"], "partitioner": "murmur2"}}, "partitioner: applies to one keyed topic"),
    ({"streams": {**BASE["streams"], "start": "yesterday"}}, "streams.start: yesterday is not allowed; must be earliest, latest"),
    ({"kafka": {"topics": {"layout": "partitioned"}}}, "kafka.topics.layout: partitioned"),
    ({"eval": {"path": "t.npz", "holdout": 0.1}}, "not both"),
    ({"stop": {"target_accuracy": 0.9, "max_steps": 5}}, "needs an evaluation set"),
])
def test_external_configs_are_refused_naming_the_field(change, words, tmp_path):
    raw = {**BASE, **change}
    with pytest.raises(ConfigError) as exc:
        load_dict(raw, base=tmp_path)
    assert words in str(exc.value), str(exc.value)


def test_an_internal_run_refuses_the_stream_only_fields():
    with pytest.raises(ConfigError, match="eval.holdout: applies to external streams"):
        load_dict({"name": "x", "eval": {"holdout": 0.1}})


def test_an_external_config_survives_the_run_directory_round_trip(tmp_path):
    schema = tmp_path / "r.avsc"
    schema.write_text(json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "v", "type": {"type": "array", "items": "float"}}, {"name": "cls", "type": "int"}]}))
    cfg = load_dict({**BASE, "streams": {"source": "external", "topic": "plant", "format": "avro", "input": "v",
                                         "target": "cls", "schema": "r.avsc", "start": "2026-11-26T10:00:00Z"},
                     "eval": {"holdout": 0.2}}, base=tmp_path)
    assert cfg.streams.schema_ == str(schema) and cfg.streams.start == 1795687200000
    again = load_dict(yaml.safe_load(cfg.to_yaml()))  # what the children read
    assert again.streams == cfg.streams and again.eval.holdout == 0.2 and again.stop == cfg.stop


@pytest.mark.parametrize("text, ms", [("2026-11-26T10:00:00Z", 1795687200000), ("2026-11-26T11:00:00+01:00", 1795687200000),
                                       ("2026-11-26T10:00:00", 1795687200000), ("2026-11-26", 1795651200000)])
def test_an_unquoted_start_time_is_read_as_its_iso_text(text, ms, tmp_path):
    """YAML reads an unquoted ISO time as a datetime (a date): in a config file, and through
    `--set streams.start=...` (the testbed's STREAMS_START); the same instant as the quoted string."""
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(BASE))
    raw = yaml.safe_load(f.read_text().replace("source: external", f"source: external\n  start: {text}"))
    assert not isinstance(raw["streams"]["start"], str)
    assert load_dict(raw, base=tmp_path).streams.start == ms
    assert load_config(f, [f"streams.start={text}"]).streams.start == ms


def test_config_validate_takes_the_example_and_names_a_format_field_it_does_not_take():
    import sys

    example = Path(__file__).parents[2] / "examples" / "json-sensors" / "sensors.yaml"
    cli = [sys.executable, "-m", "edgestream.cli", "config", "validate", str(example)]
    ok = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([*cli, "--set", "streams.schema=x.avsc"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "streams.schema: format 'json' does not take it" in bad.stderr + bad.stdout


def test_the_layout_maps_devices_to_their_topics_and_partitions():
    per = StreamLayout("r", 3, external="plant.s-{device}")
    assert [per.stream(d) for d in range(3)] == [("plant.s-0", 0), ("plant.s-1", 0), ("plant.s-2", 0)]
    assert per.topics() == {"r.inj.0": 1, "r.inj.1": 1, "r.inj.2": 1} and per.keep(1) is None
    keyed = StreamLayout("r", 6, 4, external="plant", partitioner="consistent")
    for d in range(6):
        topic, p = keyed.stream(d)
        assert topic == "plant" and p == key_partition(str(d).encode(), 4, "consistent")
        assert d in keyed.sharing(d) and keyed.keep(d)(str(d).encode())
    assert keyed.injection(2) == ("r.inj.2", 0) and keyed.injection_keep(2) is None


def test_the_hold_out_is_a_fixed_share_by_device_and_offset():
    offsets = np.arange(200_000)
    for device in (0, 3, 1000):
        mask = held_out(device, offsets, 0.1)
        assert abs(mask.mean() - 0.1) < 0.005
        assert (held_out(device, offsets, 0.1) == mask).all()  # deterministic
    assert (held_out(0, offsets, 0.1) != held_out(1, offsets, 0.1)).any()


# ---------------------------------------------------------------- with a broker


def test_keyed_partitions_are_where_the_clients_put_them(bootstrap, run_prefix):
    """consistent = confluent-kafka's default partitioner, murmur2 = the Java client's (librdkafka's
    murmur2_random for keyed messages): the layout finds each device's records where a plain client wrote them."""
    topic = f"{run_prefix}.keyed"
    _topics(bootstrap, {topic: 7})
    for partitioner, conf in (("consistent", {}), ("murmur2", {"partitioner": "murmur2_random"})):
        _produce(bootstrap, [(topic, str(d).encode(), partitioner.encode(), None) for d in range(40)], **conf)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}.{partitioner}",
                      "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        seen, deadline = {}, time.monotonic() + 20
        while len(seen) < 40 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None and m.value() == partitioner.encode():
                seen[int(m.key())] = m.partition()
        c.close()
        assert seen == {d: key_partition(str(d).encode(), 7, partitioner) for d in range(40)}


def _json_items(topic: str, x: np.ndarray, y: np.ndarray, key: bytes | None = None) -> list:
    return [(topic, key, json.dumps({"v": row.tolist(), "cls": int(c), "site": "a"}).encode(), None)
            for row, c in zip(x, y, strict=True)]


BAD_JSON = [(b"{not json", "bad_json"), (json.dumps({"v": [1, 2, 3, 4], "cls": "two"}).encode(), "target 'cls'"),
            (json.dumps({"v": [1, 2, 3], "cls": 1}).encode(), "input 'v'"),
            (json.dumps({"cls": 1}).encode(), "input 'v'"), (json.dumps({"v": [1, 2, 3, 4], "cls": 7}).encode(),
                                                             "target 'cls'")]


@pytest.mark.timeout(600)
def test_json_topics_per_device_train_learn_and_dead_letter_what_is_malformed(bootstrap, run_prefix, tmp_path):
    pattern = f"{run_prefix}.sensor-{{device}}"
    _topics(bootstrap, {pattern.format(device=d): 1 for d in range(2)})
    bad_at = {}
    for d in range(2):
        x, y = _samples(700, seed=d)
        items = _json_items(pattern.format(device=d), x, y)
        for i, (value, _) in enumerate(BAD_JSON):  # malformed records among the good ones
            items.insert(7 + 11 * i, (pattern.format(device=d), None, value, None))
        bad_at[d] = {7 + 11 * i for i in range(len(BAD_JSON))}
        _produce(bootstrap, items)
    cfg = _cfg(tmp_path, run_prefix, {"topic": pattern, "format": "json", "input": "v", "target": "cls"},
               eval_={"path": str(_test_file(tmp_path))})
    out = tmp_path / "runs"
    code, _, err = run(cfg, bootstrap, out=out)
    assert code == 0, err
    run_dir = out / f"{run_prefix}-ddl-r1"
    evals = _evals(run_dir)
    assert evals and evals[-1]["accuracy"] > 0.7, evals[-1:]   # 3 classes: chance is 1/3
    dlq = _dlq(bootstrap, run_dir.name)
    assert sorted((int(r["source_offset"]), r["source_topic"]) for r in dlq) == sorted(
        (o, pattern.format(device=d)) for d in range(2) for o in bad_at[d])
    for r in dlq:  # each reason names what was wrong
        want = dict((v, w) for v, w in BAD_JSON)[r["value"]]
        assert want in r["reason"], r
    from edgestream.kafka.status import run_status

    st = run_status(bootstrap, run_dir.name, interval_s=0)  # status finds the run and each device's stream
    assert st["layout"] == "external" and [r["device"] for r in st["devices"]] == [0, 1]
    for r in st["devices"]:
        assert r["topic"] == f"{pattern.format(device=r['device'])}[0]" and r["produced"] == 705
        assert r["acknowledged"] >= 30 * 16 and r["lag"] == r["produced"] - r["acknowledged"]
    for d in range(2):  # the malformed offsets never counted as trained samples
        lines = step_lines(run_dir / "ranks" / f"{d}.jsonl")
        assert len(lines) == 30
        for e in lines:
            inside = sum(1 for o in bad_at[d] if e["seq_first"] <= o <= e["seq_last"])
            assert e["seq_count"] == e["seq_last"] - e["seq_first"] + 1 - inside == 16


@pytest.mark.timeout(600)
def test_one_keyed_avro_topic_trains_with_a_hold_out(bootstrap, run_prefix, tmp_path):
    import io

    import fastavro

    schema = {"type": "record", "name": "Reading", "fields": [
        {"name": "v", "type": {"type": "array", "items": "float"}}, {"name": "cls", "type": "int"}]}
    (tmp_path / "reading.avsc").write_text(json.dumps(schema))
    parsed = fastavro.parse_schema(schema)
    topic = f"{run_prefix}.plant"
    _topics(bootstrap, {topic: 2})
    items = []
    for d in range(3):
        x, y = _samples(900, seed=10 + d)
        for row, c in zip(x, y, strict=True):
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, {"v": row.tolist(), "cls": int(c)})
            items.append((topic, str(d).encode(), buf.getvalue(), None))
    items.insert(20, (topic, b"9", items[0][2], None))      # no such device (devices.count 3)
    items.insert(30, (topic, b"1", b"\xff\xff\xff", None))  # not an Avro record of the schema
    _produce(bootstrap, items)
    cfg = _cfg(tmp_path, run_prefix, {"topic": topic, "format": "avro", "schema": "reading.avsc", "input": "v",
                                      "target": "cls"}, devices=3, max_steps=40, eval_={"holdout": 0.2})
    out = tmp_path / "runs"
    code, _, err = run(cfg, bootstrap, out=out)
    assert code == 0, err
    run_dir = out / f"{run_prefix}-ddl-r1"
    evals = _evals(run_dir)
    assert evals and evals[-1]["accuracy"] > 0.7, evals[-1:]
    reasons = sorted(r["reason"].split(":")[0] for r in _dlq(bootstrap, run_dir.name))
    assert reasons == ["bad_avro", "device_mismatch"], reasons


@pytest.mark.timeout(600)
def test_raw_float32_records_with_a_header_target_train_a_regression(bootstrap, run_prefix, tmp_path):
    pattern = f"{run_prefix}.raw-{{device}}"
    _topics(bootstrap, {pattern.format(device=d): 1 for d in range(2)})
    w = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    for d in range(2):
        x, _ = _samples(2500, seed=20 + d)
        items = [(pattern.format(device=d), None, row.tobytes(), [("target", f"{float(row @ w):.6f}".encode())])
                 for row in x]
        items.insert(9, (pattern.format(device=d), None, x[0][:3].tobytes(), [("target", b"1.0")]))  # 12 bytes
        _produce(bootstrap, items)
    x, _ = _samples(400, seed=98)
    np.savez(tmp_path / "test.npz", x=x, y=(x @ w).astype(np.float32))
    cfg = _cfg(tmp_path, run_prefix, {"topic": pattern, "format": "raw", "dtype": "float32", "target_from": "header",
                                      "target": "target"}, task="regression", data={"shape": [4]},
               eval_={"path": str(tmp_path / "test.npz")}, max_steps=120, lr=0.01)
    out = tmp_path / "runs"
    code, _, err = run(cfg, bootstrap, out=out)
    assert code == 0, err
    run_dir = out / f"{run_prefix}-ddl-r1"
    evals = _evals(run_dir)
    baseline = float(np.sqrt(np.mean((x @ w) ** 2)))  # predicting 0
    assert evals[-1]["rmse"] < 0.5 * baseline, (evals[0], evals[-1], baseline)
    assert [r["reason"].split(":")[0] for r in _dlq(bootstrap, run_dir.name)] == ["bad_length", "bad_length"]


def test_held_out_records_never_reach_a_batch(bootstrap, run_prefix, tmp_path):
    from edgestream.config import load_config
    from edgestream.runner.plan import RunPlan

    pattern = f"{run_prefix}.h-{{device}}"
    _topics(bootstrap, {pattern.format(device=0): 1})
    x, y = _samples(400, seed=5)
    _produce(bootstrap, _json_items(pattern.format(device=0), x, y))
    cfg = load_config(_cfg(tmp_path, run_prefix, {"topic": pattern, "format": "json", "input": "v", "target": "cls"},
                           devices=1, eval_={"holdout": 0.25}))
    plan = RunPlan.resolve(cfg)
    ds = kafka_dataset(plan, bootstrap, run_prefix, 0, timeout=5.0)
    trained = []
    try:
        while len(trained) < 400 - int(held_out(0, np.arange(400), 0.25).sum()) - 16:
            b = ds.next_batch()
            assert b is not None
            trained += b.seqs.tolist()
            assert (b.labels.numpy() == y[b.seqs]).all()  # each row is its record
    finally:
        ds.close()
    held = set(np.flatnonzero(held_out(0, np.arange(400), 0.25)).tolist())
    assert held and not held & set(trained)
    assert trained == [o for o in range(trained[-1] + 1) if o not in held]  # the rest, in order, once
    assert ds.totals["held_out"] == len({o for o in held if o <= trained[-1]})
    # the evaluator's side: exactly those records
    from edgestream.consumers.holdout import HoldoutSet

    hs = eval_data(plan, bootstrap, run_prefix)
    try:
        assert isinstance(hs, HoldoutSet)
        deadline = time.monotonic() + 20
        while len(hs) < len(held) and time.monotonic() < deadline:
            hs.refresh()
        xs, ys = hs.get()
        assert len(ys) == len(held) and (ys.numpy() == y[sorted(held)]).all()
    finally:
        hs.close()


@pytest.mark.timeout(600)
def test_kill_and_resume_continue_at_the_checkpointed_offsets(bootstrap, run_prefix, tmp_path):
    """One keyed JSON topic whose producer puts device d in partition d (partitioner: modulo); the orchestrator
    and its trainers are SIGKILLed mid-run; --resume continues each device at its checkpointed offset."""
    topic = f"{run_prefix}.k"
    _topics(bootstrap, {topic: 2})
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for d in range(2):
        x, y = _samples(1500, seed=30 + d)
        for _, key, value, _ in _json_items(topic, x, y, str(d).encode()):
            p.produce(topic, value, key=key, partition=d)
            p.poll(0)
    assert p.flush(30) == 0
    cfg = _cfg(tmp_path, run_prefix, {"topic": topic, "partitioner": "modulo", "format": "json", "input": "v",
                                      "target": "cls"},
               max_steps=60, every_steps=4, eval_={"path": str(_test_file(tmp_path))})
    out = tmp_path / "runs"
    proc = start(cfg, bootstrap, out=out)
    run_dir = out / f"{run_prefix}-ddl-r1"
    wait_steps(run_dir, proc, 2, 10)
    kill_run(run_dir, proc)  # the orchestrator dies; its trainers follow (parent watch) or are killed
    ck = resume_ckpts(run_dir, 2)  # a rank killed before writing a step's checkpoint: the other goes back one
    first = {r: step_lines(run_dir / "ranks" / f"{r}.jsonl") for r in range(2)}
    code, _, err = finish(start(cfg, bootstrap, "--resume", str(run_dir)))
    assert code == 0, err
    for r in range(2):
        at = ck[r]["step"]
        assert at >= 8 and at % 4 == 0
        lines = step_lines(run_dir / "ranks" / f"{r}.jsonl")[len(first[r]):]
        assert [e["step"] for e in lines] == list(range(at, 60))
        done = [e for e in first[r] if e["step"] < at]  # what the checkpoint holds
        seqs = [(e["seq_first"], e["seq_last"]) for e in done + lines]
        # (a kill that came after the last checkpoint, step 60, leaves nothing to train: no line after it)
        assert seqs[0][0] == 0 and (not lines or lines[0]["seq_first"] == ck[r]["stream"]["offsets"]["dev"])
        assert all(b[0] == a[1] + 1 for a, b in zip(seqs, seqs[1:], strict=False))  # each record once, in order


@pytest.mark.timeout(600)
def test_the_json_example_trains_on_a_plain_script_and_scadles_follows_the_real_rates(bootstrap, run_prefix,
                                                                                      tmp_path):
    """examples/json-sensors: publish.py (plain confluent-kafka) writes while the run trains; ScaDLES' batch of
    each device follows its measured stream rate (40 vs 160 records/s)."""
    import sys

    example = Path(__file__).parents[2] / "examples" / "json-sensors"
    raw = yaml.safe_load((example / "sensors.yaml").read_text())
    pattern = f"{run_prefix}.sensor-{{device}}"
    raw.update(name=run_prefix, devices={"count": 2}, stop={"max_steps": 14, "max_time_s": 200})
    raw["streams"]["topic"] = pattern
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    pub = subprocess.Popen([sys.executable, str(example / "publish.py"), "--bootstrap", bootstrap, "--topic", pattern,
                            "--devices", "2", "--rates", "40,160", "--seconds", "60"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30  # the script creates its topics
        admin = AdminClient({"bootstrap.servers": bootstrap})
        while time.monotonic() < deadline and pattern.format(device=1) not in admin.list_topics(timeout=10).topics:
            time.sleep(0.2)
        out = tmp_path / "runs"
        code, _, err = run(tmp_path / "c.yaml", bootstrap, out=out)
        assert code == 0, err
    finally:
        pub.kill()
        pub.communicate()
    run_dir = out / f"{run_prefix}-scadles-r1"
    batches = {d: [e["batch"] for e in step_lines(run_dir / "ranks" / f"{d}.jsonl")][4:] for d in range(2)}
    slow, fast = float(np.median(batches[0])), float(np.median(batches[1]))
    assert 25 <= slow <= 60 and 100 <= fast <= 220, batches   # b_i = the records of the last second
    assert _evals(run_dir), "the hold-out was scored"


def test_an_eval_file_is_checked_against_the_records_spec(tmp_path):
    from edgestream.data.external import eval_file

    x, y = _samples(50, seed=1)
    np.savez(tmp_path / "ok.npz", x_test=x, y_test=y)
    got_x, got_y = eval_file(str(tmp_path / "ok.npz"), (4,), 3, None)
    assert got_x.dtype == np.float32 and (got_y == y).all()
    cases = {"shape.npz": ({"x": x[:, :3], "y": y}, "samples of shape (3,); data.shape is [4]"),
             "class.npz": ({"x": x, "y": y + 1}, "y has class 3; data.num_classes is 3"),
             "names.npz": ({"a": x}, "needs x and y (or x_test and y_test)")}
    for name, (arrays, words) in cases.items():
        np.savez(tmp_path / name, **arrays)
        with pytest.raises(ValueError, match=re.escape(words)):
            eval_file(str(tmp_path / name), (4,), 3, None)
    with pytest.raises(ValueError, match="eval.path: .* does not exist"):
        eval_file(str(tmp_path / "none.npz"), (4,), 3, None)
    np.savez(tmp_path / "reg.npz", x=x, y=np.zeros((50, 2), np.float32))
    assert eval_file(str(tmp_path / "reg.npz"), (4,), 0, (2,))[1].shape == (50, 2)
