"""Network hosts made of Linux network namespaces, for the tests that run processes on separate hosts (the
compose testbed, tests/system/test_testbed.py) or cut one host off (the cluster's link-down test,
tests/system/test_kafka_cluster_netns.py): one bridge, one veth pair per host (eth0 inside), addresses in
10.213.<k>.0/24. `network(...)` tears everything down (processes killed, namespaces, veths and bridge
deleted) on any exit and fails when something is left behind. Needs root and iproute2's `ip`."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest


def sh(*cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return proc


class Hosts:
    """Network hosts made of namespaces: one bridge, one veth pair per host (eth0 inside), 10.213.<k>.0/24.
    gateway: the bridge gets 10.213.<k>.1, so processes of this (the root) namespace reach every host."""

    def __init__(self, names: list[str], gateway: bool = False) -> None:
        tag = f"{os.getpid() % 100000}"
        self.k = os.getpid() % 200 + 20
        self.bridge = f"esb{tag}"
        self.gateway = f"10.213.{self.k}.1" if gateway else None
        self.ns = {n: f"es{tag}-{n}" for n in names}
        self.ip = {n: f"10.213.{self.k}.{i + 2}" for i, n in enumerate(names)}
        self.veth = {n: f"esv{tag}{i}" for i, n in enumerate(names)}
        self.procs: list[subprocess.Popen] = []
        self.forward_rule: list[str] | None = None

    def up(self) -> None:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "link", "set", self.bridge, "up")
        self._let_the_bridge_forward()
        if self.gateway:
            sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        for n, ns in self.ns.items():
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", self.veth[n], "type", "veth", "peer", "name", f"{self.veth[n]}p")
            sh("ip", "link", "set", f"{self.veth[n]}p", "netns", ns)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", f"{self.veth[n]}p", "name", "eth0")
            sh("ip", "link", "set", self.veth[n], "master", self.bridge)
            sh("ip", "link", "set", self.veth[n], "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.ip[n]}/24", "dev", "eth0")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def _let_the_bridge_forward(self) -> None:
        """Where bridged frames go through iptables (br_netfilter loaded, bridge-nf-call-iptables = 1) and the
        FORWARD policy drops -- a running Docker Engine sets both -- the hosts could not reach one another: a rule
        accepts what goes from this bridge to this bridge, and nothing else; `down` removes it."""
        flag = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
        if not flag.exists() or flag.read_text().strip() != "1" or shutil.which("iptables") is None:
            return
        rule = ["FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]
        sh("iptables", "-I", *rule[:1], "1", *rule[1:])
        self.forward_rule = rule

    def link(self, host: str, up: bool) -> None:
        """Set `host`'s link (its veth on the bridge) down or up: down, nothing reaches it and it reaches nothing."""
        sh("ip", "link", "set", self.veth[host], "up" if up else "down")

    def route_only_to(self, host: str, peers: list[str]) -> None:
        """`host` keeps a route to `peers` and to no other host: its on-link /24 route goes, a /32 per peer
        comes (a connection anywhere else fails with ENETUNREACH before a packet leaves)."""
        ns = self.ns[host]
        sh("ip", "netns", "exec", ns, "ip", "route", "del", f"10.213.{self.k}.0/24", "dev", "eth0")
        for peer in peers:
            sh("ip", "netns", "exec", ns, "ip", "route", "add", f"{self.ip[peer]}/32", "dev", "eth0")

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

    def pids_inside(self) -> list[int]:
        """Processes still running in any of the namespaces (`ip netns pids`)."""
        pids = []
        for ns in self.ns.values():
            out = sh("ip", "netns", "pids", ns, check=False).stdout
            pids += [int(p) for p in out.split()]
        return pids

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
        for pid in self.pids_inside():  # started inside by others (a cluster's nodes): they die with their host
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for n, ns in self.ns.items():
            for cmd in (["ip", "netns", "del", ns], ["ip", "link", "del", self.veth[n]]):
                r = sh(*cmd, check=False)
                if r.returncode != 0 and "Cannot find" not in r.stderr and "No such" not in r.stderr \
                        and "not exist" not in r.stderr:
                    problems.append(f"{' '.join(cmd)}: {r.stderr.strip()}")
        sh("ip", "link", "del", self.bridge, check=False)
        if self.forward_rule:
            r = sh("iptables", "-D", *self.forward_rule, check=False)
            if r.returncode != 0:
                problems.append(f"iptables -D {' '.join(self.forward_rule)}: {r.stderr.strip()}")
        return problems


@contextlib.contextmanager
def network(names: list[str], gateway: bool = False):
    """Hosts `names`, up; torn down (processes killed, namespaces, veths and bridge deleted) on any exit."""
    if os.geteuid() != 0:
        pytest.fail("this test builds network namespaces and needs root (CI runs as root): run it as root, "
                    "e.g. `sudo .venv/bin/pytest tests/...`")
    if shutil.which("ip") is None:
        pytest.fail("this test builds network namespaces with iproute2's `ip` (apt-get install iproute2)")
    h = Hosts(names, gateway=gateway)
    try:
        h.up()
        yield h
    finally:
        problems = h.down()
        left = [ns for ns in h.ns.values() if ns in sh("ip", "netns", "list").stdout]
        bridge = sh("ip", "link", "show", h.bridge, check=False).returncode == 0
        assert not left and not problems and not bridge, f"left behind: {left} {problems} bridge={bridge}"
