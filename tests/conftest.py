"""Session-scoped Kafka for the suite: EDGESTREAM_BOOTSTRAP, else a Docker container when asked for
(EDGESTREAM_TEST_BROKER=docker and a Docker engine answers), else a managed LocalBroker on a free port
in a temp dir, stopped at the end. Nothing mocks Kafka."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest
import torch

# One intra-op thread for the in-process torch work (simulator runs, unit tests): on a 2-core machine
# shared with the broker, torch's default of one thread per core makes small steps contend for the
# cores (a 6 s simulated run took 15-35 s wall instead of 0.2 s under load). Subprocesses (trainers)
# keep their own settings.
torch.set_num_threads(1)

# The suite's trainers compute on the CPU, also on a GPU host (where they would otherwise take GPUs by the
# rank-to-GPU rule, edgestream.trainer.gpus): its tests compare real runs with the simulator and resumed
# runs with whole ones bit for bit, which only the CPU promises. The tests that exercise the rule and CUDA
# give their trainers EDGESTREAM_DEVICE="" (automatic) themselves (tests/test_backend.py). A value set
# before the suite starts is kept (EDGESTREAM_DEVICE= make test: every trainer by the rule).
os.environ.setdefault("EDGESTREAM_DEVICE", "cpu")


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def bootstrap() -> str:
    env = os.environ.get("EDGESTREAM_BOOTSTRAP")
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
def cluster(cluster_session):
    """The session's 3-node cluster (`.bootstrap` comma-separated, `.nodes`, kill/restart/leader_of); a node
    the test killed or stopped is started again afterwards, so tests sharing the cluster find it whole."""
    yield cluster_session
    cluster_session.heal()
