"""kafka.topics on real brokers: every topic a run creates (dev, inj, dlq, meta, ps.*) gets the run's replication
factor, min.insync.replicas, retention and unclean.leader.election.enable=false, read back with the admin API;
an existing topic with other settings, or (create: false) a missing or mis-partitioned one, is one line each.
One broker (the session `bootstrap`) and the three-node session `cluster`. Nothing is mocked."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support.runs import CLI, finish, start_run  # a short local run
from support.runs import write_truncating_cfg as write_cfg  # the local run, buffers that truncate

from edgestream.config.kafka import TopicsConfig
from edgestream.kafka.admin import admin_client, create_topics, list_topics
from edgestream.kafka.topic_check import TopicMismatch, read_back
from edgestream.kafka.topic_names import meta_topic
from edgestream.kafka.topic_provision import (
    TOPICS_FILE,
    ensure_run_topics,
    prepare_run_topics,
    record_run_topics,
    recorded_settings,
    run_settings,
    run_topics,
)
from edgestream.kafka.topic_settings import TopicSettings, TopicSettingsError, config_rules
from edgestream.producers.restart import claim_run
from edgestream.ps.transport import ensure_ps_topics


def read(bootstrap: str, names) -> dict:
    return read_back(admin_client(bootstrap), names)


def all_topics(bootstrap: str, run: str, devices: int, s: TopicSettings) -> list[str]:
    """Create every topic a PS run has, the way the run's processes create them (orchestrator, producer, PS)."""
    ensure_run_topics(bootstrap, run, range(devices), settings=s)
    claim_run(bootstrap, run, {"name": run}, settings=s)
    ensure_ps_topics(bootstrap, run, devices, 10_000, settings=s)
    return list(run_topics(run, devices, ps=True))


# ---------------------------------------------------------------------------------------------- the rules
@settings(max_examples=200, deadline=None)
@given(rf=st.none() | st.integers(1, 5), isr=st.none() | st.integers(1, 5), brokers=st.integers(1, 7),
       create=st.booleans(), retention=st.none() | st.integers(-1, 10**12))
def test_settings_resolve_against_the_broker_count(rf, isr, brokers, create, retention):
    assume(rf is None or isr is None or isr <= rf)  # the config itself refuses the rest
    cfg = TopicsConfig(create=create, replication_factor=rf, min_insync_replicas=isr, retention_ms=retention)
    want_rf = rf if rf is not None else min(3, brokers)
    if create and want_rf > brokers:
        with pytest.raises(TopicSettingsError) as exc:
            TopicSettings.from_config(cfg, brokers)
        assert str(exc.value) == (f"kafka.topics.replication_factor: {rf} is not allowed on this cluster: it has "
                                  f"{brokers} broker(s); use at most {brokers}, or null (min(3, the broker count))")
        return
    if create and isr is not None and isr > want_rf:
        with pytest.raises(TopicSettingsError, match=r"^kafka\.topics\.min_insync_replicas: .* no write could be"):
            TopicSettings.from_config(cfg, brokers)
        return
    s = TopicSettings.from_config(cfg, brokers)
    assert s.replication_factor == want_rf and s.brokers == brokers and s.create is create
    assert s.min_insync_replicas == (isr if isr is not None else min(2, want_rf))
    conf = s.topic_config()
    assert conf["unclean.leader.election.enable"] == "false"
    assert conf["min.insync.replicas"] == str(s.min_insync_replicas)
    assert conf.get("retention.ms") == (None if retention is None else str(retention))
    assert "retention.bytes" not in conf
    assert (s.warning() is not None) == (want_rf == 1 and brokers > 1)
    assert TopicSettings.from_json(s.to_json()) == s  # the handover to the children and topics.json


def test_config_show_says_how_null_resolves(tmp_path):
    lines = config_rules(TopicsConfig())
    assert "#   replication_factor: null -> min(3, the cluster's broker count)" in lines
    assert "#   min_insync_replicas: null -> min(2, the replication factor)" in lines
    cfg = write_cfg(tmp_path / "c.yaml", "show", max_steps=1)
    out = subprocess.run([*CLI, "config", "show", str(cfg), "--set", "kafka.topics.replication_factor=2",
                          "--set", "kafka.topics.retention_ms=-1"], capture_output=True, text=True, check=True).stdout
    assert "#   replication_factor: 2\n" in out and "#   retention_ms: -1 (no limit)\n" in out
    assert "#   min_insync_replicas: null -> min(2, the replication factor)\n" in out
    bad = subprocess.run([*CLI, "config", "validate", str(cfg), "--set",
                          'runtime.kafka_client={"replication.factor": "3"}'], capture_output=True, text=True)
    assert bad.returncode == 2
    assert ("runtime.kafka_client: key 'replication.factor' is a setting of the run's topics, not of a client; use "
            "kafka.topics.replication_factor") in bad.stderr


# ---------------------------------------------------------------------------------------------- one broker
@pytest.mark.parametrize("devices", [1, 3])
def test_one_broker_every_topic_gets_the_settings(bootstrap, run_prefix, devices):
    s = TopicSettings.resolve(TopicsConfig(), bootstrap)
    assert (s.replication_factor, s.min_insync_replicas, s.brokers) == (1, 1, 1) and s.warning() is None
    names = all_topics(bootstrap, run_prefix, devices, s)
    got = read(bootstrap, names)
    assert sorted(got) == sorted(names) and len(names) == 2 * devices + 3 + devices
    for name, t in got.items():
        assert (t["partitions"], t["replication_factor"]) == (1, 1), name
        assert (t["min.insync.replicas"], t["unclean.leader.election.enable"]) == ("1", "false"), name
    assert got[meta_topic(run_prefix)]["cleanup.policy"] == "compact"
    # the same settings again (a resumed run, a restarted producer or PS): reused, nothing created
    again = {t: 1 for t in names if t != meta_topic(run_prefix)}
    assert create_topics(bootstrap, again, settings=s) == []
    claim_run(bootstrap, run_prefix, {"name": run_prefix}, settings=s)


@pytest.mark.parametrize("ms,nbytes", [(3_600_000, None), (-1, 50_000_000), (None, -1)])
def test_retention_is_set_on_every_topic(bootstrap, run_prefix, ms, nbytes):
    s = TopicSettings.resolve(TopicsConfig(retention_ms=ms, retention_bytes=nbytes), bootstrap)
    got = read(bootstrap, all_topics(bootstrap, run_prefix, 2, s))
    default = read(bootstrap, [list_topics(bootstrap)[0]])  # any other topic: the broker's defaults
    other = next(iter(default.values()))
    for name, t in got.items():
        assert t["retention.ms"] == (str(ms) if ms is not None else other["retention.ms"]), name
        assert t["retention.bytes"] == (str(nbytes) if nbytes is not None else other["retention.bytes"]), name


def test_an_existing_topic_with_other_settings_is_one_line_each(bootstrap, run_prefix):
    first = TopicSettings.resolve(TopicsConfig(retention_ms=3_600_000), bootstrap)
    ensure_run_topics(bootstrap, run_prefix, range(2), settings=first)
    other = TopicSettings.resolve(TopicsConfig(retention_ms=7_200_000), bootstrap)
    with pytest.raises(TopicMismatch) as exc:
        ensure_run_topics(bootstrap, run_prefix, range(2), settings=other)
    assert len(exc.value.lines) == 5  # dev.0 dev.1 inj.0 inj.1 dlq
    assert (f"topic {run_prefix}.dev.0 exists with retention.ms=3600000, this run wants 7200000 "
            "(kafka.topics.retention_ms): a run does not reuse a topic with other settings (delete it, use another "
            "run id, or set kafka.topics to match it)") in exc.value.lines
    # another partition count: named with what it has and what the run wants
    create_topics(bootstrap, {f"{run_prefix}-b.dev.0": 3})
    with pytest.raises(TopicMismatch) as exc:
        ensure_run_topics(bootstrap, f"{run_prefix}-b", [0], settings=first)
    default_ms = read(bootstrap, [f"{run_prefix}-b.dev.0"])[f"{run_prefix}-b.dev.0"]["retention.ms"]
    assert exc.value.lines == [f"topic {run_prefix}-b.dev.0 exists with 3 partition(s), this run wants 1; "
                               f"retention.ms={default_ms}, this run wants 3600000 (kafka.topics.retention_ms): a run "
                               "does not reuse a topic with other settings (delete it, use another run id, or set "
                               "kafka.topics to match it)"]


def test_a_replication_factor_above_the_broker_count_is_one_line(bootstrap):
    with pytest.raises(TopicSettingsError) as exc:
        TopicSettings.resolve(TopicsConfig(replication_factor=2), bootstrap)
    assert str(exc.value).startswith("kafka.topics.replication_factor: 2 is not allowed on this cluster: it has 1 "
                                     "broker(s)")


@pytest.mark.parametrize("devices,ps", [(1, False), (3, True)])
def test_create_false_checks_each_topic_and_creates_none(bootstrap, run_prefix, devices, ps):
    needed = run_topics(run_prefix, devices, ps=ps)
    off = TopicSettings.from_config(TopicsConfig(create=False), 1)
    with pytest.raises(TopicMismatch) as exc:
        prepare_run_topics(bootstrap, run_prefix, devices, settings=off, ps=ps)
    assert exc.value.lines == [f"topic {t} does not exist: kafka.topics.create is false, so an administrator must "
                               "create it (1 partition(s))" for t in needed]
    assert list_topics(bootstrap, f"{run_prefix}.") == []  # nothing created
    # an administrator provisions them, one with 2 partitions and one left out
    provisioned = dict(needed)
    missing = f"{run_prefix}.inj.0"
    del provisioned[missing]
    provisioned[f"{run_prefix}.dlq"] = 2
    create_topics(bootstrap, provisioned)
    with pytest.raises(TopicMismatch) as exc:
        prepare_run_topics(bootstrap, run_prefix, devices, settings=off, ps=ps)
    assert exc.value.lines == [
        f"topic {missing} does not exist: kafka.topics.create is false, so an administrator must create it "
        "(1 partition(s))",
        f"topic {run_prefix}.dlq has 2 partition(s); the run needs 1 (kafka.topics.create is false: an administrator "
        "must create it with that many)"]
    assert sorted(list_topics(bootstrap, f"{run_prefix}.")) == sorted(provisioned)


def test_topics_json_records_what_the_cluster_reports(bootstrap, run_prefix, tmp_path):
    s = run_settings(TopicsConfig(retention_bytes=123_456_789), bootstrap)
    names = all_topics(bootstrap, run_prefix, 2, s)
    doc = record_run_topics(tmp_path, bootstrap, run_prefix, s)
    assert json.loads((tmp_path / TOPICS_FILE).read_text()) == doc
    assert sorted(doc["topics"]) == sorted(names)
    assert doc["settings"] == {"replication_factor": 1, "min_insync_replicas": 1, "retention_ms": None,
                               "retention_bytes": 123_456_789, "create": True, "brokers": 1,
                               "unclean_leader_election": False}
    assert all(t["retention.bytes"] == "123456789" for t in doc["topics"].values())
    # a resumed run takes the recorded settings (whatever the cluster looks like now)
    assert recorded_settings(tmp_path) == s
    assert run_settings(TopicsConfig(), bootstrap, resumed_dir=tmp_path) == s


# ---------------------------------------------------------------------------------------------- real runs
def test_a_run_on_provisioned_topics_creates_none(bootstrap, run_prefix, tmp_path):
    """kafka.topics.create: false: a missing topic stops the run before it starts (one line each, exit 2);
    with every topic provisioned, the run trains and creates none."""
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=4)
    run = f"{run_prefix}-ddl-r1"
    needed = run_topics(run, 2)
    admin = TopicSettings.from_config(TopicsConfig(), 1)
    create_topics(bootstrap, {t: n for t, n in needed.items() if t not in (meta_topic(run), f"{run}.inj.1")},
                  settings=admin)
    code, out, err = finish(start_run(cfg, bootstrap, tmp_path / "runs", "--set", "kafka.topics.create=false"))
    assert code == 2 and out == ""
    assert (f"error: topic {run}.inj.1 does not exist: kafka.topics.create is false, so an administrator must "
            "create it (1 partition(s))") in err.splitlines()
    assert (f"topic {run}.meta does not exist: kafka.topics.create is false, so an administrator must create it "
            "(1 partition(s))") in err.splitlines()
    create_topics(bootstrap, {f"{run}.inj.1": 1}, settings=admin)
    create_topics(bootstrap, {meta_topic(run): 1}, config={"cleanup.policy": "compact"}, settings=admin)
    before = sorted(list_topics(bootstrap, f"{run}."))
    code, out, err = finish(start_run(cfg, bootstrap, tmp_path / "runs", "--set", "kafka.topics.create=false"))
    assert code == 0, err
    assert sorted(list_topics(bootstrap, f"{run}.")) == before == sorted(needed)
    run_dir = tmp_path / "runs" / run
    assert json.loads((run_dir / "summary.json").read_text())["device_steps"] == {"0": 4, "1": 4}
    doc = json.loads((run_dir / TOPICS_FILE).read_text())
    assert doc["settings"]["create"] is False and sorted(doc["topics"]) == sorted(needed)


def test_a_run_records_its_topics_and_resumes_on_them(bootstrap, run_prefix, tmp_path):
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=4, every_steps=2)
    code, out, err = finish(start_run(cfg, bootstrap, tmp_path / "runs", "--set", "kafka.topics.retention_ms=86400000"))
    assert code == 0, err
    run = f"{run_prefix}-ddl-r1"
    run_dir = tmp_path / "runs" / run
    doc = json.loads((run_dir / TOPICS_FILE).read_text())
    assert sorted(doc["topics"]) == sorted(run_topics(run, 2))  # the producer's meta topic too
    for name, t in doc["topics"].items():
        assert (t["replication_factor"], t["min.insync.replicas"], t["retention.ms"]) == (1, "1", "86400000"), name
        assert t["unclean.leader.election.enable"] == "false"
    assert "replication factor 1" not in err  # one broker: nothing to warn about
    proc = subprocess.Popen([*CLI, "run", str(cfg), "--resume", str(run_dir), "--bootstrap", bootstrap, "--quiet",
                             "--set", "stop.max_steps=6", "--set", "kafka.topics.retention_ms=86400000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, out, err = finish(proc)
    assert code == 0, err
    assert json.loads((run_dir / "summary.json").read_text())["device_steps"] == {"0": 6, "1": 6}


# ---------------------------------------------------------------------------------------------- three nodes
def cluster_bootstrap(cluster) -> str:
    """The session cluster's address, once its metadata lists all three brokers (the settings resolve against
    the brokers that answer: a node still starting, or one that died on this shared machine, would make 2)."""
    cluster.heal()
    return cluster.bootstrap


@pytest.mark.parametrize("devices", [1, 2])
def test_cluster_defaults_are_three_replicas_two_in_sync(cluster, run_prefix, devices):
    bs = cluster_bootstrap(cluster)
    s = TopicSettings.resolve(TopicsConfig(), bs)
    assert (s.replication_factor, s.min_insync_replicas, s.brokers) == (3, 2, 3) and s.warning() is None
    got = read(bs, all_topics(bs, run_prefix, devices, s))
    assert len(got) == 3 * devices + 3
    for name, t in got.items():
        assert (t["replication_factor"], t["min.insync.replicas"]) == (3, "2"), name
        assert t["unclean.leader.election.enable"] == "false", name
    # every partition on three brokers, in the metadata once it lists the new topics (a broker's metadata can
    # lag the controller's by a moment on a loaded machine)
    deadline = time.monotonic() + 60
    while True:
        md = admin_client(bs).list_topics(timeout=30)
        if all(n in md.topics and md.topics[n].partitions for n in got) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert set(got) <= set(md.topics)
    assert all(len(set(p.replicas)) == 3 for n in got for p in md.topics[n].partitions.values())


@pytest.mark.parametrize("rf,isr,ms", [(2, 1, 600_000), (1, None, None), (3, 3, -1)])
def test_cluster_explicit_settings_read_back(cluster, run_prefix, rf, isr, ms):
    bs = cluster_bootstrap(cluster)
    s = TopicSettings.resolve(TopicsConfig(replication_factor=rf, min_insync_replicas=isr, retention_ms=ms), bs)
    got = read(bs, all_topics(bs, run_prefix, 2, s))
    for name, t in got.items():
        assert (t["replication_factor"], t["min.insync.replicas"]) == (rf, str(isr or min(2, rf))), name
        if ms is not None:
            assert t["retention.ms"] == str(ms)
    if rf == 1:
        assert s.warning() == ("warning: the run's topics have replication factor 1 on a cluster of 3 brokers: losing "
                               "the broker that leads a topic loses its samples; set kafka.topics.replication_factor "
                               "(null: min(3, the broker count))")
    # the same run on the cluster with the default settings: every topic named, with what it has
    if rf != 3:
        with pytest.raises(TopicMismatch) as exc:
            ensure_run_topics(bs, run_prefix, range(2), settings=TopicSettings.resolve(TopicsConfig(), bs))
        assert len(exc.value.lines) == 5
        assert all(f"replication factor {rf}, this run wants 3 (kafka.topics.replication_factor)" in line
                   for line in exc.value.lines)


def test_cluster_refuses_more_replicas_than_brokers(cluster):
    with pytest.raises(TopicSettingsError) as exc:
        TopicSettings.resolve(TopicsConfig(replication_factor=4), cluster_bootstrap(cluster))
    assert str(exc.value) == ("kafka.topics.replication_factor: 4 is not allowed on this cluster: it has 3 broker(s); "
                              "use at most 3, or null (min(3, the broker count))")


def test_cluster_ps_run_replicates_every_topic(cluster, run_prefix, tmp_path):
    """A parameter-server run with the default settings: every topic (the orchestrator's, the producer's meta
    topic, the PS's) has 3 replicas, min.insync.replicas 2 and the run's retention, read back in topics.json."""
    bs = cluster_bootstrap(cluster)
    cfg = tmp_path / "c.yaml"
    raw = yaml.safe_load(write_cfg(cfg, run_prefix, max_steps=3).read_text())
    raw["algorithm"] = {"name": "ssp", "params": {"s": 2}, "batch": {"policy": "fixed", "size": 16},
                        "buffer": "persist"}
    raw["kafka"] = {"topics": {"retention_ms": 3_600_000}}
    cfg.write_text(yaml.safe_dump(raw))
    code, out, err = finish(start_run(cfg, bs, tmp_path / "runs"))
    assert code == 0, err
    run = f"{run_prefix}-ssp-r1"
    assert "warning: the run's topics" not in err
    doc = json.loads((tmp_path / "runs" / run / TOPICS_FILE).read_text())
    assert doc["settings"] | {"brokers": 3} == {"replication_factor": 3, "min_insync_replicas": 2,
                                                "retention_ms": 3_600_000, "retention_bytes": None, "create": True,
                                                "brokers": 3, "unclean_leader_election": False}
    assert sorted(doc["topics"]) == sorted(run_topics(run, 2, ps=True))
    for name, t in doc["topics"].items():
        assert (t["replication_factor"], t["min.insync.replicas"], t["retention.ms"]) == (3, "2", "3600000"), name
        assert t["unclean.leader.election.enable"] == "false", name
    assert sorted(read(bs, doc["topics"]).items()) == sorted(doc["topics"].items())  # as the cluster says now


def test_cluster_run_warns_when_unreplicated(cluster, run_prefix, tmp_path):
    bs = cluster_bootstrap(cluster)
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=3)
    code, out, err = finish(start_run(cfg, bs, tmp_path / "runs", "--set", "kafka.topics.replication_factor=1"))
    assert code == 0, err
    assert ("warning: the run's topics have replication factor 1 on a cluster of 3 brokers: losing the broker that "
            "leads a topic loses its samples; set kafka.topics.replication_factor (null: min(3, the broker count))"
            ) in err.splitlines()
    doc = json.loads((Path(tmp_path) / "runs" / f"{run_prefix}-ddl-r1" / TOPICS_FILE).read_text())
    assert doc["settings"]["brokers"] == 3
    assert {t["replication_factor"] for t in doc["topics"].values()} == {1}


def test_cluster_producer_by_hand_resolves_and_warns(cluster, run_prefix, tmp_path):
    """`edgestream produce` started by hand (no orchestrator to hand the settings over) resolves them itself."""
    bs = cluster_bootstrap(cluster)
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=1)
    proc = subprocess.run([*CLI, "produce", str(cfg), "--bootstrap", bs, "--run-id", "p1", "--duration", "1",
                           "--set", "kafka.topics.replication_factor=1", "--set", "kafka.topics.retention_ms=60000"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert ("warning: the run's topics have replication factor 1 on a cluster of 3 brokers: losing the broker that "
            "leads a topic loses its samples; set kafka.topics.replication_factor (null: min(3, the broker count))"
            ) in proc.stderr.splitlines()
    run = f"{run_prefix}-ddl-p1"
    got = read(bs, run_topics(run, 2))
    assert len(got) == 6 and {(t["replication_factor"], t["retention.ms"]) for t in got.values()} == {(1, "60000")}
