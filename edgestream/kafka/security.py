"""The managed broker's security (`edgestream broker start --security sasl-ssl`), and how a client tells a
refusal (wrong password, untrusted certificate) from an outage.

`sasl-ssl`: the client listener speaks SASL_SSL with SCRAM-SHA-512; the broker's internal listeners
(inter-broker and KRaft controller) stay PLAINTEXT on 127.0.0.1, trusted as a super user (the broker's
host is the trust boundary). Everything lives in `<data dir>/security/` (folder 0700, files 0600):

* `ca.p12` / `ca.crt`: a local CA (keytool), its certificate in PEM for clients (`ssl.ca.location`);
* `broker.p12`: the broker's key and its certificate signed by that CA (subject alternative names: the
  listener's and advertised addresses, 127.0.0.1, localhost); `truststore.p12`: the CA, for Java clients;
* `store.password`: the stores' password; `<user>.password`: each SCRAM user's password; `<user>.secrets.json`:
  {"sasl.password": ...}, the file to hand a run over on EDGESTREAM_KAFKA_SECRETS_FD (docs/runtime.md).

Two SCRAM users are added when the storage is formatted (`kafka-storage format --add-scram`, its arguments
in a 0600 argument file, never on a command line): ADMIN_USER, the super user, and CLIENT_USER, an
application user with no rights until an administrator grants them (StandardAuthorizer; no ACL, no access).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from edgestream.kafka.jars import BrokerError

#: --security values of the managed broker
MODES = ("none", "sasl-ssl")
MECHANISM = "SCRAM-SHA-512"
ADMIN_USER = "admin"
CLIENT_USER = "app"
FOLDER = "security"
#: the listener name of the secured client listener (its protocol too)
LISTENER = "SASL_SSL"
#: the internal (inter-broker) listener, PLAINTEXT on 127.0.0.1
INTERNAL = "INTERNAL"
VALIDITY_DAYS = "3650"


def describe(mode: str | None) -> str:
    """How `broker status` names a security mode."""
    return "SASL_SSL, SCRAM-SHA-512 over TLS" if mode == "sasl-ssl" else "PLAINTEXT (no authentication, no TLS)"


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise BrokerError(f"--security: {mode!r} is not allowed; must be one of {', '.join(MODES)}")
    return mode


def folder(data_dir: Path) -> Path:
    return Path(data_dir) / FOLDER


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable and writable by its owner only (0600) from its creation on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def password(data_dir: Path, user: str) -> str:
    """The SCRAM password of `user` (read from its 0600 file)."""
    return (folder(data_dir) / f"{user}.password").read_text().strip()


def _hosts(host: str, advertised_host: str) -> list[str]:
    names = ["127.0.0.1", "localhost", advertised_host]
    if host not in ("0.0.0.0", ""):
        names.append(host)
    return sorted(set(names))


def _san(hosts: list[str]) -> str:
    def one(h: str) -> str:
        try:
            ipaddress.ip_address(h)
            return f"ip:{h}"
        except ValueError:
            return f"dns:{h}"
    return "SAN=" + ",".join(one(h) for h in hosts)


def _keytool(java: str, *args: str, cwd: Path) -> None:
    tool = Path(java).with_name("keytool")
    exe = str(tool) if tool.exists() else shutil.which("keytool")
    if exe is None:
        raise BrokerError("keytool (the JDK's) was not found next to java or on PATH: install a full JDK 17+")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise BrokerError(f"keytool {args[0]} failed (exit {proc.returncode}): "
                          + " ".join((proc.stdout + proc.stderr).split())[-400:])


def prepare(data_dir: Path, java: str, host: str, advertised_host: str) -> Path:
    """The security folder of `data_dir`, made once: passwords, the CA, the broker's keystore (made again when
    the addresses it must name change) and the truststore. Returns the folder."""
    sec = folder(data_dir)
    sec.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(sec, 0o700)
    for name in ("store", ADMIN_USER, CLIENT_USER):
        if not (sec / f"{name}.password").is_file():
            write_private(sec / f"{name}.password", secrets.token_urlsafe(24) + "\n")
    for user in (ADMIN_USER, CLIENT_USER):
        write_private(sec / f"{user}.secrets.json", json.dumps({"sasl.password": password(data_dir, user)}) + "\n")
    store = ["-storepass:file", "store.password"]
    if not (sec / "ca.p12").is_file():
        for stale in ("ca.crt", "broker.p12", "truststore.p12", "hosts.txt"):
            (sec / stale).unlink(missing_ok=True)
        _keytool(java, "-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048", "-validity", VALIDITY_DAYS,
                 "-dname", "CN=edgestream local CA", "-ext", "bc:c", "-keystore", "ca.p12", "-storetype", "PKCS12",
                 *store, cwd=sec)
        _keytool(java, "-exportcert", "-alias", "ca", "-keystore", "ca.p12", *store, "-rfc", "-file", "ca.crt",
                 cwd=sec)
    hosts = _hosts(host, advertised_host)
    recorded = (sec / "hosts.txt").read_text().split() if (sec / "hosts.txt").is_file() else None
    if recorded != hosts or not (sec / "broker.p12").is_file():
        (sec / "broker.p12").unlink(missing_ok=True)
        _keytool(java, "-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity",
                 VALIDITY_DAYS, "-dname", f"CN={advertised_host}", "-keystore", "broker.p12", "-storetype", "PKCS12",
                 *store, cwd=sec)
        _keytool(java, "-certreq", "-alias", "broker", "-keystore", "broker.p12", *store, "-file", "broker.csr",
                 cwd=sec)
        _keytool(java, "-gencert", "-alias", "ca", "-keystore", "ca.p12", *store, "-infile", "broker.csr", "-outfile",
                 "broker.crt", "-rfc", "-validity", VALIDITY_DAYS, "-ext", _san(hosts), cwd=sec)
        _keytool(java, "-importcert", "-alias", "ca", "-file", "ca.crt", "-keystore", "broker.p12", *store,
                 "-noprompt", cwd=sec)
        _keytool(java, "-importcert", "-alias", "broker", "-file", "broker.crt", "-keystore", "broker.p12", *store,
                 "-noprompt", cwd=sec)
        (sec / "broker.csr").unlink(missing_ok=True)
        write_private(sec / "hosts.txt", " ".join(hosts) + "\n")
    if not (sec / "truststore.p12").is_file():
        _keytool(java, "-importcert", "-alias", "ca", "-file", "ca.crt", "-keystore", "truststore.p12",
                 "-storetype", "PKCS12", *store, "-noprompt", cwd=sec)
    for path in sec.iterdir():
        os.chmod(path, 0o600)
    return sec


def server_properties(props: Mapping[str, str], data_dir: Path, *, host: str, advertised_host: str, port: int,
                      internal_port: int) -> dict[str, str]:
    """`props` (the PLAINTEXT broker's) with the client listener on SASL_SSL (SCRAM-SHA-512), an internal
    PLAINTEXT listener on 127.0.0.1 for inter-broker traffic, and the StandardAuthorizer (super user:
    ADMIN_USER and the internal listeners' ANONYMOUS). The result holds the stores' password: the file it
    goes to must be 0600."""
    sec = folder(data_dir)
    store_pw = (sec / "store.password").read_text().strip()
    controller = props["listeners"].split(",")[-1]  # CONTROLLER://127.0.0.1:<port>
    out = dict(props)
    out.update({
        "listeners": f"{LISTENER}://{host}:{port},{INTERNAL}://127.0.0.1:{internal_port},{controller}",
        "advertised.listeners": f"{LISTENER}://{advertised_host}:{port},{INTERNAL}://127.0.0.1:{internal_port}",
        "inter.broker.listener.name": INTERNAL,
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{INTERNAL}:PLAINTEXT,{LISTENER}:SASL_SSL",
        "sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.{LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(sec / "broker.p12"),
        "ssl.keystore.password": store_pw,
        "ssl.key.password": store_pw,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(sec / "truststore.p12"),
        "ssl.truststore.password": store_pw,
        "ssl.client.auth": "none",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN_USER};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    })
    return out


def format_argfile(data_dir: Path, args: list[str]) -> Path:
    """A 0600 java argument file (`java ... @file`) holding the StorageTool's `args` plus one --add-scram per
    user: the passwords never stand on a command line. The caller deletes it after the format."""
    lines = list(args)
    for user in (ADMIN_USER, CLIENT_USER):
        lines += ["--add-scram", f'"{MECHANISM}=[name={user},password={password(data_dir, user)}]"']
    path = folder(data_dir) / "format.args"
    write_private(path, "\n".join(lines) + "\n")
    return path


def client_settings(data_dir: Path, user: str = CLIENT_USER, *, with_password: bool = True) -> dict[str, str]:
    """runtime.kafka_client for `user` of the secured broker of `data_dir` (the password read from its file,
    or left out)."""
    conf = {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM, "sasl.username": user,
            "ssl.ca.location": str(folder(data_dir) / "ca.crt")}
    if with_password:
        conf["sasl.password"] = password(data_dir, user)
    return conf


def client_lines(data_dir: Path, bootstrap: str) -> list[str]:
    """What `broker start --security sasl-ssl` prints: the settings a run needs, and where its password is."""
    sec = folder(data_dir)
    lines = [f"security: {describe('sasl-ssl')}; a run's client settings (runtime.kafka_client):"]
    lines += [f"  {k}: {v}" for k, v in client_settings(data_dir, with_password=False).items()]
    lines += [f'  sasl.password: "***"   # the value is in {sec / (CLIENT_USER + ".password")} (0600); hand it over '
              "on a descriptor, never in argv:",
              f"  EDGESTREAM_KAFKA_SECRETS_FD=3 edgestream run CONFIG --engine local --bootstrap {bootstrap} "
              f"3<{sec / (CLIENT_USER + '.secrets.json')}",
              f"administrator (super user): sasl.username {ADMIN_USER}, password in "
              f"{sec / (ADMIN_USER + '.password')}; "
              f"user {CLIENT_USER} has no rights until granted (docs/runtime.md, 'Running without the right to "
              "create topics')"]
    return lines


# ---------------------------------------------------------------- refusals, as opposed to outages


class KafkaRefused(RuntimeError):
    """Kafka answered but refused this client (authentication failed, certificate not trusted): no wait cures
    it. The message is one line naming the address and what failed."""


def _detail(text: str) -> str:
    """librdkafka's error text without its connection prefix and timing ('(after 3ms in state AUTH_REQ)')."""
    text = re.sub(r"\s*\(after \d+ms in state [A-Z_]+\)", "", text)
    text = re.sub(r"^(sasl_ssl|ssl|sasl_plaintext)://[^ ]+: ", "", text, flags=re.IGNORECASE)
    text = re.sub(r", verify that ssl\.ca\.location is correctly configured.*$", "", text)  # our line says it
    return " ".join(text.split())


def refusal(err: KafkaError, bootstrap: str) -> str | None:
    """One line for an error that means Kafka refuses this client (None for anything else, e.g. an outage)."""
    code, text = err.code(), err.str()
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED) or "SASL authentication" in text:
        return (f"Kafka at {bootstrap} refused the client: authentication failed ({_detail(text)}); check "
                "runtime.kafka_client sasl.username / sasl.password")
    if code == KafkaError._SSL or "SSL handshake failed" in text or "certificate verify failed" in text:
        return (f"Kafka at {bootstrap}: TLS certificate verification failed ({_detail(text)}); "
                "runtime.kafka_client ssl.ca.location must name the CA that signed the broker's certificate")
    return None


class RefusalWatch:
    """A client's `error_cb` that remembers the first refusal; `check()` raises it as KafkaRefused."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.line: str | None = None

    def __call__(self, err: KafkaError) -> None:
        if self.line is None:
            self.line = refusal(err, self.bootstrap)

    def check(self) -> None:
        if self.line is not None:
            raise KafkaRefused(self.line)


def check_not_refused(bootstrap: str, security: Mapping[str, str] | None, timeout_s: float = 3.0) -> None:
    """KafkaRefused when Kafka at `bootstrap` refuses a client with these settings (a process started by
    hand with a wrong password or CA: one line, not an outage wait); returns at its first answer, or after
    `timeout_s` without one (an outage is the caller's to wait through). Nothing to check without SASL/TLS."""
    if str((security or {}).get("security.protocol", "PLAINTEXT")).upper() == "PLAINTEXT":
        return
    watch = RefusalWatch(bootstrap)
    admin = AdminClient({"bootstrap.servers": bootstrap, **security, "log_level": 0, "error_cb": watch})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if admin.list_topics(timeout=0.5).brokers:
                return
        except KafkaException:
            pass
        admin.poll(0)  # serves error_cb
        watch.check()


def denied(exc: Exception, run: str, bootstrap: str, client: Mapping[str, str], *, create: bool) -> str | None:
    """One line when preparing run `run`'s topics failed for want of a right (TOPIC_AUTHORIZATION_FAILED,
    CLUSTER_AUTHORIZATION_FAILED), else None: with `create` (kafka.topics.create true) the right to create
    topics, pointing at kafka.topics.create: false; without, the rights a run needs on provisioned topics."""
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is None or err.code() not in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                         KafkaError.CLUSTER_AUTHORIZATION_FAILED):
        return None
    who = f"user {client['sasl.username']}" if client.get("sasl.username") else "this client"
    if create:
        return (f"run {run}: {who} may not create topics on {bootstrap} ({err.name()}); have an administrator "
                "create the run's topics (docs/runtime.md) and set kafka.topics.create: false")
    return (f"run {run}: {who} may not describe the run's topics on {bootstrap} ({err.name()}); an administrator "
            f"grants it Read, Write, Describe and DescribeConfigs on topics and Read, Describe on groups prefixed "
            f"'{run}.' (docs/runtime.md)")
