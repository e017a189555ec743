"""`edgestream produce` as a user runs it, in a subprocess (the producer hardening and outage tests).

* `_raw(name, rate, devices)`: the smallest producer config (digits, constant rates); `_write(tmp_path, raw)`:
  it as `<name>.yaml`;
* `_spawn(cfg_file, bootstrap, run_id, *extra)`: the producer process (`CLI`);
* `_read_stderr_until(proc, predicate, limit_s)`: its first stderr line `predicate` accepts;
  `_summary(stdout)`: its closing JSON line; `RAW_CLIENT_LOG`: what librdkafka's own stderr lines start with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml

CLI = [sys.executable, "-m", "edgestream.cli", "produce"]
RAW_CLIENT_LOG = ("|rdkafka#", "%3|", "%4|", "%5|", "%6|", "%7|")  # librdkafka's own stderr format


def _raw(name: str, rate: float = 200, devices: int = 2) -> dict:
    return {"name": name, "seed": 3, "data": {"dataset": "digits"},
            "devices": {"count": devices, "rates": {"distribution": "constant", "rate": rate}}}


def _write(tmp_path, raw: dict):
    path = tmp_path / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _spawn(cfg_file, bootstrap: str, run_id: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, str(cfg_file), "--bootstrap", bootstrap, "--run-id", run_id, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())


def _read_stderr_until(proc: subprocess.Popen, predicate, limit_s: float = 120) -> str:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        line = proc.stderr.readline()
        if predicate(line):
            return line
    raise AssertionError(f"producer never printed the expected line (exit code {proc.poll()})")


def _summary(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])
