"""The docker-compose testbed, proven without a Docker engine.

Structure: docker-compose.yml and the split-deployment files parse, their services, healthcheck,
depends_on conditions and profiles are right, every ${VAR} is defined, every command is a real
`edgestream` subcommand with real flags; the Dockerfiles pass a basic lint.

Behaviour: the compose file's own services run as processes, each in its own Linux network namespace
(veth pairs on a bridge the test creates, addresses in 10.213.<k>.0/24), with the commands and the
environment taken from docker-compose.yml and the service names resolved to those hosts: the broker
on one host, the producer on another, trainer-0 and trainer-1 on two more. The run must train and the
collect step must write the run directory, so advertised listeners, bootstrap addresses and the
torch.distributed rendezvous really work across hosts. Needs root (CI runs as root): without it the
test fails, saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from edgestream.config import load_config
from edgestream.kafka.broker import MAX_MESSAGE_BYTES, LocalBroker

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
SPLIT = [ROOT / "docker" / "compose.broker.yml", ROOT / "docker" / "compose.trainers.yml"]
DOCKERFILES = [ROOT / "docker" / n for n in ("Dockerfile", "Dockerfile.cuda", "Dockerfile.jetson")]
EDGESTREAM = str(Path(sys.executable).with_name("edgestream"))
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])((?:[^{}]|\{[^{}]*\})*))?\}")


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
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error} against env."""
    def sub(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if name in env and (env[name] != "" or op in ("-", "?")):
            return env[name]
        if op in (":-", "-"):
            return _interpolate(arg, env)
        raise KeyError(f"${{{name}}} is not set ({arg})")
    return VAR.sub(sub, value)


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


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
    assert {"broker", "producer", "trainer-0", "trainer-1", "gpu-trainer-0", "gpu-trainer-1", "collect"} <= set(svcs)
    assert not any("ps" in n.split("-") or "parameter" in n for n in svcs), "the parameter server joins later"

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
    for name, s in _edgestream_services(doc).items():
        deps = s.get("depends_on", {})
        if name != "collect":
            assert deps.get("broker", {}).get("condition") == "service_healthy", name
        for mount in s["volumes"]:
            if mount.endswith(":/config:ro"):
                break
        else:
            raise AssertionError(f"{name}: the config is not mounted read-only at /config")
        assert "runs:/runs" in s["volumes"], f"{name}: run outputs are not on the runs volume"
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
    for prof in ("cpu", "gpu"):
        assert sum(prof in s["profiles"] for s in trainers.values()) == int(_env_example()["TRAINERS"])


@pytest.mark.parametrize("path", [COMPOSE, *SPLIT], ids=lambda p: p.name)
def test_compose_commands_are_real_edgestream_commands(path):
    doc = _load(path)
    env = _env_example() | {"RANK": "0", "MASTER_ADDR": "10.0.0.11", "KAFKA_ADVERTISED_HOST": "10.0.0.5",
                            "KAFKA_BOOTSTRAP": "10.0.0.5:9094"}
    for name, s in _edgestream_services(doc).items():
        cmd = [_interpolate(x, env) for x in s["command"]]
        sub = cmd[0]
        assert sub in {"produce", "train", "collect"}, f"{name}: {sub}"
        text = _help(sub)
        flags = [x for x in cmd if x.startswith("--")]
        assert flags, name
        for flag in flags:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), f"{name}: `edgestream {sub}` has no {flag}"
        # every --set names a config field that loads with the config the command reads
        config = cmd[cmd.index("--config") + 1] if sub == "collect" else cmd[1]
        assert config.startswith("/config/"), f"{name}: {config}"
        sets = [cmd[i + 1] for i, x in enumerate(cmd) if x == "--set"]
        cfg = load_config(ROOT / "examples" / config.removeprefix("/config/"), sets)
        assert cfg.devices.count == int(env["TRAINERS"])
        if sub in ("produce", "train"):
            assert "--run-id" in cmd and "--bootstrap" in cmd
            boot = cmd[cmd.index("--bootstrap") + 1]
            assert not re.match(r"(localhost|127\.)", boot), f"{name}: bootstrap {boot} inside a container"
        for v in (s.get("environment") or {}).values():
            assert "localhost" not in str(v) and "127.0.0.1" not in str(v), f"{name}: {v}"
    if shutil.which("docker-compose"):  # Debian's docker-compose, when installed
        proc = subprocess.run(["docker-compose", "-f", str(path), "--env-file", str(ROOT / ".env.example"),
                               "config", "-q"], capture_output=True, text=True, timeout=60,
                              env=os.environ | {k: v for k, v in env.items() if k not in os.environ})
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", [COMPOSE, *SPLIT], ids=lambda p: p.name)
def test_compose_every_variable_is_defined(path):
    doc = _load(path)
    defined = set(_env_example())
    undefined = set()
    for s in _strings(doc):
        for m in VAR.finditer(s):
            name, op = m.group(1), m.group(2)
            if op in (":-", "-"):
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


def test_split_deployment_files():
    broker = _load(SPLIT[0])["services"]
    adv = broker["broker"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert "OUTSIDE://${KAFKA_ADVERTISED_HOST:?" in adv  # must be said: the address other hosts use
    assert broker["producer"]["depends_on"]["broker"]["condition"] == "service_healthy"
    trainers = _load(SPLIT[1])["services"]
    assert {"trainer", "trainer-gpu", "trainer-jetson"} <= set(trainers)
    for name in ("trainer", "trainer-gpu", "trainer-jetson"):
        s = trainers[name]
        assert s["network_mode"] == "host" and s["profiles"]
        assert s["environment"]["MASTER_ADDR"].startswith("${MASTER_ADDR:?")
        assert "${KAFKA_BOOTSTRAP:?" in " ".join(s["command"])
        assert any(v.endswith(":/certs:ro") for v in s["volumes"])  # TLS material for runtime.kafka_client
    assert trainers["trainer-jetson"]["runtime"] == "nvidia"
    assert "jetson" in trainers["trainer-jetson"]["build"]["dockerfile"].lower()
    assert trainers["trainer-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_lint(path):
    ins = _instructions(path)
    froms = [rest.split()[0] for op, rest in ins if op == "FROM"]
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
    froms = [rest for op, rest in cpu if op == "FROM"]
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
    cuda = [rest for op, rest in _instructions(DOCKERFILES[1]) if op == "FROM"]
    assert all(f.startswith("pytorch/pytorch:") and "cuda" in f and "runtime" in f for f in cuda)
    jetson = [rest for op, rest in _instructions(DOCKERFILES[2]) if op == "FROM"]
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
def _sh(*cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return proc


class Hosts:
    """Network hosts made of namespaces: one bridge, one veth pair per host (eth0 inside), 10.213.<k>.0/24."""

    def __init__(self, names: list[str]) -> None:
        tag = f"{os.getpid() % 100000}"
        self.k = os.getpid() % 200 + 20
        self.bridge = f"esb{tag}"
        self.ns = {n: f"es{tag}-{n}" for n in names}
        self.ip = {n: f"10.213.{self.k}.{i + 2}" for i, n in enumerate(names)}
        self.veth = {n: f"esv{tag}{i}" for i, n in enumerate(names)}
        self.procs: list[subprocess.Popen] = []

    def up(self) -> None:
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "link", "set", self.bridge, "up")
        for n, ns in self.ns.items():
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", self.veth[n], "type", "veth", "peer", "name", f"{self.veth[n]}p")
            _sh("ip", "link", "set", f"{self.veth[n]}p", "netns", ns)
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", f"{self.veth[n]}p", "name", "eth0")
            _sh("ip", "link", "set", self.veth[n], "master", self.bridge)
            _sh("ip", "link", "set", self.veth[n], "up")
            _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.ip[n]}/24", "dev", "eth0")
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def popen(self, host: str, cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        out = open(log, "wb")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen(["ip", "netns", "exec", self.ns[host], *cmd], env=env, stdout=out,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        p._log = out  # type: ignore[attr-defined]
        self.procs.append(p)
        return p

    def run(self, host: str, cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns[host], *cmd], env=env, capture_output=True,
                              text=True, timeout=timeout)

    def down(self) -> list[str]:
        problems = []
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    problems.append(f"pid {p.pid} did not die")
            p._log.close()  # type: ignore[attr-defined]
        for n, ns in self.ns.items():
            for cmd in (["ip", "netns", "del", ns], ["ip", "link", "del", self.veth[n]]):
                r = _sh(*cmd, check=False)
                if r.returncode != 0 and "Cannot find" not in r.stderr and "No such" not in r.stderr \
                        and "not exist" not in r.stderr:
                    problems.append(f"{' '.join(cmd)}: {r.stderr.strip()}")
        _sh("ip", "link", "del", self.bridge, check=False)
        return problems


@pytest.fixture
def hosts():
    if os.geteuid() != 0:
        pytest.fail("the testbed behaviour test builds network namespaces and needs root (CI runs as root): "
                    "run it as root, e.g. `sudo .venv/bin/pytest tests/test_testbed.py`")
    if shutil.which("ip") is None:
        pytest.fail("the testbed behaviour test needs iproute2's `ip` (apt-get install iproute2)")
    h = Hosts(["broker", "producer", "trainer-0", "trainer-1"])
    try:
        h.up()
        yield h
    finally:
        problems = h.down()
        left = [ns for ns in h.ns.values() if ns in _sh("ip", "netns", "list").stdout]
        assert not left and not problems, f"left behind: {left} {problems}"


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


@pytest.mark.timeout(420)
def test_compose_services_train_across_network_hosts(hosts, tmp_path):
    t0 = time.monotonic()
    doc = _load(COMPOSE)
    svcs = doc["services"]
    run_id = f"tb{os.getpid()}{int(time.time()) % 100000}"
    cfg_dir, runs = tmp_path / "config", tmp_path / "runs"
    cfg_dir.mkdir()
    runs.mkdir()
    cfg = yaml.safe_load((ROOT / "examples" / "testbed.yaml").read_text())
    cfg.update(model={"name": "mlp"}, stop={"max_steps": 5, "max_time_s": 120, "target_accuracy": 0.99},
               eval={"every_s": 30})
    cfg["devices"]["rates"] = {"distribution": "constant", "rate": 200}
    (cfg_dir / "testbed.yaml").write_text(yaml.safe_dump(cfg))

    # compose's interpolation environment: defaults, except the run id (a fresh run on a fresh broker)
    cenv = {"RUN_ID": run_id}
    names = dict(hosts.ip)
    paths = {"/config": str(cfg_dir), "/runs": str(runs)}
    base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "EDGESTREAM_CACHE") if k in os.environ}
    base["PATH"] = f"{Path(sys.executable).parent}:{base.get('PATH', '/usr/bin:/bin')}"

    def command(service: str) -> list[str]:
        cmd = [_resolve(x, cenv, names, paths) for x in svcs[service]["command"]]
        return [EDGESTREAM, *cmd]

    def environment(service: str) -> dict[str, str]:
        return base | {k: _resolve(str(v), cenv, names, paths) for k, v in (svcs[service].get("environment") or {}).items()}

    # the broker host: compose's INSIDE listener, bound to and advertised as the broker host's address
    inside = dict(x.split("://", 1) for x in svcs["broker"]["environment"]["KAFKA_ADVERTISED_LISTENERS"].split(","))
    bhost, bport = inside["INSIDE"].split(":")
    assert bhost == "broker"
    bdir = tmp_path / "broker"
    start = hosts.run("broker", [EDGESTREAM, "broker", "start", "--host", hosts.ip["broker"], "--port", bport,
                                 "--data-dir", str(bdir)], base, timeout=150)
    assert start.returncode == 0, start.stderr[-2000:]
    assert start.stdout.strip() == f"{hosts.ip['broker']}:{bport}"
    t_broker = time.monotonic() - t0
    try:
        # another host cannot use its own loopback for the broker: the address really is the broker host's
        probe = hosts.run("producer", [sys.executable, "-c", f"import socket; socket.create_connection(('127.0.0.1', {bport}), 2)"],
                          base, timeout=20)
        assert probe.returncode != 0

        producer = hosts.popen("producer", command("producer"), environment("producer"), tmp_path / "producer.out")
        trainers = {r: hosts.popen(f"trainer-{r}", command(f"trainer-{r}"), environment(f"trainer-{r}"),
                                   tmp_path / f"trainer-{r}.out") for r in (0, 1)}
        for r, p in trainers.items():
            try:
                rc = p.wait(timeout=240)
            except subprocess.TimeoutExpired:
                rc = None
            assert rc == 0, f"trainer-{r} exit {rc}:\n{(tmp_path / f'trainer-{r}.out').read_text()[-3000:]}"
        t_train = time.monotonic() - t0
        assert producer.poll() is None, (tmp_path / "producer.out").read_text()[-2000:]
        os.killpg(producer.pid, signal.SIGTERM)
        assert producer.wait(timeout=60) == 0, (tmp_path / "producer.out").read_text()[-2000:]
        summary = json.loads((tmp_path / "producer.out").read_text().strip().splitlines()[-1])
        assert summary["delivered"] > 0 and summary["failed"] == 0

        # the collect step of the compose file writes the run directory from the rank files
        col = hosts.run("trainer-0", command("collect"), environment("collect"), timeout=120)
        assert col.returncode == 0, col.stderr[-2000:]
    finally:
        stop = hosts.run("broker", [EDGESTREAM, "broker", "stop", "--data-dir", str(bdir)], base, timeout=60)
        assert stop.returncode == 0, stop.stderr
    run_dir = runs / f"testbed-{run_id}"
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
        assert f"bootstrap {hosts.ip['broker']}:{bport}" in log
    print(f"\nnetns testbed: broker up {t_broker:.1f} s, trained at {t_train:.1f} s, "
          f"total {time.monotonic() - t0:.1f} s", file=sys.stderr)


def test_collect_needs_rank_files(tmp_path):
    proc = subprocess.run([EDGESTREAM, "collect", str(tmp_path), "--config", str(ROOT / "examples" / "testbed.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no ranks/" in proc.stderr
