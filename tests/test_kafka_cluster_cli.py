"""`edgestream broker start --nodes 3` / `status` / `stop`, run as a user runs them (subprocesses): three KRaft nodes
under one data dir, ports printed per node, the bootstrap comma-separated on stdout, status and stop covering every
node, and no process left afterwards."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from edgestream.kafka.broker import admin_answers, pid_alive, port_in_use

EDGESTREAM = str(Path(sys.executable).with_name("edgestream"))


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([EDGESTREAM, "broker", *args], capture_output=True, text=True, timeout=timeout)


def _free_base() -> int:
    for _ in range(200):
        base = random.randrange(20000, 30000)
        if not any(port_in_use(base + i) for i in range(3)):
            return base
    raise AssertionError("no three consecutive free ports")


def test_broker_start_nodes_3_status_stop(tmp_path):
    d = tmp_path / "kafka3"
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
        st = json.loads(_cli("status", "--data-dir", str(d), "--json").stdout)
        pids = [n["pid"] for n in st["nodes"]]
        assert len(set(pids)) == 3 and all(pid_alive(p) for p in pids)

        r = _cli("start", "--data-dir", str(d))  # the dir says it is a cluster: nothing started twice
        assert r.returncode == 0 and r.stdout.startswith(f"already running: {bootstrap} (3 of 3 nodes")
        r = _cli("start", "--nodes", "1", "--data-dir", str(d))
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            f"error: --nodes 1: {d} holds a 3-node cluster; use --nodes 3 or another --data-dir"]
    finally:
        r = _cli("stop", "--data-dir", str(d))
    assert r.returncode == 0 and r.stdout.strip() == f"stopped 3 of 3 nodes ({d})"
    assert not [p for p in pids if pid_alive(p)]
    r = _cli("status", "--data-dir", str(d))
    assert r.returncode == 1 and "not running: 0 of 3 nodes" in r.stdout
    assert _cli("stop", "--data-dir", str(d)).stdout.strip() == f"not running ({d})"
