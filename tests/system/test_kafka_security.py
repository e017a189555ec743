"""The managed broker secured (issue 31, item 4): `edgestream broker start --security sasl-ssl` (SCRAM-SHA-512 over
TLS, the CA and keystores made with keytool in the data dir), a run end to end over it, a wrong password and an
untrusted certificate each one line within seconds, and a run without the right to create topics (StandardAuthorizer
ACLs; `kafka.topics.create: false` on topics an administrator provisioned).

One secured broker for the module, started and stopped here through the CLI (the suite's session broker stays
PLAINTEXT).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from factories import write_cfg
from support.runs import CLI, HANG_S

from edgestream.kafka import security as sec
from edgestream.kafka.admin import wait_for_broker
from edgestream.kafka.broker import LocalBroker, free_port
from edgestream.kafka.clients import CLIENT_LOGGER
from edgestream.kafka.security import KafkaRefused
from edgestream.kafka.topic_provision import run_topics
from edgestream.launch.command import SECRET_FD_ENV

#: a run that hangs or waits out an outage budget runs past this; a refusal ends long before
REFUSAL_LIMIT_S = 90


class Secured:
    def __init__(self, data_dir: Path, bootstrap: str, start_err: str) -> None:
        self.data_dir, self.bootstrap, self.start_err = data_dir, bootstrap, start_err

    def settings(self, user: str = sec.CLIENT_USER) -> dict:
        return sec.client_settings(self.data_dir, user)

    def passwords(self) -> list[bytes]:
        return [sec.password(self.data_dir, u).encode() for u in (sec.ADMIN_USER, sec.CLIENT_USER)]

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOGGER,
                            **self.settings(sec.ADMIN_USER)})


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Secured:
    data_dir = tmp_path_factory.mktemp("secured-broker")
    port = free_port()
    try:
        proc = subprocess.run([*CLI, "broker", "start", "--security", "sasl-ssl", "--data-dir", str(data_dir),
                               "--port", str(port)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        yield Secured(data_dir, proc.stdout.strip(), proc.stderr)
    finally:
        LocalBroker(data_dir).stop()


def grant(secured: Secured, run: str, operations: list[AclOperation], group_operations: list[AclOperation]) -> None:
    """The admin allows user app `operations` on topics and `group_operations` on consumer groups named `run.*`."""
    principal = f"User:{sec.CLIENT_USER}"
    acls = [AclBinding(ResourceType.TOPIC, f"{run}.", ResourcePatternType.PREFIXED, principal, "*", op,
                       AclPermissionType.ALLOW) for op in operations]
    acls += [AclBinding(ResourceType.GROUP, f"{run}.", ResourcePatternType.PREFIXED, principal, "*", op,
                        AclPermissionType.ALLOW) for op in group_operations]
    admin = secured.admin()  # held until the futures are done
    for fut in admin.create_acls(acls, request_timeout=30).values():
        fut.result()


def start_run(cfg: Path, secured: Secured, out: Path, run_id: str, secrets_file: Path | None) -> subprocess.Popen:
    """`edgestream run` over the secured broker; the password (if any) handed over on a descriptor, as
    `broker start` says (EDGESTREAM_KAFKA_SECRETS_FD)."""
    env = dict(os.environ)
    fd = os.open(secrets_file, os.O_RDONLY) if secrets_file is not None else None
    if fd is not None:
        env[SECRET_FD_ENV] = str(fd)
    try:
        return subprocess.Popen([*CLI, "run", str(cfg), "--engine", "local", "--bootstrap", secured.bootstrap,
                                 "--quiet", "--out", str(out), "--run-id", run_id], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, pass_fds=(fd,) if fd is not None else ())
    finally:
        if fd is not None:
            os.close(fd)


def client_cfg(tmp_path: Path, name: str, secured: Secured, *, max_steps: int = 30, **client) -> Path:
    kafka_client = {**sec.client_settings(secured.data_dir, with_password=False), "sasl.password": "***", **client}
    return write_cfg(tmp_path / f"{name}.yaml", name, max_steps=max_steps, runtime={"kafka_client": kafka_client})


def watch_children(proc: subprocess.Popen, run_dir: Path, secrets: list[bytes]) -> int:
    """While the run runs: the command line and environment of every child it started hold no secret.
    Returns how many children were looked at."""
    seen: set[int] = set()
    deadline = time.monotonic() + HANG_S
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            pids = json.loads((run_dir / "pids.json").read_text())
        except (OSError, ValueError):
            pids = {}
        for pid in [pids.get("producer"), *(pids.get("trainers") or {}).values(), pids.get("ps")]:
            if not pid:
                continue
            try:
                blobs = [Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/environ").read_bytes()]
            except OSError:
                continue
            assert not any(s in b for s in secrets for b in blobs), pid
            seen.add(pid)
        time.sleep(0.2)
    return len(seen)


def leaked(root: Path, secrets: list[bytes], skip: Path | None = None) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and (skip is None or skip not in p.parents)
            and any(s in p.read_bytes() for s in secrets)]


def test_broker_start_prints_the_client_settings_and_status_names_the_security(secured):
    """The settings a run needs on stderr (the password's file, never the password); the CA, keystores and
    passwords in DATA_DIR/security, 0600; `broker status` names the mode; no password outside its files."""
    d = secured.data_dir / "security"
    lines = secured.start_err.splitlines()
    for want in ["security: SASL_SSL, SCRAM-SHA-512 over TLS; a run's client settings (runtime.kafka_client):",
                 "  security.protocol: SASL_SSL", "  sasl.mechanism: SCRAM-SHA-512", "  sasl.username: app",
                 f"  ssl.ca.location: {d / 'ca.crt'}",
                 f'  sasl.password: "***"   # the value is in {d / "app.password"} (0600); hand it over on a '
                 "descriptor, never in argv:",
                 f"  EDGESTREAM_KAFKA_SECRETS_FD=3 edgestream run CONFIG --engine local --bootstrap "
                 f"{secured.bootstrap} 3<{d / 'app.secrets.json'}"]:
        assert want in lines, secured.start_err
    assert not any(s.decode() in secured.start_err for s in secured.passwords())
    assert oct(d.stat().st_mode & 0o777) == "0o700"
    files = {p.name: oct(p.stat().st_mode & 0o777) for p in d.iterdir()}
    assert {"ca.crt", "ca.p12", "broker.p12", "truststore.p12", "app.password", "admin.password"} <= set(files)
    assert set(files.values()) == {"0o600"}, files
    assert oct((secured.data_dir / "server.properties").stat().st_mode & 0o777) == "0o600"
    assert leaked(secured.data_dir, secured.passwords(), skip=d) == []  # not in logs, properties, state, storage
    store = (d / "store.password").read_text().strip().encode()  # the keystores': in server.properties only
    assert leaked(secured.data_dir, [store], skip=d) == [secured.data_dir / "server.properties"]
    pid = json.loads((secured.data_dir / "broker.json").read_text())["pid"]
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"kafka.Kafka" in cmdline and not any(s in cmdline for s in [*secured.passwords(), store])

    status = subprocess.run([*CLI, "broker", "status", "--data-dir", str(secured.data_dir)], capture_output=True,
                            text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert status.stdout.strip().endswith("; security: SASL_SSL, SCRAM-SHA-512 over TLS"), status.stdout
    assert "answering" in status.stdout and "NOT answering" not in status.stdout
    st = json.loads(subprocess.run([*CLI, "broker", "status", "--data-dir", str(secured.data_dir), "--json"],
                                   capture_output=True, text=True, timeout=60).stdout)
    assert st["security"] == "sasl-ssl" and st["answering"] is True
    # the client listener refuses PLAINTEXT clients
    with pytest.raises(Exception):  # noqa: B017 -- no answer of any kind
        AdminClient({"bootstrap.servers": secured.bootstrap, "logger": CLIENT_LOGGER}).list_topics(timeout=3)


@pytest.mark.timeout(900)
def test_a_run_end_to_end_over_sasl_ssl(secured, run_prefix, tmp_path):
    """A 2-device ddl run on digits/mlp as user app (allowed everything on its own topics and groups), its
    password handed over on a descriptor: it trains to the end; no child's command line or environment, no
    log and no file of the run directory holds a password."""
    grant(secured, f"{run_prefix}-ddl-r1", [AclOperation.ALL], [AclOperation.ALL])
    cfg = client_cfg(tmp_path, run_prefix, secured)
    out = tmp_path / "runs"
    proc = start_run(cfg, secured, out, "r1", secured.data_dir / "security" / "app.secrets.json")
    try:
        children = watch_children(proc, out / f"{run_prefix}-ddl-r1", secured.passwords())
        out_text, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert children >= 3  # the producer and two trainers
    summary = json.loads((out / f"{run_prefix}-ddl-r1" / "summary.json").read_text())
    assert summary["device_steps"] == {"0": 30, "1": 30}, summary["device_steps"]
    assert summary["producer"]["failed"] == 0
    assert not any(s.decode() in out_text + err for s in secured.passwords())
    assert leaked(out, secured.passwords()) == []
    assert yaml.safe_load((out / f"{run_prefix}-ddl-r1" / "config.yaml").read_text())[
        "runtime"]["kafka_client"]["sasl.password"] == "***"


def refused_run(secured: Secured, tmp_path: Path, name: str, **client) -> tuple[int, str]:
    cfg = write_cfg(tmp_path / f"{name}.yaml", name, max_steps=5,
                    runtime={"kafka_client": {**secured.settings(), **client}})
    proc = start_run(cfg, secured, tmp_path / "runs", "r1", None)
    try:
        _, err = proc.communicate(timeout=REFUSAL_LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the run did not end within {REFUSAL_LIMIT_S} s: {err}")
    return proc.returncode, err


def test_a_wrong_password_is_one_line(secured, run_prefix, tmp_path):
    """A wrong password ends the run at once with one line naming the address and the failed authentication
    (not the outage wait, not a traceback); the first Kafka call (wait_for_broker) raises the same line, and a
    trainer started by hand ends with it."""
    code, err = refused_run(secured, tmp_path, run_prefix, **{"sasl.password": "wrong-password-1234"})
    line = (f"Kafka at {secured.bootstrap} refused the client: authentication failed (SASL authentication error: "
            "Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-512); check runtime.kafka_client sasl.username / sasl.password")
    assert code == 1, err
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [f"error: {line}"], err
    assert "Traceback" not in err and "waiting for Kafka" not in err and "wrong-password-1234" not in err
    with pytest.raises(KafkaRefused) as caught:
        wait_for_broker(secured.bootstrap, {**secured.settings(), "sasl.password": "wrong-password-1234"})
    assert str(caught.value) == line
    # a trainer started by hand (the docker testbed's way): the same line, not the outage wait
    train = subprocess.run([*CLI, "train", str(tmp_path / f"{run_prefix}.yaml"), "--run-id", "r1", "--bootstrap",
                            secured.bootstrap], capture_output=True, text=True, timeout=REFUSAL_LIMIT_S)
    assert train.returncode == 1, train.stderr
    assert [ln for ln in train.stderr.splitlines() if ln.startswith("error:")] == [f"error: {line}"], train.stderr


def test_an_untrusted_certificate_is_one_line(secured, run_prefix, tmp_path):
    """A CA the broker's certificate is not signed by: one line naming the address and the failed certificate
    verification, at once."""
    other = tmp_path / "other-ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "k.pem"),
                    "-out", str(other), "-days", "2", "-subj", "/CN=not the broker's CA"], check=True,
                   capture_output=True)
    code, err = refused_run(secured, tmp_path, run_prefix, **{"ssl.ca.location": str(other)})
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 1, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: Kafka at {secured.bootstrap}: TLS certificate verification failed ("), lines
    assert "certificate verify failed" in lines[0]
    assert lines[0].endswith("); runtime.kafka_client ssl.ca.location must name the CA that signed the broker's "
                             "certificate"), lines
    assert "Traceback" not in err and "waiting for Kafka" not in err


#: what user app needs on a run's topics and consumer groups when an administrator provisions the topics
RUN_TOPIC_OPERATIONS = [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS]
RUN_GROUP_OPERATIONS = [AclOperation.READ, AclOperation.DESCRIBE]


def provision(secured: Secured, run: str, devices: int) -> list[str]:
    """The admin creates every topic the run uses (the meta topic compacted), as `kafka.topics.create: false`
    expects them."""
    topics = run_topics(run, devices)
    new = [NewTopic(name, num_partitions=parts, replication_factor=1,
                    config={"cleanup.policy": "compact"} if name.endswith(".meta") else {})
           for name, parts in topics.items()]
    admin = secured.admin()
    for fut in admin.create_topics(new, operation_timeout=30).values():
        fut.result()
    return sorted(topics)


@pytest.mark.timeout(900)
def test_a_run_without_the_right_to_create_topics(secured, run_prefix, tmp_path):
    """User app may read, write and describe the run's topics and groups but not create topics: with
    kafka.topics.create false the run trains on the topics the admin provisioned; the same run with create
    true ends with one line saying it lacks the right to create topics, pointing at kafka.topics.create."""
    provided = provision(secured, f"{run_prefix}-ddl-r1", 2)
    for run_id in ("r1", "r2"):
        grant(secured, f"{run_prefix}-ddl-{run_id}", RUN_TOPIC_OPERATIONS, RUN_GROUP_OPERATIONS)
    secrets = secured.data_dir / "security" / "app.secrets.json"
    raw = yaml.safe_load(client_cfg(tmp_path, run_prefix, secured).read_text())
    raw["kafka"] = {"topics": {"create": False}}
    cfg = tmp_path / "provisioned.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    proc = start_run(cfg, secured, tmp_path / "runs", "r1", secrets)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    summary = json.loads((tmp_path / "runs" / f"{run_prefix}-ddl-r1" / "summary.json").read_text())
    assert summary["device_steps"] == {"0": 30, "1": 30}, summary["device_steps"]
    admin = secured.admin()
    assert sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(f"{run_prefix}-ddl-r1.")) == provided

    raw["kafka"] = {"topics": {"create": True}}
    cfg.write_text(yaml.safe_dump(raw))
    proc = start_run(cfg, secured, tmp_path / "runs", "r2", secrets)
    out, err = proc.communicate(timeout=REFUSAL_LIMIT_S)
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert proc.returncode == 1, err
    assert lines == [f"error: run {run_prefix}-ddl-r2: user {sec.CLIENT_USER} may not create topics on "
                     f"{secured.bootstrap} (TOPIC_AUTHORIZATION_FAILED); have an administrator create the run's "
                     "topics (docs/runtime.md) and set kafka.topics.create: false"], err
    assert "Traceback" not in err
    assert not [t for t in admin.list_topics(timeout=30).topics if t.startswith(f"{run_prefix}-ddl-r2.")]
