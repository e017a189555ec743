"""The docker-compose testbed, proven without a Docker engine.

Structure: docker-compose.yml and the split-deployment files parse and are valid under the official
Compose Specification JSON schema (vendored in tests/compose_spec/), their services, healthcheck,
depends_on conditions and profiles are right, every ${VAR} is defined, every command is a real
`edgestream` subcommand with real flags; the Dockerfiles pass a basic lint. Every `docker compose`
command of docs/TESTBED.md and of the compose files' headers is loaded the way Compose v2 loads it
(project directory, .env, interpolation; tests/compose_check.py) and must find every bind-mount
source, build context and experiment config; the settings the docs send through .env must reach the
containers. None of this runs a compose binary, so which one is installed (or none) does not matter.

Behaviour: the compose file's own services run as processes, each in its own Linux network namespace
(veth pairs on a bridge the test creates, addresses in 10.213.<k>.0/24), with the commands and the
environment taken from docker-compose.yml and the service names resolved to those hosts: the broker
on one host, the producer on another, trainer-0 and trainer-1 on two more. The run must train and the
collect step must write the run directory, so advertised listeners, bootstrap addresses and the
torch.distributed rendezvous really work across hosts. The parameter server (`ps` service) runs an
SSP job the same way on a fifth host, the PS and both trainers routed to the broker's host and to no
other, so they provably meet only through Kafka. Needs root (CI runs as root): without it the tests
fail, saying so.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import compose_check as cc
import pytest
import yaml
from netns_hosts import Hosts
from netns_hosts import network as _network

from edgestream.config import load_config
from edgestream.kafka.broker import MAX_MESSAGE_BYTES, LocalBroker
from edgestream.kafka.cluster import LocalCluster
from edgestream.sync.registry import get_algorithm

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SPLIT = [ROOT / "docker" / "compose.broker.yml", ROOT / "docker" / "compose.trainers.yml"]
CLUSTER = ROOT / "docker" / "compose.cluster.yml"  # host A's three-broker alternative to compose.broker.yml
DOCKERFILES = [ROOT / "docker" / n for n in ("Dockerfile", "Dockerfile.cuda", "Dockerfile.jetson")]
DOC = ROOT / "docs" / "TESTBED.md"
EDGESTREAM = str(Path(sys.executable).with_name("edgestream"))
# what the split hosts must say on the command line (their files' `:?` variables), for the checks below
SPLIT_SHELL = {"RANK": "0", "MASTER_ADDR": "10.0.0.11", "KAFKA_ADVERTISED_HOST": "10.0.0.5",
               "KAFKA_BOOTSTRAP": "10.0.0.5:9094"}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _env_example() -> dict[str, str]:
    out = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().strip('"')
    return out


def _interpolate(value: str, env: dict[str, str]) -> str:
    """Compose v2's interpolation (tests/compose_check.py) against env, strict: an unset `${VAR}` without
    a default raises KeyError here (Compose would warn and use a blank)."""
    missing: set[str] = set()
    out = cc.interpolate(value, env, missing)
    if missing:
        raise KeyError(f"not set: {sorted(missing)} in {value!r}")
    return out


_strings = cc.strings


def _project(path: Path, shell: dict[str, str] | None = None) -> cc.Project:
    """`path` loaded as documented: from the repository root with `--project-directory .` for the split
    files, .env = .env.example copied, the split hosts' required settings on the command line."""
    return cc.load_project(path, project_dir=ROOT, shell=SPLIT_SHELL | (shell or {}),
                           dotenv_text_override=(ROOT / ".env.example").read_text())


def _volume_targets(project: cc.Project, service: str) -> dict[str, cc.Mount]:
    return {m.target: m for m in project.mounts(service)}


_HELP: dict[str, str] = {}


def _help(sub: str) -> str:
    if sub not in _HELP:
        proc = subprocess.run([EDGESTREAM, sub, "--help"], capture_output=True, text=True, timeout=60,
                              env=os.environ | {"COLUMNS": "250", "TERM": "dumb", "NO_COLOR": "1"})
        assert proc.returncode == 0, f"`edgestream {sub} --help` failed: {proc.stderr[-500:]}"
        _HELP[sub] = proc.stdout
    return _HELP[sub]


def _edgestream_services(doc: dict) -> dict[str, dict]:
    return {n: s for n, s in doc["services"].items() if not str(s.get("image", "")).startswith("apache/kafka")}


# ================================================================ structure
def test_compose_services_health_and_profiles():
    doc = _load(COMPOSE)
    svcs = doc["services"]
    assert {"broker", "producer", "ps", "trainer-0", "trainer-1", "gpu-trainer-0", "gpu-trainer-1",
            "collect"} <= set(svcs)

    broker = svcs["broker"]
    image, _, tag = broker["image"].partition(":")
    assert image == "apache/kafka" and tag and tag != "latest" and "$" not in tag
    env = broker["environment"]
    assert "broker" in env["KAFKA_PROCESS_ROLES"] and "controller" in env["KAFKA_PROCESS_ROLES"]  # KRaft
    assert int(env["KAFKA_MESSAGE_MAX_BYTES"]) >= MAX_MESSAGE_BYTES
    assert int(env["KAFKA_REPLICA_FETCH_MAX_BYTES"]) >= MAX_MESSAGE_BYTES
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    advertised = dict(x.split("://", 1) for x in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert advertised["INSIDE"] == "broker:9092" and "OUTSIDE" in advertised  # inside + outside the network
    listeners = dict(x.split("://", 1) for x in env["KAFKA_LISTENERS"].split(","))
    assert set(advertised) <= set(listeners)
    hc = broker["healthcheck"]
    assert hc["test"][0] in ("CMD", "CMD-SHELL") and "kafka" in " ".join(hc["test"]) and hc["retries"] >= 5

    trainers = {n: s for n, s in svcs.items() if s.get("command", [None])[0] == "train"}
    assert len(trainers) >= 4
    project = _project(COMPOSE)
    for name, s in _edgestream_services(doc).items():
        deps = s.get("depends_on", {})
        if name not in ("collect", "external-collect"):
            assert deps.get("broker", {}).get("condition") == "service_healthy", name
        mounts = _volume_targets(project, name)
        assert "/config" in mounts and mounts["/config"].path and mounts["/config"].read_only, \
            f"{name}: the config is not bind-mounted read-only at /config"
        assert "/runs" in mounts and mounts["/runs"].source == "runs", f"{name}: run outputs are not on the runs volume"
    assert "runs" in doc["volumes"]

    groups: dict[str, dict[int, str]] = {}
    for name, s in trainers.items():
        assert s.get("profiles"), f"{name} has no profile"
        env = s["environment"]
        assert env["MASTER_ADDR"] == "trainer-0" and env["WORLD_SIZE"].startswith("${TRAINERS")
        gpu = name.startswith("gpu-")
        res = s.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")
        if gpu:
            assert "gpu" in s["profiles"] or "gpu4" in s["profiles"]
            assert res and res[0]["driver"] == "nvidia" and "gpu" in res[0]["capabilities"], name
            assert "cuda" in s["build"]["dockerfile"].lower()
        else:
            assert res is None and not set(s["profiles"]) & {"gpu", "gpu4"}, name
        groups.setdefault("gpu" if gpu else "cpu", {})[int(env["RANK"])] = name
    for kind, ranks in groups.items():
        assert sorted(ranks) == list(range(len(ranks))), f"{kind} trainers' ranks {sorted(ranks)}"
        zero = trainers[ranks[0]]
        aliases = zero.get("networks", {}).get("default", {}).get("aliases", [])
        assert "trainer-0" in (ranks[0], zero.get("hostname"), *aliases), f"{kind}: MASTER_ADDR trainer-0 resolves nowhere"
    # the first profile starts a complete world: 2 = TRAINERS' default
    for prof in ("cpu", "gpu", "external"):
        assert sum(prof in s["profiles"] for s in trainers.values()) == int(_env_example()["TRAINERS"])

    # the parameter server: its own profile, the trainers' image and volumes, reached only through Kafka
    ps = svcs["ps"]
    assert ps["profiles"] == ["ps"] and not any("ps" in s.get("profiles", []) for n, s in svcs.items() if n != "ps")
    assert ps["command"][0] == "ps" and ps["command"][1].startswith("/config/${EXPERIMENT")
    cmd = " ".join(ps["command"])
    assert "--run-id ${RUN_ID" in cmd and "--bootstrap ${KAFKA_BOOTSTRAP:-broker:9092}" in cmd and "--out /runs" in cmd
    assert "--set devices.count=${TRAINERS" in cmd  # the PS's world = the trainers'
    assert ps["restart"].split(":")[0] == "on-failure"  # a crashed PS restarts from checkpoints/ps.pt
    assert ps["depends_on"] == {"broker": {"condition": "service_healthy"}}
    assert (ps["image"], ps["build"]) == (svcs["producer"]["image"], svcs["producer"]["build"]) \
        == (svcs["trainer-0"]["image"], svcs["trainer-0"]["build"])
    assert ps["volumes"] == svcs["trainer-0"]["volumes"]  # the same runs volume: ranks/ps.* next to the ranks
    assert not {"ports", "expose", "network_mode", "hostname"} & set(ps), "nothing connects to the PS"
    assert not any(k.startswith(("MASTER_", "GLOO_", "NCCL_")) for k in ps.get("environment") or {})
    # no service waits for the PS (it is optional; a trainer started first waits for it on Kafka)
    assert not any("ps" in (s.get("depends_on") or {}) for s in svcs.values())
    # the documented PS experiment is one (the default experiment is not)
    ssp = load_config(ROOT / "examples" / "testbed-ssp.yaml")
    assert get_algorithm(ssp.algorithm.name).family == "ps" and ssp.optim.momentum == 0
    assert get_algorithm(load_config(ROOT / "examples" / "testbed.yaml").algorithm.name).family != "ps"


@pytest.mark.parametrize("path", [COMPOSE, *SPLIT, CLUSTER], ids=lambda p: p.name)
def test_compose_commands_are_real_edgestream_commands(path):
    doc = _load(path)
    env = _env_example() | {"RANK": "0", "MASTER_ADDR": "10.0.0.11", "KAFKA_ADVERTISED_HOST": "10.0.0.5",
                            "KAFKA_BOOTSTRAP": "10.0.0.5:9094"}
    for name, s in _edgestream_services(doc).items():
        # the external profiles' trainers and external-collect read an external-streams EXPERIMENT (as documented)
        senv = env | ({"EXPERIMENT": "testbed-external.yaml"} if name.startswith("external-") else {})
        cmd = [_interpolate(x, senv) for x in s["command"]]
        sub = cmd[0]
        assert sub in {"produce", "train", "ps", "collect", "infer"}, f"{name}: {sub}"
        text = _help(sub)
        flags = [x for x in cmd if x.startswith("--")]
        assert flags, name
        for flag in flags:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), f"{name}: `edgestream {sub}` has no {flag}"
        # every --set names a config field that loads with the config the command reads
        config = cmd[cmd.index("--config") + 1] if sub in ("collect", "infer") else cmd[1]
        assert config.startswith("/config/"), f"{name}: {config}"
        sets = [cmd[i + 1] for i, x in enumerate(cmd) if x == "--set"]
        cfg = load_config(ROOT / "examples" / config.removeprefix("/config/"), sets)
        assert cfg.devices.count == int(env["TRAINERS"])
        if sub in ("produce", "train", "ps", "infer"):
            assert "--run-id" in cmd and "--bootstrap" in cmd
            boot = cmd[cmd.index("--bootstrap") + 1]
            assert not re.match(r"(localhost|127\.)", boot), f"{name}: bootstrap {boot} inside a container"
        if sub in ("train", "ps"):
            assert cmd[cmd.index("--out") + 1] == "/runs", f"{name}: outputs off the runs volume"
        for v in (s.get("environment") or {}).values():
            assert "localhost" not in str(v) and "127.0.0.1" not in str(v), f"{name}: {v}"


@pytest.mark.parametrize("path", [COMPOSE, *SPLIT, CLUSTER], ids=lambda p: p.name)
def test_compose_every_variable_is_defined(path):
    doc = _load(path)
    defined = set(_env_example())
    undefined = set()
    for s in _strings(doc):
        for name, op, _ in cc.variables(s):
            if op in (":-", "-", ":+", "+"):
                continue
            if op in (":?", "?") and path != COMPOSE:
                continue  # a split host must say it (documented in the file's header)
            if name not in defined:
                undefined.add(name)
    assert not undefined, f"{path.name}: used without a default and not in .env.example: {sorted(undefined)}"
    # and every default or .env.example value interpolates (a malformed ${...} raises)
    env = _env_example() | {"RANK": "0", "MASTER_ADDR": "h", "KAFKA_ADVERTISED_HOST": "h", "KAFKA_BOOTSTRAP": "h:1"}
    for s in _strings(doc):
        assert "${" not in _interpolate(s, env), s


def test_compose_devices_profile_follows_the_models_of_the_run():
    """devices: one device container per device of the default world (TRAINERS), each answering its own stream with
    the run's model versions (`edgestream infer --config --run-id --device i`), on an EXPERIMENT that publishes."""
    doc = _load(COMPOSE)
    devs = {n: s for n, s in doc["services"].items() if "devices" in (s.get("profiles") or [])}
    env = _env_example()
    assert sorted(devs) == [f"device-{i}" for i in range(int(env["TRAINERS"]))]
    for name, s in devs.items():
        cmd = [_interpolate(x, env | {"EXPERIMENT": "testbed-devices.yaml"}) for x in s["command"]]
        assert cmd[0] == "infer" and cmd[cmd.index("--device") + 1] == name.rsplit("-", 1)[1]
        assert "--report-s" in cmd and s["profiles"] == ["devices"]
        sets = [cmd[i + 1] for i, x in enumerate(cmd) if x == "--set"]
        assert load_config(ROOT / "examples" / cmd[cmd.index("--config") + 1].removeprefix("/config/"),
                           sets).publish is not None


EXTERNAL_VARS = {"STREAMS_TOPIC": "topic", "STREAMS_FORMAT": "format", "STREAMS_START": "start",
                 "STREAMS_PARTITIONER": "partitioner"}


def _external_config(service: dict, env: dict[str, str]):
    """The config an external trainer's command loads (EXPERIMENT from CONFIG_DIR=examples, its --sets)."""
    cmd = [_interpolate(x, env) for x in service["command"]]
    sets = [cmd[i + 1] for i, x in enumerate(cmd) if x == "--set"]
    return load_config(ROOT / "examples" / cmd[1].removeprefix("/config/"), sets)


def test_compose_external_profiles():
    """external / external4: the trainers' command on the devices' own topics, no producer waited for, the
    STREAMS_* variables replacing the EXPERIMENT's streams fields, complete worlds of 2 and 4 ranks."""
    doc = _load(COMPOSE)
    svcs = doc["services"]
    ext = {n: s for n, s in svcs.items() if {"external", "external4"} & set(s.get("profiles") or [])}
    assert set(ext) == {f"external-trainer-{r}" for r in range(4)}
    for prof, n in (("external", int(_env_example()["TRAINERS"])), ("external4", 4)):
        ranks = sorted(int(s["environment"]["RANK"]) for s in ext.values() if prof in s["profiles"])
        assert ranks == list(range(n)), (prof, ranks)
    zero = ext["external-trainer-0"]
    assert zero["hostname"] == "trainer-0" and "trainer-0" in zero["networks"]["default"]["aliases"]
    base = svcs["trainer-0"]["command"]
    for name, s in ext.items():
        assert s["environment"] == {**svcs["trainer-0"]["environment"], "RANK": s["environment"]["RANK"]}, name
        assert s["depends_on"] == {"broker": {"condition": "service_healthy"}}, f"{name} waits for the producer"
        assert (s["image"], s["volumes"]) == (svcs["trainer-0"]["image"], svcs["trainer-0"]["volumes"])
        cmd = s["command"]
        # the cpu trainers' command (another default EXPERIMENT), then one --set per STREAMS_* variable
        assert cmd[0] == "train" and cmd[1] == "/config/${EXPERIMENT:-testbed-external.yaml}"
        assert cmd[2:len(base)] == base[2:], name
        extra = cmd[len(base):]
        assert extra[::2] == ["--set"] * len(EXTERNAL_VARS), extra
        assert {x.split("=", 1)[0]: cc.variables(x)[0][0] for x in extra[1::2]} == \
            {f"streams.{field}": var for var, field in EXTERNAL_VARS.items()}
    # external-collect: collect's command with the trainers' --sets (the run directory's config.yaml names the
    # topics the trainers read)
    col, ecol = svcs["collect"]["command"], svcs["external-collect"]["command"]
    assert ecol[:3] == col[:3] and ecol[3] == "/config/${EXPERIMENT:-testbed-external.yaml}"
    assert ecol[4:len(col)] == col[4:] and ecol[len(col):] == zero["command"][len(base):]
    assert svcs["external-collect"]["profiles"] == ["collect"]
    # .env.example's values: the JSON sensors' topic per device (partitioner empty = consistent, refused
    # with a topic per device otherwise)
    example = _env_example()
    env = example | {"EXPERIMENT": "testbed-external.yaml"}
    cfg = _external_config(zero, env)
    assert _external_config({"command": ["collect", *ecol[3:]]}, env) == cfg  # its config: the trainers'
    s = cfg.streams
    assert s.external and s.per_device and (s.topic, s.format, s.start, s.partitioner) == \
        (example["STREAMS_TOPIC"], "json", "earliest", None)
    assert (s.input, s.target) == ("v", "cls") and cfg.eval.holdout and cfg.runtime.engine == "local"
    # compose's defaults alone (no .env): one keyed topic "plant"
    cfg = _external_config(zero, {"RUN_ID": "r"})
    assert cfg.streams.topic == "plant" and not cfg.streams.per_device and cfg.devices.count == 2
    # a keyed topic written by a Java client; 4 trainers
    cfg = _external_config(ext["external-trainer-3"], env | {"STREAMS_TOPIC": "plant", "STREAMS_PARTITIONER": "murmur2",
                                                            "STREAMS_START": "2026-11-26T10:00:00Z", "TRAINERS": "4"})
    assert (cfg.streams.partitioner, cfg.streams.start, cfg.devices.count) == ("murmur2", 1795687200000, 4)
    with pytest.raises(Exception, match="partitioner"):
        _external_config(zero, env | {"STREAMS_PARTITIONER": "murmur2"})  # a topic per device has one partition
    # the documented external commands: each started trainer's config loads as Compose v2 fills it in
    documented = [c for _, c in DOCUMENTED if "external" in c.assignments.get("COMPOSE_PROFILES", "")]
    assert len(documented) >= 3, [c.text for c in documented]
    for c in documented:
        project = _documented_project(c)
        profiles = set(c.assignments["COMPOSE_PROFILES"].split(","))
        started = [n for n, s in project.services.items() if profiles & set(s.get("profiles") or [])]
        assert len(started) == int(project.env.get("TRAINERS", "2")), (c.text, started)
        for name in started:
            cmd = project.services[name]["command"]
            config_dir = next(m.path for m in project.mounts(name) if m.target == "/config")
            sets = [cmd[i + 1] for i, x in enumerate(cmd) if x == "--set"]
            cfg = load_config(config_dir / cmd[1].removeprefix("/config/"), sets)
            assert cfg.streams.external and cfg.devices.count == len(started), c.text
            assert cfg.streams.topic == c.assignments["STREAMS_TOPIC"], c.text
    # every variable is in .env.example and documented
    doc_text = DOC.read_text()
    for var in EXTERNAL_VARS:
        assert var in example and f"`{var}`" in doc_text, var
    assert "external4" in doc_text and "external4" in (ROOT / ".env.example").read_text()


def test_split_deployment_files():
    broker_project, trainers_project = _project(SPLIT[0]), _project(SPLIT[1])
    broker_doc = _load(SPLIT[0])
    broker = broker_doc["services"]
    adv = broker["broker"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "OUTSIDE://${KAFKA_ADVERTISED_HOST:?" in adv  # must be said: the address other hosts use
    assert broker["producer"]["depends_on"]["broker"]["condition"] == "service_healthy"
    # the parameter server lives on the broker host, under its own profile, reached only through Kafka
    ps = broker["ps"]
    assert ps["profiles"] == ["ps"] and "profiles" not in broker["broker"] and "profiles" not in broker["producer"]
    assert ps["command"][0] == "ps" and ps["restart"].split(":")[0] == "on-failure"
    assert ps["depends_on"] == {"broker": {"condition": "service_healthy"}}
    cmd = " ".join(ps["command"])
    assert "--bootstrap ${KAFKA_BOOTSTRAP:-broker:9092}" in cmd  # the inside listener, as the producer's
    ps_mounts = _volume_targets(broker_project, "ps")
    assert "--out /runs" in cmd and ps_mounts["/runs"].source == "runs" and "runs" in broker_doc["volumes"]
    assert (ps["image"], ps["build"]) == (broker["producer"]["image"], broker["producer"]["build"])
    for name in ("producer", "ps"):  # TLS material for runtime.kafka_client
        assert _volume_targets(broker_project, name)["/certs"].read_only, name
    assert _volume_targets(broker_project, "broker")["/etc/kafka/secrets"].read_only
    assert not {"ports", "expose", "network_mode"} & set(ps), "nothing connects to the PS"
    trainers = _load(SPLIT[1])["services"]
    assert not any(s["command"][0] == "ps" for s in trainers.values()), "the PS belongs to the broker host"
    assert {"trainer", "trainer-gpu", "trainer-jetson"} <= set(trainers)
    for name in ("trainer", "trainer-gpu", "trainer-jetson"):
        s = trainers[name]
        assert s["network_mode"] == "host" and s["profiles"]
        assert s["environment"]["MASTER_ADDR"].startswith("${MASTER_ADDR:?")
        assert "${KAFKA_BOOTSTRAP:?" in " ".join(s["command"])
        assert _volume_targets(trainers_project, name)["/certs"].read_only  # TLS material for runtime.kafka_client
    assert trainers["trainer-jetson"]["runtime"] == "nvidia"
    assert "jetson" in trainers["trainer-jetson"]["build"]["dockerfile"].lower()
    assert trainers["trainer-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_three_broker_cluster_file(tmp_path):
    """docker/compose.cluster.yml: three KRaft nodes forming one cluster (ids 1-3, every node in the quorum, one
    cluster id), each with its own outside port advertised at KAFKA_ADVERTISED_HOST, the replication settings
    `edgestream broker start --nodes 3` (LocalCluster) gives its nodes, and the producer and the PS started once
    all three are healthy, bootstrapping on all three inside listeners."""
    raw = _load(CLUSTER)["services"]
    svcs = _project(CLUSTER).services
    brokers = {n: s for n, s in svcs.items() if s["image"].startswith("apache/kafka:")}
    assert sorted(brokers) == ["kafka-1", "kafka-2", "kafka-3"]
    envs = {n: s["environment"] for n, s in brokers.items()}
    assert {e["KAFKA_CONTROLLER_QUORUM_VOTERS"] for e in envs.values()} == {"1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"}
    assert len({e["CLUSTER_ID"] for e in envs.values()}) == 1
    for name, e in envs.items():
        i = int(e["KAFKA_NODE_ID"])
        port = 9093 + i
        assert name == f"kafka-{i}" and brokers[name]["hostname"] == name
        assert e["KAFKA_LISTENERS"] == f"INSIDE://:9092,CONTROLLER://:9093,OUTSIDE://:{port}"
        assert e["KAFKA_ADVERTISED_LISTENERS"] == f"INSIDE://{name}:9092,OUTSIDE://10.0.0.5:{port}"
        assert "${KAFKA_ADVERTISED_HOST:?" in raw[name]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
        assert raw[name]["ports"] == [f"{port}:{port}"]
        assert f"--bootstrap-server {name}:9092" in brokers[name]["healthcheck"]["test"][1]
        assert e["KAFKA_PROCESS_ROLES"] == "broker,controller" and "profiles" not in brokers[name]
    # the replication and size settings are the managed cluster's (LocalCluster's nodes, three of them)
    node = LocalCluster(tmp_path, 3).nodes[0]
    node.port, node.controller_port = 19092, 19093
    props = node._properties()
    for key in ("default.replication.factor", "min.insync.replicas", "unclean.leader.election.enable",
                "offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr", "auto.create.topics.enable", "message.max.bytes",
                "replica.fetch.max.bytes", "socket.request.max.bytes", "num.partitions"):
        env_name = "KAFKA_" + key.upper().replace(".", "_")
        assert {e[env_name] for e in envs.values()} == {props[key]}, key
    assert props["default.replication.factor"] == "3" and props["min.insync.replicas"] == "2"
    for name in ("producer", "ps"):
        s = svcs[name]
        assert s["depends_on"] == {b: {"condition": "service_healthy"} for b in brokers}, name
        assert s["command"][s["command"].index("--bootstrap") + 1] == "kafka-1:9092,kafka-2:9092,kafka-3:9092"
    assert svcs["ps"]["profiles"] == ["ps"] and not {"ports", "expose"} & set(svcs["ps"])


# ================================================================ Compose v2's view, no compose binary
SCHEMA_DIR = ROOT / "tests" / "compose_spec"
# the settings docs/TESTBED.md and .env.example send through .env, and the services that must get them
TRAINER_SETTINGS = ("EDGESTREAM_DEVICE", "EDGESTREAM_BACKEND")
BROKER_TLS_SETTINGS = ("KAFKA_SSL_KEYSTORE_TYPE", "KAFKA_SSL_KEYSTORE_LOCATION", "KAFKA_SSL_KEYSTORE_PASSWORD",
                       "KAFKA_SSL_KEY_PASSWORD", "KAFKA_SSL_CLIENT_AUTH", "KAFKA_SASL_ENABLED_MECHANISMS",
                       "KAFKA_OPTS")


def test_compose_interpolation_follows_compose_v2():
    env = {"SET": "v", "EMPTY": ""}
    i = cc.interpolate
    assert i("${SET} $SET $${SET} $$SET", env) == "v v ${SET} $SET"
    assert (i("${UNSET:-d}", env), i("${EMPTY:-d}", env), i("${SET:-d}", env)) == ("d", "d", "v")
    assert (i("${UNSET-d}", env), i("${EMPTY-d}", env)) == ("d", "")            # `-`: only unset
    assert (i("${SET:+alt}", env), i("${EMPTY:+alt}", env), i("${EMPTY+alt}", env)) == ("alt", "", "alt")
    assert i("${UNSET:-${SET:-x}-y}", env) == "v-y"                              # nested defaults
    assert i("${UNSET:--Xmx1g -Xms256m}", env) == "-Xmx1g -Xms256m"
    assert i("${EMPTY?e}", env) == ""
    for text in ("${UNSET:?say it}", "${EMPTY:?say it}", "${UNSET?say it}"):
        with pytest.raises(cc.MissingVariable, match="say it"):
            i(text, env)
    missing: set[str] = set()
    assert i("a${UNSET}b", env, missing) == "ab" and missing == {"UNSET"}      # blank, as Compose (with a warning)
    with pytest.raises(ValueError):
        i("${1BAD}", env)
    assert [n for n, _, _ in cc.variables("${A:-${B}} $C $$D")] == ["A", "B", "C"]
    parsed = cc.dotenv_text('# c\nexport A=1\nB="x y" # c\nC=\'${A}\'\nD=${A}2 # c\nE=a#b\nF=\n', {})
    assert parsed == {"A": "1", "B": "x y", "C": "${A}", "D": "12", "E": "a#b", "F": ""}
    # the documented commands are read with their VAR=value prefixes, flags and continuation lines
    (cmd,) = cc.documented_commands("```bash\nA=1 B='x y' \\\n  docker compose --project-directory . -f f.yml "
                                    "--profile p run --rm svc # comment\n```\n")
    assert (cmd.assignments, cmd.project_dir, cmd.files, cmd.profiles, cmd.subcommand, cmd.target_service()) \
        == ({"A": "1", "B": "x y"}, ".", ["f.yml"], ["p"], "run", "svc")


def test_compose_spec_schema_is_vendored_with_its_licence():
    readme = (SCHEMA_DIR / "README.md").read_text()
    assert "github.com/compose-spec/compose-spec" in readme and "schema/compose-spec.json" in readme
    assert re.search(r"\b[0-9a-f]{40}\b", readme), "the README names the commit it was taken from"
    assert "Apache License" in (SCHEMA_DIR / "LICENSE").read_text()
    schema = json.loads((SCHEMA_DIR / "compose-spec.json").read_text())
    assert schema["title"] == "Compose Specification" and "service" in schema["definitions"]


@pytest.mark.parametrize("path", [COMPOSE, *SPLIT, CLUSTER], ids=lambda p: p.name)
def test_compose_files_are_valid_under_the_compose_spec_schema(path):
    raw = _load(path)
    assert cc.validate(raw) == []                   # as written
    assert cc.validate(_project(path).doc) == []    # interpolated with the documented .env
    # not vacuous: an unknown key or a wrong type is refused
    assert cc.validate(raw | {"nmae": "x"})
    broken = _project(path).doc
    next(iter(broken["services"].values()))["depends_on"] = {"broker": {"condition": "healthy"}}
    assert cc.validate(broken)


def _documented_commands() -> list[tuple[str, cc.ComposeCommand]]:
    out = [(DOC.name, c) for c in cc.documented_commands(DOC.read_text())]
    for f in (COMPOSE, *SPLIT, CLUSTER):
        out += [(f.name, c) for c in cc.documented_commands(f.read_text(), comment_prefix="#")]
    return out


DOCUMENTED = _documented_commands()


def _documented_project(cmd: cc.ComposeCommand) -> cc.Project:
    """The project `cmd` loads when run as documented: from the repository root, in a clean shell plus the
    command's own VAR=value settings, after `cp .env.example .env` (and nothing else)."""
    file = cmd.project_file(ROOT)
    pdir = (ROOT / cmd.project_dir).resolve() if cmd.project_dir else file.parent
    env_file = (ROOT / cmd.env_files[0]).resolve() if cmd.env_files else pdir / ".env"
    if env_file == ROOT / ".env":
        text = (ROOT / ".env.example").read_text()
    elif cmd.env_files:
        text = env_file.read_text()
    else:
        text = ""  # Compose reads <project dir>/.env, which the documented set-up does not create
    return cc.load_project(file, project_dir=pdir, shell=cmd.assignments, dotenv_text_override=text)


def test_documentation_has_the_split_deployment_commands():
    files = {Path(f).name for _, c in DOCUMENTED if c.subcommand == "up" for f in c.files}
    assert {"compose.broker.yml", "compose.trainers.yml"} <= files, files
    assert len(DOCUMENTED) >= 15


@pytest.mark.parametrize("where,cmd", DOCUMENTED, ids=[f"{w}:{i}:{c.subcommand}" for i, (w, c) in enumerate(DOCUMENTED)])
def test_documented_compose_commands_work_as_written(where, cmd):
    """Every mount, build and config the command's services use exists where Compose v2 will look."""
    try:
        project = _documented_project(cmd)
    except cc.MissingVariable as exc:
        pytest.fail(f"{where}: `{cmd.text}`: {exc}")
    problems = [f"schema: {e}" for e in cc.validate(project.doc)]
    declared = {p for s in project.services.values() for p in s.get("profiles") or []}
    # the profiles the command names (COMPOSE_PROFILES from .env may name another file's: no service, no harm)
    for prof in cmd.profiles or [x for x in cmd.assignments.get("COMPOSE_PROFILES", "").split(",") if x]:
        if prof != "*" and prof not in declared:
            problems.append(f"profile {prof} is declared by no service")
    target = cmd.target_service()
    if target is not None and target not in project.services:
        problems.append(f"no service {target}")
    for name, s in project.services.items():
        config_dir = None
        for m in project.mounts(name):
            if m.path is None:
                continue
            if not m.path.is_dir():
                problems.append(f"{name}: bind-mount source {m.source!r} -> {m.path} does not exist (for {m.target})")
            if m.target == "/config":
                config_dir = m.path
        build = project.build(name)
        if build is not None:
            ctx, dockerfile = build
            if not (ctx / "pyproject.toml").is_file():
                problems.append(f"{name}: build context {ctx} is not the repository root")
            if not dockerfile.is_file():
                problems.append(f"{name}: no Dockerfile {dockerfile}")
        for arg in s.get("command") or []:
            if isinstance(arg, str) and arg.startswith("/config/") and config_dir is not None:
                if not (config_dir / arg.removeprefix("/config/")).is_file():
                    problems.append(f"{name}: {arg} is not in the mounted {config_dir}")
    assert not problems, f"{where}: `{cmd.text}`:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("path", [COMPOSE, *SPLIT, CLUSTER], ids=lambda p: p.name)
def test_compose_bind_mounts_fail_loudly(path):
    """A bind mount whose source is missing (a wrong project directory, a typo in CONFIG_DIR) must stop
    `up` with an error, not become an empty directory (the short syntax's create_host_path)."""
    project = _project(path)
    binds = [m for n in project.services for m in project.mounts(n) if m.path is not None]
    assert binds
    for m in binds:
        assert not m.create_host_path, f"{m.service}: {m.source}:{m.target} would be created empty if missing"


@pytest.mark.parametrize("path", [COMPOSE, *SPLIT], ids=lambda p: p.name)
def test_env_settings_reach_the_containers(path):
    """.env only feeds interpolation: a setting a container reads must be passed in `environment:`."""
    trainers = [n for n, s in _load(path)["services"].items() if (s.get("command") or [None])[0] == "train"]
    assert bool(trainers) == (path != SPLIT[0])  # the broker host runs none
    settings = {v: f"set-{v.lower()}" for v in TRAINER_SETTINGS + (BROKER_TLS_SETTINGS if path == SPLIT[0] else ())}
    project = _project(path, settings)
    for name in trainers:
        env = project.services[name]["environment"]
        for var in TRAINER_SETTINGS:
            assert env.get(var) == settings[var], f"{path.name} {name}: {var} from .env does not reach the container"
    if path == SPLIT[0]:
        env = project.services["broker"]["environment"]
        for var in BROKER_TLS_SETTINGS:
            assert env.get(var) == settings[var], f"{path.name} broker: {var} from .env does not reach the container"
    # unset, they change nothing: empty (= automatic) for the trainers, Kafka's own defaults for the broker
    plain = _project(path)
    for name in trainers:
        assert all(plain.services[name]["environment"][v] == "" for v in TRAINER_SETTINGS)
    if path == SPLIT[0]:
        env = plain.services["broker"]["environment"]
        assert (env["KAFKA_SSL_CLIENT_AUTH"], env["KAFKA_SSL_KEYSTORE_TYPE"], env["KAFKA_SASL_ENABLED_MECHANISMS"]) \
            == ("none", "JKS", "GSSAPI")


def test_env_example_and_docs_name_the_container_settings():
    example = _env_example()
    doc = DOC.read_text()
    for var in TRAINER_SETTINGS + BROKER_TLS_SETTINGS:
        assert var in example, f".env.example does not list {var}"
        assert f"`{var}`" in doc, f"docs/TESTBED.md does not name {var}"
    # and nothing in .env.example is read by no compose file (a setting that silently does nothing)
    used = {name for f in (COMPOSE, *SPLIT) for s in _strings(_load(f)) for name, _, _ in cc.variables(s)}
    dead = {k for k in example if k not in used and not k.startswith("COMPOSE_")}
    assert not dead, f".env.example settings no compose file reads: {sorted(dead)}"


def test_jetson_trainer_can_open_the_gpu():
    """JetPack's GPU device nodes belong to the group video; uid 10001 needs it or trains on the CPU."""
    jetson = _load(SPLIT[1])["services"]["trainer-jetson"]
    assert "video" in [str(g) for g in jetson.get("group_add") or []]
    assert jetson["runtime"] == "nvidia"
    useradd = [rest for op, rest in _instructions(DOCKERFILES[2]) if op == "RUN" and "useradd" in rest]
    assert useradd and re.search(r"(--groups|-G)\s+\S*\bvideo\b", useradd[0]), useradd
    doc = DOC.read_text()
    assert "group_add" in doc and "Python 3.12" in doc


def test_testbed_doc_states_the_minimum_compose_version():
    """The newest Compose feature the files use is the top-level `name:` (Docker Compose v2.3.0)."""
    m = re.search(r"Docker Compose v?(\d+)\.(\d+)\.(\d+) or newer", DOC.read_text())
    assert m, "docs/TESTBED.md does not state the minimum Docker Compose version"
    assert tuple(map(int, m.groups())) >= (2, 3, 0)
    assert all("name" in _load(f) for f in (COMPOSE, *SPLIT, CLUSTER))  # what makes it >= 2.3.0


def test_compose_checks_need_no_compose_binary(tmp_path, monkeypatch):
    """Debian's v1 `docker-compose` refuses `name:`: the checks must not run whichever compose binary (or
    docker) is on PATH. Fakes that fail and record being called stand in for them."""
    calls = tmp_path / "calls"
    for tool in ("docker-compose", "docker", "podman-compose", "podman"):
        exe = tmp_path / tool
        exe.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n'
                       'echo "(root) Additional property name is not allowed" >&2\nexit 1\n')
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    for path in (COMPOSE, *SPLIT, CLUSTER):
        test_compose_commands_are_real_edgestream_commands(path)
        test_compose_every_variable_is_defined(path)
        test_compose_files_are_valid_under_the_compose_spec_schema(path)
    _documented_project(DOCUMENTED[0][1])
    assert not calls.exists(), calls.read_text()


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _from_images(ins: list[tuple[str, str]]) -> list[str]:
    """The FROM lines with the ARGs declared before the first FROM replaced by their defaults: every
    Dockerfile takes its base as `ARG BASE=<today's image>` (a stand-in base is passed where no registry
    answers, scripts/testbed/bases.sh), so the default is what must be pinned."""
    defaults: dict[str, str] = {}
    out = []
    for op, rest in ins:
        if op == "ARG" and not out:
            name, _, value = rest.partition("=")
            defaults[name.strip()] = value.strip().strip('"')
        elif op == "FROM":
            out.append(re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m.group(1), m.group(0)), rest))
    return out


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_lint(path):
    ins = _instructions(path)
    assert any(op == "ARG" and rest.startswith("BASE=") for op, rest in ins), "the base must be ARG BASE=<image>"
    assert all(rest.split()[0] == "${BASE}" for op, rest in ins if op == "FROM"), "every stage starts FROM ${BASE}"
    froms = [rest.split()[0] for rest in _from_images(ins)]
    assert froms
    for image in froms:
        assert "$" not in image, f"FROM {image}: not pinned"
        name, sep, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
        assert sep and tag and tag != "latest" and "latest" not in tag, f"FROM {image}: pin a tag"
    users = [rest for op, rest in ins if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "the image must run as a non-root user"
    for op, rest in ins:
        if op in ("ENV", "ARG"):
            assert not re.search(r"(password|passwd|secret|token|api_?key|sasl)", rest, re.I), f"{op} {rest}"
    assert not any(op == "ADD" and "http" in rest for op, rest in ins)
    assert ("ENTRYPOINT", '["edgestream"]') in ins
    body = " ".join(rest for op, rest in ins if op == "RUN")
    assert "_wirefast" in body, "the build must prove the C decoder was built"
    assert any(op == "COPY" and "edgestream" in rest for op, rest in ins)


def test_dockerfile_bases():
    cpu = _instructions(DOCKERFILES[0])
    froms = _from_images(cpu)
    assert len(froms) == 2 and froms[0].startswith("python:3.11") and "slim" in froms[0]
    assert froms[0].endswith(" AS build") and froms[1].startswith("python:3.11")
    build_runs = []
    stage = 0
    for op, rest in cpu:
        stage += op == "FROM"
        if op == "RUN" and stage == 1:
            build_runs.append(rest)
    assert any("gcc" in r for r in build_runs), "gcc belongs to the build stage"
    assert not any("gcc" in rest for op, rest in cpu[[i for i, (op, _) in enumerate(cpu) if op == "FROM"][1]:]
                   if op == "RUN")
    cuda = _from_images(_instructions(DOCKERFILES[1]))
    assert all(f.startswith("pytorch/pytorch:") and "cuda" in f and "runtime" in f for f in cuda)
    jetson = _from_images(_instructions(DOCKERFILES[2]))
    assert all(f.startswith("nvcr.io/nvidia/") for f in jetson)
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".env", "runs"} <= set(ignore)


def test_broker_listens_and_advertises_other_hosts(tmp_path):
    """server.properties of LocalBroker(host=..., advertised_host=...); the defaults stay on 127.0.0.1."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    b = LocalBroker(tmp_path / "a", port=19092, host="0.0.0.0", advertised_host="10.9.8.7")
    b.controller_port = 19093
    props = dict(line.split("=", 1) for line in b._server_properties().read_text().splitlines())
    assert props["listeners"] == "PLAINTEXT://0.0.0.0:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://10.9.8.7:19092"
    assert b.bootstrap == "10.9.8.7:19092"
    d = LocalBroker(tmp_path / "b", port=19094)
    d.controller_port = 19095
    props = dict(line.split("=", 1) for line in d._server_properties().read_text().splitlines())
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19094,CONTROLLER://127.0.0.1:19095"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19094" and d.bootstrap == "127.0.0.1:19094"


# ================================================================ behaviour: network namespaces
@pytest.fixture
def hosts():
    with _network(["broker", "producer", "trainer-0", "trainer-1"]) as h:
        yield h


@pytest.fixture
def ps_hosts():
    with _network(["broker", "producer", "ps", "trainer-0", "trainer-1"]) as h:
        yield h


def _resolve(value: str, env: dict[str, str], names: dict[str, str], paths: dict[str, str]) -> str:
    """A compose value as the process on its host sees it: ${VAR}s interpolated, service names -> host
    addresses, container paths -> the test's folders."""
    v = _interpolate(value, env)
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)(:\d+)?", v)
    if m and m.group(1) in names:
        v = names[m.group(1)] + (m.group(2) or "")
    for inside, outside in paths.items():
        if v == inside or v.startswith(inside + "/"):
            v = outside + v[len(inside):]
    return v


class Testbed:
    """docker-compose.yml's services as processes on `hosts`: commands and environment from the compose
    file, ${VAR}s interpolated with `cenv` (compose's defaults otherwise), service names resolved to the
    hosts' addresses, /config and /runs mapped to folders under `tmp`; the broker is the managed one,
    bound to and advertised as the broker host's address on compose's INSIDE listener port."""

    __test__ = False

    def __init__(self, hosts: Hosts, tmp: Path, cenv: dict[str, str]) -> None:
        self.hosts, self.tmp, self.cenv = hosts, tmp, cenv
        self.svcs = _load(COMPOSE)["services"]
        self.cfg_dir, self.runs = tmp / "config", tmp / "runs"
        self.cfg_dir.mkdir()
        self.runs.mkdir()
        self.paths = {"/config": str(self.cfg_dir), "/runs": str(self.runs)}
        base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "EDGESTREAM_CACHE") if k in os.environ}
        base["PATH"] = f"{Path(sys.executable).parent}:{base.get('PATH', '/usr/bin:/bin')}"
        self.base = base
        inside = dict(x.split("://", 1) for x in
                      self.svcs["broker"]["environment"]["KAFKA_ADVERTISED_LISTENERS"].split(","))
        bhost, self.bport = inside["INSIDE"].split(":")
        assert bhost == "broker"
        self.bootstrap = f"{hosts.ip['broker']}:{self.bport}"
        self.bdir = tmp / "broker"

    def command(self, service: str) -> list[str]:
        sub, *args = self.svcs[service]["command"]  # the subcommand stays a word (`ps` is also a host)
        return [EDGESTREAM, sub, *(_resolve(x, self.cenv, self.hosts.ip, self.paths) for x in args)]

    def environment(self, service: str) -> dict[str, str]:
        env = self.svcs[service].get("environment") or {}
        return self.base | {k: _resolve(str(v), self.cenv, self.hosts.ip, self.paths) for k, v in env.items()}

    def popen(self, service: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Service `service` on the host of the same name; its stdout and stderr in tmp/<service>.out."""
        return self.hosts.popen(service, self.command(service), self.environment(service) if env is None else env,
                                self.tmp / f"{service}.out")

    def out(self, service: str) -> str:
        return (self.tmp / f"{service}.out").read_text(errors="replace")

    def start_broker(self) -> None:
        start = self.hosts.run("broker", [EDGESTREAM, "broker", "start", "--host", self.hosts.ip["broker"], "--port",
                                          self.bport, "--data-dir", str(self.bdir)], self.base, timeout=150)
        assert start.returncode == 0, start.stderr[-2000:]
        assert start.stdout.strip() == self.bootstrap

    def stop_broker(self) -> None:
        stop = self.hosts.run("broker", [EDGESTREAM, "broker", "stop", "--data-dir", str(self.bdir)], self.base,
                              timeout=60)
        assert stop.returncode == 0, stop.stderr

    @staticmethod
    def wait(p: subprocess.Popen, timeout: float) -> int | None:
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop_producer(self, producer: subprocess.Popen) -> dict:
        """SIGTERM the producer (compose stop); its JSON summary (last line), checked."""
        assert producer.poll() is None, self.out("producer")[-2000:]
        os.killpg(producer.pid, signal.SIGTERM)
        assert self.wait(producer, 60) == 0, self.out("producer")[-2000:]
        summary = json.loads(self.out("producer").strip().splitlines()[-1])
        assert summary["delivered"] > 0 and summary["failed"] == 0
        return summary


_PROBE = ("import socket, sys\n"
          "try:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), 3).close()\n"
          "except OSError as e:\n    print(e.errno)\nelse:\n    print(0)\n")


def _connect_errno(tb: Testbed, src: str, addr: str, port: int | str) -> int:
    """errno of a TCP connection from host `src` to addr:port (0: it connected)."""
    r = tb.hosts.run(src, [sys.executable, "-c", _PROBE, addr, str(port)], tb.base, timeout=20)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip())


@pytest.mark.timeout(420)
def test_compose_services_train_across_network_hosts(hosts, tmp_path):
    t0 = time.monotonic()
    run_id = f"tb{os.getpid()}{int(time.time()) % 100000}"
    # compose's interpolation environment: defaults, except the run id (a fresh run on a fresh broker)
    tb = Testbed(hosts, tmp_path, {"RUN_ID": run_id})
    cfg = yaml.safe_load((ROOT / "examples" / "testbed.yaml").read_text())
    cfg.update(model={"name": "mlp"}, stop={"max_steps": 5, "max_time_s": 120, "target_accuracy": 0.99},
               eval={"every_s": 30})
    cfg["devices"]["rates"] = {"distribution": "constant", "rate": 200}
    (tb.cfg_dir / "testbed.yaml").write_text(yaml.safe_dump(cfg))

    tb.start_broker()
    t_broker = time.monotonic() - t0
    try:
        # another host cannot use its own loopback for the broker: the address really is the broker host's
        assert _connect_errno(tb, "producer", "127.0.0.1", tb.bport) != 0

        producer = tb.popen("producer")
        trainers = {r: tb.popen(f"trainer-{r}") for r in (0, 1)}
        for r, p in trainers.items():
            rc = tb.wait(p, 240)
            assert rc == 0, f"trainer-{r} exit {rc}:\n{tb.out(f'trainer-{r}')[-3000:]}"
        t_train = time.monotonic() - t0
        tb.stop_producer(producer)

        # the collect step of the compose file writes the run directory from the rank files
        col = hosts.run("trainer-0", tb.command("collect"), tb.environment("collect"), timeout=120)
        assert col.returncode == 0, col.stderr[-2000:]
    finally:
        tb.stop_broker()
    run_dir = tb.runs / f"testbed-scadles-{run_id}"
    assert {"config.yaml", "events.jsonl", "summary.json", "accuracy.png", "ranks"} <= {p.name for p in run_dir.iterdir()}
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["devices"] == 2 and s["stop_reason"] == "max_steps" and s["device_steps"] == {"0": 5, "1": 5}
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    steps = [e for e in events if e.get("step") is not None and e.get("device") is not None and e.get("batch")]
    assert {e["device"] for e in steps} == {0, 1} and all(e["batch"] > 0 for e in steps)
    digests = {}
    for e in steps:
        if e.get("digest"):
            digests.setdefault(e["step"], set()).add(e["digest"])
    assert digests and all(len(d) == 1 for d in digests.values()), "replicas diverged across hosts"
    for r in (0, 1):
        log = (run_dir / "ranks" / f"{r}.log").read_text()
        assert f"bootstrap {tb.bootstrap}" in log
    print(f"\nnetns testbed: broker up {t_broker:.1f} s, trained at {t_train:.1f} s, "
          f"total {time.monotonic() - t0:.1f} s", file=sys.stderr)


@pytest.mark.timeout(420)
def test_compose_external_profile_trains_on_topics_a_plain_client_writes(hosts, tmp_path):
    """Profile external: the devices' own JSON topics, written by examples/json-sensors/publish.py (a plain
    confluent-kafka script, from the producer's host); the producer service ends at once (nothing to produce);
    external-trainer-0/-1 train on STREAMS_TOPIC across the hosts; collect writes the run directory."""
    run_id = f"tbx{os.getpid()}{int(time.time()) % 100000}"
    pattern = f"{run_id}.sensor-{{device}}"
    tb = Testbed(hosts, tmp_path, {"RUN_ID": run_id, "EXPERIMENT": "testbed-external.yaml",
                                   "STREAMS_TOPIC": pattern, "STREAMS_FORMAT": "json"})
    cfg = yaml.safe_load((ROOT / "examples" / "testbed-external.yaml").read_text())
    cfg.update(stop={"max_steps": 5, "max_time_s": 120}, eval={"every_s": 30, "holdout": 0.1})
    (tb.cfg_dir / "testbed-external.yaml").write_text(yaml.safe_dump(cfg))
    tb.start_broker()
    try:
        pub = hosts.run("producer", [sys.executable, str(ROOT / "examples" / "json-sensors" / "publish.py"),
                                     "--bootstrap", tb.bootstrap, "--topic", pattern, "--devices", "2",
                                     "--records", "600"], tb.base, timeout=120)
        assert pub.returncode == 0 and "0 record(s) not acknowledged" in pub.stdout, pub.stderr[-2000:]
        producer = tb.popen("producer")
        assert tb.wait(producer, 120) == 0, tb.out("producer")[-2000:]
        assert "nothing to produce" in tb.out("producer")
        trainers = {r: hosts.popen(f"trainer-{r}", tb.command(f"external-trainer-{r}"),
                                   tb.environment(f"external-trainer-{r}"), tmp_path / f"trainer-{r}.out")
                    for r in (0, 1)}
        for r, p in trainers.items():
            rc = tb.wait(p, 240)
            assert rc == 0, f"external-trainer-{r} exit {rc}:\n{(tmp_path / f'trainer-{r}.out').read_text()[-3000:]}"
        col = hosts.run("trainer-0", tb.command("external-collect"), tb.environment("external-collect"), timeout=120)
        assert col.returncode == 0, col.stderr[-2000:]
    finally:
        tb.stop_broker()
    run_dir = tb.runs / f"testbed-ext-scadles-{run_id}"
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["devices"] == 2 and s["stop_reason"] == "max_steps" and s["device_steps"] == {"0": 5, "1": 5}
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())["streams"]  # what --resume would read
    assert (saved["topic"], saved["format"], saved.get("partitioner")) == (pattern, "json", None)
    for r in (0, 1):
        lines = [json.loads(x) for x in (run_dir / "ranks" / f"{r}.jsonl").read_text().splitlines()
                 if '"kind":"step"' in x]
        assert len(lines) == 5 and all(e["batch"] > 0 for e in lines)
        assert f"bootstrap {tb.bootstrap}" in (run_dir / "ranks" / f"{r}.log").read_text()


# a device's producer as a user writes it: plain confluent-kafka, the Java client's partitioner, JSON readings
# like examples/json-sensors/publish.py's, keyed with the device id, on ONE topic of two partitions
_KEYED_PUBLISHER = """
import json, random, sys
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
sys.path.insert(0, sys.argv[4])
from publish import reading
bootstrap, topic, records = sys.argv[1], sys.argv[2], int(sys.argv[3])
admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures fail once it is collected
for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
    f.result(30)
p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "enable.idempotence": True})
parts, failed = {}, []
def done(err, msg):
    failed.append(err) if err else parts.setdefault(msg.key().decode(), set()).add(msg.partition())
for d in (0, 1):
    rng = random.Random(d)
    for _ in range(records):
        p.produce(topic, json.dumps(reading(rng)).encode(), key=str(d).encode(), on_delivery=done)
        p.poll(0)
left = p.flush(60)
print(json.dumps({"left": left, "failed": len(failed), "partitions": {k: sorted(v) for k, v in parts.items()}}))
"""


@pytest.mark.timeout(420)
def test_compose_external_profile_trains_on_one_keyed_topic(hosts, tmp_path):
    """Profile external on ONE topic keyed by the device id: an inline confluent-kafka producer on the producer's
    host writes both devices' JSON readings with the Java client's partitioner (murmur2_random) to a topic of
    two partitions; external-trainer-0/-1 read it with STREAMS_PARTITIONER=murmur2 (no producer service: the
    trainers do not wait for one), each training on its own device's records."""
    run_id = f"tbk{os.getpid()}{int(time.time()) % 100000}"
    topic = f"{run_id}.plant"
    tb = Testbed(hosts, tmp_path, {"RUN_ID": run_id, "EXPERIMENT": "testbed-external.yaml", "STREAMS_TOPIC": topic,
                                   "STREAMS_FORMAT": "json", "STREAMS_PARTITIONER": "murmur2"})
    cfg = yaml.safe_load((ROOT / "examples" / "testbed-external.yaml").read_text())
    cfg.update(stop={"max_steps": 5, "max_time_s": 120}, eval={"every_s": 30, "holdout": 0.1})
    (tb.cfg_dir / "testbed-external.yaml").write_text(yaml.safe_dump(cfg))
    tb.start_broker()
    try:
        pub = hosts.run("producer", [sys.executable, "-c", _KEYED_PUBLISHER, tb.bootstrap, topic, "600",
                                     str(ROOT / "examples" / "json-sensors")], tb.base, timeout=120)
        assert pub.returncode == 0, pub.stderr[-2000:]
        published = json.loads(pub.stdout.strip().splitlines()[-1])
        assert published["left"] == 0 and published["failed"] == 0 and set(published["partitions"]) == {"0", "1"}
        trainers = {r: hosts.popen(f"trainer-{r}", tb.command(f"external-trainer-{r}"),
                                   tb.environment(f"external-trainer-{r}"), tmp_path / f"trainer-{r}.out")
                    for r in (0, 1)}
        for r, p in trainers.items():
            rc = tb.wait(p, 240)
            assert rc == 0, f"external-trainer-{r} exit {rc}:\n{(tmp_path / f'trainer-{r}.out').read_text()[-3000:]}"
        col = hosts.run("trainer-0", tb.command("external-collect"), tb.environment("external-collect"), timeout=120)
        assert col.returncode == 0, col.stderr[-2000:]
    finally:
        tb.stop_broker()
    run_dir = tb.runs / f"testbed-ext-scadles-{run_id}"
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["devices"] == 2 and s["stop_reason"] == "max_steps" and s["device_steps"] == {"0": 5, "1": 5}
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())["streams"]
    assert (saved["topic"], saved["partitioner"]) == (topic, "murmur2")
    for r in (0, 1):
        lines = [json.loads(x) for x in (run_dir / "ranks" / f"{r}.jsonl").read_text().splitlines()
                 if '"kind":"step"' in x]
        assert len(lines) == 5 and all(e["batch"] > 0 for e in lines)
    # every record went where the trainers looked: nothing dead-lettered as another device's
    assert not any('"device_mismatch"' in x for r in (0, 1)
                   for x in (run_dir / "ranks" / f"{r}.jsonl").read_text().splitlines())


@pytest.mark.timeout(420)
def test_compose_ps_service_runs_ssp_across_network_hosts(ps_hosts, tmp_path):
    """The `ps` profile: broker, producer, ps, trainer-0 and trainer-1 on five hosts run an SSP job
    (examples/testbed-ssp.yaml, s = 2, momentum 0) to its stop. The PS and the trainers have a route to
    the broker's host and to no other, and the trainers get no MASTER_ADDR: they meet only through Kafka.
    The trainers start first and wait for the PS, as compose starts them (nothing waits for the PS)."""
    hosts = ps_hosts
    t0 = time.monotonic()
    run_id = f"tbps{os.getpid()}{int(time.time()) % 100000}"
    tb = Testbed(hosts, tmp_path, {"RUN_ID": run_id, "EXPERIMENT": "testbed-ssp.yaml"})
    cfg = yaml.safe_load((ROOT / "examples" / "testbed-ssp.yaml").read_text())
    assert cfg["algorithm"]["name"] == "ssp" and cfg["algorithm"]["params"] == {"s": 2}
    assert cfg["optim"]["momentum"] == 0
    s_bound, max_steps = 2, 30
    cfg.update(stop={"max_steps": max_steps, "max_time_s": 150, "target_accuracy": None}, eval={"every_s": 2})
    cfg["devices"]["rates"] = {"distribution": "constant", "rate": 200}
    (tb.cfg_dir / "testbed-ssp.yaml").write_text(yaml.safe_dump(cfg))
    run_dir = tb.runs / f"testbed-ssp-ssp-{run_id}"
    workers = ("ps", "trainer-0", "trainer-1")

    # the PS and the trainers: a route to the broker's host only
    for h in workers:
        hosts.route_only_to(h, ["broker"])
    env = {n: tb.environment(n) for n in workers}
    for r in (0, 1):  # a PS algorithm's trainers do no rendezvous: no MASTER_ADDR, no MASTER_PORT
        for k in ("MASTER_ADDR", "MASTER_PORT"):
            env[f"trainer-{r}"].pop(k, None)
    for n in workers:
        assert "MASTER_ADDR" not in env[n] and "MASTER_PORT" not in env[n], n
    tb.start_broker()
    t_broker = time.monotonic() - t0
    try:
        for src in workers:
            assert _connect_errno(tb, src, hosts.ip["broker"], tb.bport) == 0, f"{src} cannot reach the broker"
            for dst in hosts.ip:
                if dst not in (src, "broker"):
                    e = _connect_errno(tb, src, hosts.ip[dst], 29500)
                    assert e == errno.ENETUNREACH, f"{src} -> {dst}: errno {e}, not unreachable"

        producer = tb.popen("producer")
        trainers = {r: tb.popen(f"trainer-{r}", env[f"trainer-{r}"]) for r in (0, 1)}
        # both trainers reach the join before the PS exists, and wait there
        deadline = time.monotonic() + 120
        joining: set[int] = set()
        while joining != {0, 1}:
            for r, p in trainers.items():
                assert p.poll() is None, f"trainer-{r} exit {p.returncode} before the PS:\n{tb.out(f'trainer-{r}')[-3000:]}"
                log = run_dir / "ranks" / f"{r}.log"
                if log.is_file() and "joining the parameter server" in log.read_text():
                    joining.add(r)
            assert time.monotonic() < deadline, f"trainers {sorted({0, 1} - joining)} never asked for the PS"
            time.sleep(0.2)
        time.sleep(1.0)
        assert all(p.poll() is None for p in trainers.values()), "a trainer did not wait for the PS"
        ps = tb.popen("ps", env["ps"])

        deadline = time.monotonic() + 240
        while any(p.poll() is None for p in trainers.values()) and time.monotonic() < deadline:
            assert ps.poll() in (None, 0), f"ps exit {ps.returncode} while the trainers ran:\n{tb.out('ps')[-3000:]}"
            time.sleep(0.2)
        for r, p in trainers.items():
            rc = p.poll()
            assert rc == 0, f"trainer-{r} exit {rc}:\n{tb.out(f'trainer-{r}')[-3000:]}\nps:\n{tb.out('ps')[-2000:]}"
        t_train = time.monotonic() - t0
        rc = tb.wait(ps, 60)
        assert rc == 0, f"ps exit {rc}:\n{tb.out('ps')[-3000:]}"
        tb.stop_producer(producer)

        col = hosts.run("trainer-0", tb.command("collect"), tb.environment("collect"), timeout=120)
        assert col.returncode == 0, col.stderr[-2000:]
    finally:
        tb.stop_broker()

    ranks = [json.loads((run_dir / "ranks" / f"{r}.summary.json").read_text()) for r in (0, 1)]
    steps = [x["steps"] for x in ranks]
    assert all(x["algorithm"] == "ssp" and x["backend"] == "kafka-ps" for x in ranks), ranks
    assert max(steps) == max_steps and max(steps) - min(steps) <= s_bound + 1, steps
    ps_summary = json.loads((run_dir / "ranks" / "ps.summary.json").read_text())
    assert json.loads(tb.out("ps").strip().splitlines()[-1]) == ps_summary  # `edgestream ps` prints it too
    assert ps_summary["status"] == "finished" and ps_summary["starts"] == 1 and ps_summary["stop_reason"] == "max_steps"
    # every SSP step pushes once, and the PS applied each push once
    assert ps_summary["pushes_applied"] == sum(steps) == ps_summary["pushes_received"], (ps_summary, steps)
    assert ps_summary["pushes"] == steps and ps_summary["rejected"] == 0 and ps_summary["duplicates_dropped"] == 0
    # the SSP bound at the real PS: when it answered worker w's pull, w was at most s pushes ahead
    replies = [json.loads(x) for x in (run_dir / "ranks" / "ps.jsonl").read_text().splitlines()]
    replies = [x for x in replies if x.get("kind") == "ps" and not x["stop"]]
    assert replies and all(x["pushes"][x["worker"]] - min(x["pushes"]) <= s_bound for x in replies)
    # everyone used the broker's address, and only it
    assert f"on {tb.bootstrap}" in (run_dir / "ranks" / "ps.log").read_text()
    for r in (0, 1):
        log = (run_dir / "ranks" / f"{r}.log").read_text()
        assert f"bootstrap {tb.bootstrap}" in log and "joined at model version" in log
    # collect merged the PS: its eval lines and its figures
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["device_steps"] == {"0": steps[0], "1": steps[1]} and s["ps"]["pushes_applied"] == sum(steps)
    assert s["algorithm"] == "ssp" and s["stop_reason"] == "max_steps"
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e.get("kind") == "eval" for e in events) and s["final_accuracy"] is not None
    print(f"\nnetns ps testbed: broker up {t_broker:.1f} s, trained at {t_train:.1f} s ({steps} steps), "
          f"total {time.monotonic() - t0:.1f} s", file=sys.stderr)


def test_collect_needs_rank_files(tmp_path):
    proc = subprocess.run([EDGESTREAM, "collect", str(tmp_path), "--config", str(ROOT / "examples" / "testbed.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no ranks/" in proc.stderr
