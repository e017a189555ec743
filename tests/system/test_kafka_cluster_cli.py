"""`edgestream broker start --nodes 3` / `status` / `stop`, run as a user runs them (subprocesses): three KRaft nodes
under one data dir, ports printed per node, the bootstrap comma-separated on stdout, status and stop covering every
node, and no process left afterwards."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from edgestream.kafka.broker import admin_answers, pid_alive, port_in_use
from edgestream.kafka.jars import DEFAULT_KAFKA_VERSION, libs_dir

EDGESTREAM = str(Path(sys.executable).with_name("edgestream"))


def _cli(*args: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([EDGESTREAM, "broker", *args], capture_output=True, text=True, timeout=timeout, env=env)


def _free_base() -> int:
    for _ in range(200):
        base = random.randrange(20000, 30000)
        if not any(port_in_use(base + i) for i in range(3)):
            return base
    raise AssertionError("no three consecutive free ports")


def test_broker_start_nodes_3_status_stop(tmp_path):
    # the cluster in the managed broker's default dir ($EDGESTREAM_CACHE/broker; the jars where they are)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"kafka-{DEFAULT_KAFKA_VERSION}").symlink_to(libs_dir().parent)
    env = os.environ | {"EDGESTREAM_CACHE": str(cache)}
    d = cache / "broker"
    base = _free_base()
    pids: list[int] = []
    try:
        r = _cli("start", "--nodes", "3", "--data-dir", str(d), "--port", str(base))
        assert r.returncode == 0, r.stderr
        bootstrap = r.stdout.strip()
        assert bootstrap == ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        assert "started a 3-node Kafka" in r.stderr
        for i in (1, 2, 3):  # every node's address, on a line of its own
            assert f"node {i}: 127.0.0.1:{base + i - 1} (controller port " in r.stderr
            assert (d / f"node-{i}" / "kraft" / "meta.properties").is_file()
        assert admin_answers(bootstrap)
        assert json.loads((d / "cluster.json").read_text())["nodes"] == 3

        r = _cli("status", "--data-dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"running: 3 of 3 nodes, bootstrap {bootstrap}" in r.stdout
        assert "brokers in the cluster metadata: 1, 2, 3" in r.stdout
        assert r.stdout.count(": answering, 127.0.0.1:") == 3
        st = json.loads(_cli("status", "--json", env=env).stdout)  # the default dir: the cluster
        pids = [n["pid"] for n in st["nodes"]]
        assert len(set(pids)) == 3 and all(pid_alive(p) for p in pids)

        r = _cli("start", "--data-dir", str(d))  # the dir says it is a cluster: nothing started twice
        assert r.returncode == 0 and r.stdout.startswith(f"already running: {bootstrap} (3 of 3 nodes")
        r = _cli("start", "--nodes", "1", "--data-dir", str(d))
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            f"error: --nodes 1: {d} holds a 3-node cluster; use --nodes 3 or another --data-dir"]
        # a command given no bootstrap uses the managed instance: the cluster, not a broker of its own
        cfg = tmp_path / "c.yaml"
        cfg.write_text((Path(__file__).parents[2] / "examples" / "s1.yaml").read_text())
        r = subprocess.run([EDGESTREAM, "produce", str(cfg), "--duration", "1", "--set", "devices.count=2"],
                           capture_output=True, text=True, timeout=240, env=env)
        assert r.returncode == 0, r.stderr
        assert f"connecting to Kafka at {bootstrap}" in r.stderr and "starting the managed" not in r.stderr
        assert not (d / "kraft").exists() and not (d / "broker.json").exists()
    finally:
        r = _cli("stop", "--data-dir", str(d))
    assert r.returncode == 0 and r.stdout.strip() == f"stopped 3 of 3 nodes ({d})"
    assert not [p for p in pids if pid_alive(p)]
    r = _cli("status", env=env)
    assert r.returncode == 1 and "not running: 0 of 3 nodes" in r.stdout
    assert _cli("stop", "--data-dir", str(d)).stdout.strip() == f"not running ({d})"
