"""Session-scoped Kafka for the suite: EDGESTREAM_BOOTSTRAP, else a Docker container when asked for
(EDGESTREAM_TEST_BROKER=docker and a Docker engine answers), else a managed LocalBroker on a free port
in a temp dir, stopped at the end. Nothing mocks Kafka."""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

# The test files sit in tests/unit, tests/kafka and tests/system (what goes where: README.md, "Tests"); the helpers
# they share sit here: factories.py, netns_hosts.py, compose_check.py and the support/ package. This folder goes
# on sys.path, so every test file imports them by name (`from factories import ...`, `from support.runs import
# ...`) wherever it sits; a test file never imports another test file (tests/unit/test_test_layout.py). The
# support modules' asserts are rewritten as a test file's are (the values in a failing assert's message).
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
pytest.register_assert_rewrite("support")

# One BLAS/OpenMP thread in the test process and, inherited, in every process it starts (trainers, producers,
# the PS: a setting a test gives its child wins): on 2 cores shared with the broker, numpy's OpenBLAS and
# scikit-learn's OpenMP start one spinning thread per core, so a 9 s test burnt 54 s of CPU (test_data_synthetic_signal:
# 54.3 s user with the libraries' defaults, 10.2 s with one thread). Set before numpy or torch is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import torch  # noqa: E402

# One intra-op thread for the in-process torch work (simulator runs, unit tests): on a 2-core machine
# shared with the broker, torch's default of one thread per core makes small steps contend for the
# cores (a 6 s simulated run took 15-35 s wall instead of 0.2 s under load). Subprocesses (trainers)
# keep their own settings.
torch.set_num_threads(1)

# The suite's trainers compute on the CPU, also on a GPU host (where they would otherwise take GPUs by the
# rank-to-GPU rule, edgestream.trainer.gpus): its tests compare real runs with the simulator and resumed
# runs with whole ones bit for bit, which only the CPU promises. The tests that exercise the rule and CUDA
# give their trainers EDGESTREAM_DEVICE="" (automatic) themselves (tests/system/test_backend.py). A value set
# before the suite starts is kept (EDGESTREAM_DEVICE= make test: every trainer by the rule).
os.environ.setdefault("EDGESTREAM_DEVICE", "cpu")


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


# Parallel runs (pytest-xdist, `make test`): the controller starts ONE managed broker before the workers
# start and hands its address to them in this variable, so N workers share a broker instead of starting N.
SHARED_BOOTSTRAP = "EDGESTREAM_TEST_SHARED_BOOTSTRAP"


def _xdist_controller(config) -> bool:
    workers = getattr(config.option, "numprocesses", None)
    return bool(workers) and workers != 0 and not hasattr(config, "workerinput")


def pytest_configure(config):
    if not _xdist_controller(config) or os.environ.get("EDGESTREAM_BOOTSTRAP") or SHARED_BOOTSTRAP in os.environ:
        return
    if os.environ.get("EDGESTREAM_TEST_BROKER") == "docker":
        return
    from edgestream.kafka import LocalBroker

    broker = LocalBroker()
    broker.start()
    config._edgestream_shared_broker = broker
    os.environ[SHARED_BOOTSTRAP] = broker.bootstrap


def pytest_unconfigure(config):
    broker = getattr(config, "_edgestream_shared_broker", None)
    if broker is not None:
        proc = getattr(broker, "_proc", None)
        if os.environ.get(TEST_CPU) and proc is not None:  # the shared broker's CPU: no test's own
            _cpu_line({"test": "(the shared broker)", "cpu_s": _proc_cpu_s(proc.pid), "wall_s": None})
        broker.stop()
        os.environ.pop(SHARED_BOOTSTRAP, None)


# EDGESTREAM_TEST_CPU=FILE: one JSON line per test appended to FILE -- the CPU seconds of its process tree (this
# worker's and the children it reaped during the test: trainers, CLI runs, brokers of its own), its wall seconds,
# the worker -- and one for the shared broker at the end: where the suite's CPU goes (issue 34, item 4), e.g.
#   EDGESTREAM_TEST_CPU=/tmp/cpu.jsonl make test; python scripts/test_cpu.py /tmp/cpu.jsonl
TEST_CPU = "EDGESTREAM_TEST_CPU"


def _cpu_line(entry: dict) -> None:
    with open(os.environ[TEST_CPU], "a") as f:  # one short write per line: workers append to one file
        f.write(json.dumps({**entry, "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}) + "\n")


def _proc_cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)  # utime + stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not os.environ.get(TEST_CPU):
        yield
        return
    t0, w0 = os.times(), time.monotonic()
    yield
    t1 = os.times()
    cpu = sum(getattr(t1, k) - getattr(t0, k) for k in ("user", "system", "children_user", "children_system"))
    _cpu_line({"test": item.nodeid, "cpu_s": round(cpu, 3), "wall_s": round(time.monotonic() - w0, 3)})


# Tests that must not run beside each other on different workers share an xdist group (`--dist loadgroup`
# keeps a group on one worker, in order): the session's 3-node cluster (tests kill and restart its nodes),
# the network-namespace hosts (one address plan), and each file with a module-scoped fixture (a broker or
# trainers set up once per file, not once per worker). Every other test is scheduled on its own.
# SERIAL_FILES and LONG_FIRST name test files by basename (item.path.name), wherever they sit under tests/: the
# basenames are unique (tests/unit/test_test_layout.py).
SERIAL_FILES = ("test_kafka_cluster_netns.py", "test_testbed.py")


# The files whose tests mostly wait (broker outages, a leader cut off, killed nodes, restarts) go first, longest
# first: xdist hands out one work unit (a test, or a whole group) at a time in collection order, so a 2-4 minute
# unit started early runs beside the short ones instead of alone at the end (longest-processing-time-first).
# Figures: the slowest tests of a serial run (`--durations`); the rest keeps file order.
LONG_FIRST = ("test_kafka_cluster_netns.py", "test_testbed.py", "test_kafka_outage_ps.py", "test_kafka_outage.py",
              "test_kafka_leader_loss.py", "test_host_torch.py", "test_kafka_cluster.py", "test_kafka_cluster_cli.py",
              "test_kafka_topic_settings.py", "test_consumer_hardening.py", "test_faults_run.py",
              "test_continuous_run.py", "test_hostile_messages.py", "test_kafka_layout.py", "test_external_streams.py",
              "test_faults_trainer.py", "test_backend.py", "test_collectives.py")


# The `kafka` marker (pyproject.toml), applied here, never by hand: a test that needs a broker is one whose
# fixtures (item.fixturenames: the closure, so a fixture built on `bootstrap` counts) include the session's broker
# or cluster, or a file's fixture that starts a broker of its own, or whose body starts one (the LocalBroker or
# LocalCluster it `.start()`s, the `broker start` command). `pytest -m "not kafka"` runs the unit tests alone
# (tests/system/test_markers.py keeps it so).
KAFKA_FIXTURES = frozenset({"bootstrap", "cluster", "cluster_session"})
OWN_BROKER_FIXTURES = frozenset({"broker", "secured", "sasl_bootstrap", "netns_cluster"})
_STARTS_A_BROKER = re.compile(r"Local(Broker|Cluster)\(.*?\.start\(\)|_cli\(\"start\"|\[\*cli, \"start\"", re.S)


def needs_kafka(item) -> bool:
    """Whether test `item` needs a Kafka broker (see KAFKA_FIXTURES)."""
    if (KAFKA_FIXTURES | OWN_BROKER_FIXTURES) & set(getattr(item, "fixturenames", ())):
        return True
    function = getattr(item, "function", None)
    return function is not None and bool(_STARTS_A_BROKER.search(_source(function)))


@functools.cache
def _source(function) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    if _xdist_controller(config) or hasattr(config, "workerinput"):
        rank = {name: i for i, name in enumerate(LONG_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order otherwise
    for item in items:
        if needs_kafka(item):
            item.add_marker(pytest.mark.kafka)
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        name = item.path.name
        if {"cluster", "cluster_session"} & fixtures:
            group = "cluster"
        elif name in SERIAL_FILES:
            group = "netns"
        elif any(_module_scoped(item, f) for f in fixtures):
            group = name
        else:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
        _group_id(config, item, group)


def _group_id(config, item, group: str) -> None:
    """The "@group" suffix xdist's loadgroup schedules by, on a worker's item id. xdist 3.8 writes it to
    `item._nodeid`, which pytest 9 no longer reads (its nodeid is `item._id`, a NodeId): under pytest 9 the
    groups were ignored and every worker started its own 3-node cluster and module fixtures. Here the suffix
    goes where pytest 9 reads it (pytest < 9: xdist's own hook does it)."""
    if not hasattr(config, "workerinput") or not getattr(config.option, "loadgroup", False):
        return
    node_id = getattr(item, "_id", None)
    if node_id is None or "@" in str(node_id):
        return
    from _pytest.nodeid import NodeId

    item._id = NodeId.parse(f"{node_id}@{group}")


def _module_scoped(item, fixture: str) -> bool:
    defs = item._fixtureinfo.name2fixturedefs.get(fixture) if hasattr(item, "_fixtureinfo") else None
    return bool(defs) and defs[-1].scope == "module"


@pytest.fixture(scope="session")
def bootstrap() -> str:
    env = os.environ.get("EDGESTREAM_BOOTSTRAP") or os.environ.get(SHARED_BOOTSTRAP)
    if env:
        yield env
        return
    if os.environ.get("EDGESTREAM_TEST_BROKER") == "docker" and _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:3.9.1").with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
        return
    from edgestream.kafka import LocalBroker

    broker = LocalBroker()
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def broker(tmp_path):
    """A broker of the test's own (a LocalBroker in tmp_path), to stop and start again: an outage. Stopped at
    the end, also on failure."""
    from edgestream.kafka import LocalBroker

    b = LocalBroker(tmp_path / "broker")
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def run_prefix(request) -> str:
    """A unique run name per test so tests sharing the session broker never see each other's topics."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:40].strip("-")
    return f"t-{name}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def cluster_session(tmp_path_factory):
    """A 3-node LocalCluster (KRaft, replication 3, min.insync 2) for the whole session, started the first time
    a test asks for `cluster` and stopped at the end. Tests use `cluster`, which keeps it whole."""
    from edgestream.kafka.cluster import LocalCluster

    c = LocalCluster(tmp_path_factory.mktemp("cluster"), nodes=3)
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster(cluster_session, request):
    """The session's 3-node cluster (`.bootstrap` comma-separated, `.nodes`, kill/restart/leader_of); a node
    the test killed or stopped is started again afterwards, so tests sharing the cluster find it whole. After the
    last test that asks for it (they share one xdist group, so one worker runs them all, in collection order) its
    three brokers are stopped instead of idling through the rest of the session."""
    yield cluster_session
    items = request.session.items
    later = items[items.index(request.node) + 1:] if request.node in items else items
    if any("cluster" in getattr(item, "fixturenames", ()) for item in later):
        cluster_session.heal()
    else:
        cluster_session.stop()
