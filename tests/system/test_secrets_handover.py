"""Secrets never in a child's environment (issue 32, item 4): the orchestrator hands runtime.kafka_client's
secret values to each child on an inherited pipe (EDGESTREAM_KAFKA_SECRETS_FD), never in an environment
variable, a command line or a file.

The broker is real and checks the password: a LocalBroker of this module with a SASL_PLAINTEXT (PLAIN)
listener besides its PLAINTEXT one, so a run that trains proves every child authenticated with the real
value, while /proc/<pid>/environ and /proc/<pid>/cmdline of every process of every child's group (trainers,
producer, parameter server) hold no trace of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from factories import write_cfg
from support.runs import HANG_S, finish, start

from edgestream.kafka import LocalBroker
from edgestream.kafka.broker import free_port
from edgestream.kafka.clients import CLIENT_LOGGER
from edgestream.launch.command import SECRET_ENV, SECRET_FD_ENV

USER = "edge"
SECRET = "pw-Secret-7391-xyzzy"


class SaslBroker(LocalBroker):
    """The managed broker plus a SASL_PLAINTEXT listener (PLAIN, one user) on `sasl_port`."""

    sasl_port: int | None = None

    def _server_properties(self) -> Path:
        path = super()._server_properties()
        props = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        self.sasl_port = self.sasl_port or free_port({self.port, self.controller_port})
        props["listeners"] += f",SASL://127.0.0.1:{self.sasl_port}"
        props["advertised.listeners"] += f",SASL://127.0.0.1:{self.sasl_port}"
        props["listener.security.protocol.map"] += ",SASL:SASL_PLAINTEXT"
        props["sasl.enabled.mechanisms"] = "PLAIN"
        props["listener.name.sasl.plain.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{USER}" password="{SECRET}" user_{USER}="{SECRET}";')
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path


def _client(password: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": USER,
            "sasl.password": password}


def _admin(bootstrap: str, password: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER, **_client(password)})


@pytest.fixture(scope="module")
def sasl_bootstrap(tmp_path_factory) -> str:
    broker = SaslBroker(tmp_path_factory.mktemp("sasl-broker"))
    broker.start()
    try:
        bootstrap = f"127.0.0.1:{broker.sasl_port}"
        assert _admin(bootstrap, SECRET).list_topics(timeout=30).brokers, "the SASL listener does not answer"
        with pytest.raises(KafkaException):  # the broker really checks the password
            _admin(bootstrap, "wrong").list_topics(timeout=5)
        yield bootstrap
    finally:
        broker.stop()


def _group(pid: int) -> list[int]:
    """The processes of process group `pid` (a child and whatever it started)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[2]) == pid:
                out.append(int(d.name))
    return out


def _wait_children(run_dir: Path, proc, names: tuple[str, ...], steps: int) -> dict:
    """pids.json once every child in `names` runs and each trainer logged `steps` steps."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the orchestrator ended early ({proc.returncode}): {proc.stderr.read()}")
        try:
            pids = json.loads((run_dir / "pids.json").read_text())
        except (OSError, ValueError):
            pids = {}
        ranks = [run_dir / "ranks" / f"{r}.jsonl" for r in pids.get("trainers", {})]
        if pids and all(pids.get(n) for n in names) and ranks and all(
                f.exists() and f.read_text().count('"kind":"step"') >= steps for f in ranks):
            return pids
        time.sleep(0.2)
    pytest.fail("the children did not start training")


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _assert_clean(children: list[int], server: int | None) -> None:
    """No process of these children's groups, nor the fork server they came from (edgestream/forkserver.py), holds
    the secret in its environment or command line. Each child got its handover: a child forked from the
    server (/proc/<pid>/environ shows the server's environment as it started) got the pipe with its
    request; a child started as a new process holds the descriptor number in its environment."""
    seen = 0
    for child in children:
        for pid in _group(child) + ([server] if server else []):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:  # it exited meanwhile
                continue
            assert SECRET.encode() not in environ and SECRET.encode() not in cmdline, pid
            assert f"{SECRET_ENV}=".encode() not in environ and f"{SECRET_FD_ENV}=".encode() not in cmdline, pid
            if pid == child:
                assert (_ppid(pid) == server if server else f"{SECRET_FD_ENV}=".encode() in environ), pid
                seen += 1
    assert seen == len(children), (seen, children)


def _restarted_ps(run_dir: Path, proc, old: int) -> int:
    """The parameter server's pid once the orchestrator restarted it after `old` was killed."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the orchestrator ended early ({proc.returncode}): {proc.stderr.read()}")
        with contextlib.suppress(OSError, ValueError):
            pid = json.loads((run_dir / "pids.json").read_text()).get("ps")
            if pid and pid != old:
                return pid
        time.sleep(0.1)
    pytest.fail("the parameter server was not restarted")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("algorithm", ["ddl", "ssp"])
def test_no_child_holds_the_secret_in_its_environment_or_command_line(sasl_bootstrap, run_prefix, tmp_path,
                                                                     algorithm):
    """Every child of a run against a broker that checks the password: the trainers, the producer and, for
    a parameter-server algorithm, the parameter server, also once restarted after a SIGKILL (a new pipe)."""
    extra = {"algorithm": {"name": "ssp", "params": {"s": 2}, "batch": {"policy": "fixed", "size": 16}}} \
        if algorithm == "ssp" else {}
    # ssp: long enough that the restarted parameter server is still serving when it is looked at (at 60 steps a fast
    # host had the run end, and the new server with it, as it was restarted)
    steps = 300 if algorithm == "ssp" else 60
    cfg = write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=steps, runtime={"kafka_client": _client(SECRET)},
                    **extra)
    out = tmp_path / "runs"
    run_dir = out / f"{run_prefix}-{algorithm}-r1"
    proc = start(cfg, sasl_bootstrap, out=out)
    try:
        names = ("producer", "ps") if algorithm == "ssp" else ("producer",)
        pids = _wait_children(run_dir, proc, names, 2)
        children = [pids["producer"], *pids["trainers"].values(), *([pids["ps"]] if pids.get("ps") else [])]
        assert len(children) == (4 if algorithm == "ssp" else 3)
        assert pids.get("fork_server"), pids  # the run forks its children from a warm server
        _assert_clean(children, pids["fork_server"])
        assert SECRET.encode() not in Path(f"/proc/{proc.pid}/environ").read_bytes()  # the orchestrator's own
        if algorithm == "ssp":  # a restarted parameter server gets the secrets again, the same way
            os.kill(pids["ps"], signal.SIGKILL)
            _assert_clean([_restarted_ps(run_dir, proc, pids["ps"])], pids["fork_server"])
        code, _, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=HANG_S)
    assert code == 0, err  # every child authenticated with the real password: the run trained to its end
    summary = json.loads((run_dir / "summary.json").read_text())
    done = summary["device_steps"]
    if algorithm == "ssp":  # the run stops when a worker reaches max_steps; the other is within SSP's bound: the
        # fastest began its last step at clock steps - 1, allowed while the slowest's clock was >= steps - 1 - s (s = 2)
        assert sorted(done) == ["0", "1"] and max(done.values()) == steps and min(done.values()) >= steps - 1 - 2, done
    else:
        assert done == {"0": steps, "1": steps}, done
    assert summary["producer"]["delivered"] > 0 and summary["producer"]["failed"] == 0
    if algorithm == "ssp":
        assert summary["ps"]["restarts"] == 1 and summary["ps"]["status"] == "finished", summary["ps"]
    leaked = [p for p in out.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaked, leaked
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["runtime"]["kafka_client"]["sasl.password"] == "***"


def test_a_hand_started_child_reads_the_secrets_from_a_descriptor(tmp_path, run_prefix, monkeypatch, capfd):
    """`edgestream train|produce|ps` started by hand: the values on EDGESTREAM_KAFKA_SECRETS_FD (a pipe or a
    file, read to its end and closed) replace the config's masks; EDGESTREAM_KAFKA_SECRETS still works, with
    a warning line; a descriptor that is not open is one line naming it (exit 2)."""
    import typer

    from edgestream.launch.command import load_or_exit
    from edgestream.launch.procs import filled_pipe

    raw = yaml.safe_load(write_cfg(tmp_path / "c.yaml", run_prefix, max_steps=5).read_text())
    raw["runtime"] = {"kafka_client": {"sasl.username": "u", "sasl.password": "***"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    fd = filled_pipe(json.dumps({"sasl.password": SECRET}).encode())
    monkeypatch.setenv(SECRET_FD_ENV, str(fd))
    assert load_or_exit(tmp_path / "c.yaml").runtime.kafka_client["sasl.password"] == SECRET
    assert SECRET_FD_ENV not in os.environ
    with pytest.raises(OSError):
        os.fstat(fd)  # read and closed
    (tmp_path / "s.json").write_text(json.dumps({"sasl.password": "from-a-file"}))
    fd = os.open(tmp_path / "s.json", os.O_RDONLY)
    monkeypatch.setenv(SECRET_FD_ENV, str(fd))
    assert load_or_exit(tmp_path / "c.yaml").runtime.kafka_client["sasl.password"] == "from-a-file"
    capfd.readouterr()
    monkeypatch.setenv(SECRET_ENV, json.dumps({"sasl.password": "from-env"}))
    assert load_or_exit(tmp_path / "c.yaml").runtime.kafka_client["sasl.password"] == "from-env"
    assert SECRET_ENV not in os.environ
    warned = capfd.readouterr().err.splitlines()
    assert len(warned) == 1 and warned[0].startswith(f"warning: {SECRET_ENV}: secrets in the environment stay "
                                                     "readable in /proc/<pid>/environ"), warned
    monkeypatch.setenv(SECRET_FD_ENV, "97")  # not open
    with pytest.raises(typer.Exit) as exit_:
        load_or_exit(tmp_path / "c.yaml")
    assert exit_.value.exit_code == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{SECRET_FD_ENV}=97: cannot read"), lines
