"""The managed local Apache Kafka broker: one KRaft node (broker + controller), by default on 127.0.0.1.

`LocalBroker` is used by the CLI (`edgestream broker start|status|stop`), by `make demo` and by the
test fixture. The data dir identifies an instance: it holds the KRaft storage, server.properties,
the broker's logs and `broker.json` (pid, ports, bootstrap), so two brokers with two dirs and two
ports run side by side, and a restart on the same dir keeps the data (and, when free, the ports).

`host` / `advertised_host` put the client listener on another address (a network namespace's, a
LAN interface, 0.0.0.0) and tell clients which address to connect back to: a client bootstraps on
any address that reaches the broker, then uses the advertised one for everything else. The
controller listener stays on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from edgestream.kafka import security as sec
from edgestream.kafka.jars import DEFAULT_KAFKA_VERSION, BrokerError, find_java, resolve_jars

STATE_FILE = "broker.json"
LOG4J = Path(__file__).with_name("log4j.properties")
#: Largest message the broker accepts: 16 MiB of sample or model payload plus batch overhead.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024 + 1024 * 1024


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something listens on (host, port) or the port cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port(avoid: set[int] | None = None) -> int:
    """An ephemeral port that is free right now (and not in `avoid`)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in (avoid or set()):
            return port


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _is_our_broker(pid: int, data_dir: Path) -> bool:
    """Guard against pid reuse: the process must be kafka.Kafka started on this data dir."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return pid_alive(pid)
    return "kafka.Kafka" in cmdline and str(data_dir) in cmdline


def _tcp_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def admin_answers(bootstrap: str, timeout: float = 5.0, security: dict | None = None) -> bool:
    """True when an AdminClient (with `security`'s client settings) gets cluster metadata from `bootstrap`
    within `timeout` seconds."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "socket.connection.setup.timeout.ms": 2000,
                         **(security or {})})
    try:
        md = admin.list_topics(timeout=timeout)
        return bool(md.brokers)
    except Exception:
        return False


def new_cluster_id() -> str:
    """A random KRaft cluster id, like Kafka's Uuid.randomUuid (never a leading '-')."""
    cluster_id = "-"
    while cluster_id.startswith("-"):
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster_id


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log written)"


class StateFile:
    """An instance's facts (pid, ports, bootstrap, ...) in one JSON file of its data dir, replaced atomically."""

    state_file = STATE_FILE
    data_dir: Path

    @property
    def state_path(self) -> Path:
        return self.data_dir / self.state_file

    def read_state(self) -> dict:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}

    def _write_state(self, **fields) -> None:
        state = self.read_state() | fields
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_path)


class LocalBroker(StateFile):
    """A single-node Kafka broker (KRaft, combined broker+controller), its client listener on `host`.

    data_dir None: a temporary dir removed by stop(). port None: the port recorded in the data dir's
    state (a restart), else a free ephemeral port. host: the address the client listener binds
    (default 127.0.0.1; 0.0.0.0 for every interface); advertised_host: the address clients are told
    to connect to (default: host, or 127.0.0.1 when host is 0.0.0.0). Use as a context manager, or
    start()/stop().
    """

    def __init__(self, data_dir: str | Path | None = None, port: int | None = None,
                 kafka_version: str = DEFAULT_KAFKA_VERSION, heap: str = "512m", log=None,
                 host: str = "127.0.0.1", advertised_host: str | None = None, security: str | None = None) -> None:
        self.host = host
        # --security (edgestream.kafka.security): None = what the data dir was started with, else "none"
        self.security = sec.check_mode(security) if security is not None else None
        self.internal_port: int | None = None
        self.advertised_host = advertised_host or ("127.0.0.1" if host in ("0.0.0.0", "") else host)
        self._temp = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="edgestream-broker-") if data_dir is None else data_dir).resolve()
        self.port = port
        self.kafka_version = kafka_version
        self.heap = heap
        self.controller_port: int | None = None
        self.pid: int | None = None
        self._proc: subprocess.Popen | None = None
        self._log = log or (lambda msg: None)

    # ------------------------------------------------------------------ state
    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise BrokerError("the broker has no port yet: start() it first")
        return f"{self.advertised_host}:{self.port}"

    def running_pid(self) -> int | None:
        """The pid of this dir's broker when it is alive, else None."""
        pid = self.read_state().get("pid")
        if pid and pid_alive(pid) and _is_our_broker(pid, self.data_dir):
            return pid
        return None

    def status(self) -> dict:
        """{'running', 'answering', 'pid', 'bootstrap', 'data_dir', 'kafka_version'} for this data dir."""
        state = self.read_state()
        pid = self.running_pid()
        bootstrap = state.get("bootstrap")
        mode = state.get("security") or "none"
        return {
            "running": pid is not None,
            "answering": bool(pid and bootstrap and admin_answers(bootstrap, timeout=5,
                                                                  security=self._admin_settings(mode))),
            "security": mode,
            "pid": pid,
            "bootstrap": bootstrap,
            "data_dir": str(self.data_dir),
            "kafka_version": state.get("kafka_version"),
        }

    # ------------------------------------------------------------------ start
    def _server_properties(self) -> Path:
        props = self._properties()
        if self.security == "sasl-ssl":
            props = sec.server_properties(props, self.data_dir, host=self.host, advertised_host=self.advertised_host,
                                          port=self.port, internal_port=self.internal_port)
        path = self.data_dir / "server.properties"
        sec.write_private(path, "".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def _admin_settings(self, mode: str | None = None) -> dict:
        """Client settings of this broker's super user ({} for a PLAINTEXT broker)."""
        mode = mode or self.security or self.read_state().get("security") or "none"
        return sec.client_settings(self.data_dir, sec.ADMIN_USER) if mode == "sasl-ssl" else {}

    def _prepare_security(self, java: str, state: dict) -> None:
        """The security mode (--security, else the data dir's), its files and the internal listener's port."""
        was = state.get("security") or "none"
        formatted = (self.data_dir / "kraft" / "meta.properties").exists()
        if self.security is None:
            self.security = was if formatted else "none"
        if formatted and self.security != was:
            raise BrokerError(f"{self.data_dir} holds a broker started with --security {was}: start it with the "
                              f"same, or use another --data-dir")
        if self.security == "sasl-ssl":
            sec.prepare(self.data_dir, java, self.host, self.advertised_host)
            iport = state.get("internal_port")
            self.internal_port = iport if iport and iport not in (self.port, self.controller_port) \
                and not port_in_use(iport) else free_port({self.port, self.controller_port})

    def _properties(self) -> dict[str, str]:
        """server.properties of this node (edgestream.kafka.cluster's nodes change the quorum and replication)."""
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.advertised_host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir / "kraft"),
            # fit for tests and a single node
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "message.max.bytes": str(MAX_MESSAGE_BYTES),
            "replica.fetch.max.bytes": str(MAX_MESSAGE_BYTES),
            "socket.request.max.bytes": str(128 * 1024 * 1024),
            "num.network.threads": "3",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "log.retention.hours": "168",
            "log.retention.check.interval.ms": "300000",
        }

    def _format_storage(self, java: str, cp: str, props: Path) -> None:
        if (self.data_dir / "kraft" / "meta.properties").exists():
            return  # restart: keep the data
        cluster_id = self._cluster_id()
        tool = ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", f"--config={props}"]
        argfile = sec.format_argfile(self.data_dir, tool) if self.security == "sasl-ssl" else None
        try:  # a secured broker's SCRAM users are added here, their passwords in a 0600 argument file
            proc = subprocess.run([java, "-Xmx256m", f"-Dlog4j.configuration=file:{LOG4J}",
                                   f"-Dkafka.logs.dir={self.data_dir}", "-cp", cp,
                                   *([f"@{argfile}"] if argfile else tool)], capture_output=True, text=True)
        finally:
            if argfile is not None:
                argfile.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise BrokerError(f"formatting KRaft storage in {self.data_dir} failed (exit {proc.returncode}):\n"
                              + "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:]))
        self._write_state(cluster_id=cluster_id)

    def _cluster_id(self) -> str:
        """The KRaft cluster id to format with: a new one (a cluster's nodes share theirs)."""
        return new_cluster_id()

    def start(self, timeout: float = 120.0) -> LocalBroker:
        """Start the broker and wait until an AdminClient answers; BrokerError says why it could not."""
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the broker process in the background (ports chosen, storage formatted); wait_ready() waits."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        pid = self.running_pid()
        if pid is not None:
            state = self.read_state()
            raise BrokerError(f"a broker from {self.data_dir} is already running (pid {pid}, "
                              f"bootstrap {state.get('bootstrap')}); stop it first")
        java = find_java()
        cp = str(resolve_jars(self.kafka_version, log=self._log) / "*")
        self._choose_ports(self.read_state())
        self._prepare_security(java, self.read_state())
        props = self._server_properties()
        self._format_storage(java, cp, props)
        with open(self.data_dir / "broker.out", "ab") as out:
            self._proc = subprocess.Popen(self._command(java, cp, props), stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.data_dir)
        self.pid = self._proc.pid
        self._write_state(pid=self.pid, port=self.port, controller_port=self.controller_port,
                          bootstrap=self.bootstrap, kafka_version=self.kafka_version, started_at=time.time(),
                          host=self.host, advertised_host=self.advertised_host, security=self.security,
                          internal_port=self.internal_port)

    def _choose_ports(self, state: dict) -> None:
        """The client port (given, else the recorded one when free, else a free one) and the controller port."""
        if self.port is None:
            self.port = state.get("port") if state.get("port") and not port_in_use(state["port"], self.host) \
                else free_port()
        if port_in_use(self.port, self.host):
            raise BrokerError(f"port {self.port} is in use (another broker or program listens on it): "
                              f"choose a free one with --port")
        cport = state.get("controller_port")
        self.controller_port = cport if cport and cport != self.port and not port_in_use(cport) \
            else free_port({self.port})

    def _command(self, java: str, cp: str, props: Path) -> list[str]:
        return [java, "-Xms128m", f"-Xmx{self.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
                f"-Dlog4j.configuration=file:{LOG4J}", f"-Dkafka.logs.dir={self.data_dir}",
                "-cp", cp, "kafka.Kafka", str(props)]

    def wait_ready(self, timeout: float = 120.0) -> LocalBroker:
        """Wait until the launched broker answers an AdminClient; BrokerError (and the broker stopped) if not."""
        out_path = self.data_dir / "broker.out"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._write_state(pid=None)
                log = self.data_dir / "server.log"
                raise BrokerError(f"the Kafka broker exited during startup (exit {self._proc.returncode}); "
                                  f"last lines of {log}:\n{_tail(log)}\n--- {out_path}:\n{_tail(out_path, 15)}")
            if _tcp_open(self.port, self._connect_host) and admin_answers(self.bootstrap, timeout=2,
                                                                          security=self._admin_settings()):
                return self
            time.sleep(0.2)
        self.stop()
        raise BrokerError(f"the Kafka broker did not answer on {self.bootstrap} within {timeout:.0f} s; "
                          f"last lines of its log:\n{_tail(self.data_dir / 'server.log')}")

    @property
    def _connect_host(self) -> str:
        """Where this machine reaches the client listener (0.0.0.0 binds every interface, 127.0.0.1 among them)."""
        return "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host

    # ------------------------------------------------------------------ stop
    def stop(self, timeout: float = 30.0) -> bool:
        """Stop gracefully (SIGTERM), then by pid (SIGKILL) after `timeout`. True if one was running."""
        pid = self.running_pid() or (self._proc.pid if self._proc and self._proc.poll() is None else None)
        was_running = pid is not None
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._alive(pid):
                time.sleep(0.1)
            if self._alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                while self._alive(pid):
                    time.sleep(0.05)
        if self.state_path.exists():
            self._write_state(pid=None, stopped_at=time.time())
        self.pid = None
        if self._temp:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return was_running

    def _alive(self, pid: int) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            return self._proc.poll() is None
        return pid_alive(pid)

    def rss_bytes(self) -> int | None:
        """Resident memory of the broker process (Linux /proc), for the closing-note figures."""
        pid = self.running_pid()
        if pid is None:
            return None
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return None

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
