"""Local runs through the command line, as a user starts them: `edgestream run --engine local` orchestrators
with real producer / PS / trainer children against a real broker, and what the tests read back from them.

* `start(cfg, bootstrap, ...)` an orchestrator (`--quiet`; `out`/`run_id` optional), `run` it to its end,
  `resume` a run directory (`--set` overrides); `start_run(cfg, bootstrap, out, ...)` the launch tests' form
  (run id r1, progress lines, optionally a new session); `finish(proc)`: its exit code, stdout and stderr, or a
  failure when it hangs past HANG_S.
* `write_truncating_cfg(path, name, ...)`: factories.write_cfg's local run with buffers that truncate.
* While it runs: `wait_steps(run_dir, proc, devices, steps)`, `wait_training(run_dir, proc, steps)` (two
  trainers; returns pids.json), `pids_of`, `child_pids`, `edgestream_alive`, `assert_no_child_left`.
* After: `step_lines(rank_file)`, `records(jsonl_file)`, `error_lines(stderr)`, `load_ckpt(path)`,
  `resume_ckpts(run_dir, world)`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import factories
import pytest

from edgestream.launch.tail import JsonlTail

CLI = [sys.executable, "-m", "edgestream.cli"]
HANG_S = 240  # a whole run, start-up of three Python processes with torch on a shared 2-core machine included


# ---------------------------------------------------------------- configs and starts

def write_truncating_cfg(path: Path, name: str, *, max_steps: int, max_time_s: float = 120,
                         every_steps: int | None = None) -> Path:
    """The fault tests' local run (tests/factories.py) with buffers that truncate."""
    return factories.write_cfg(path, name, max_steps=max_steps, max_time_s=max_time_s, every_steps=every_steps,
                               buffer="truncate")


def start(cfg: Path, bootstrap: str, *args: str, out: Path | None = None, run_id: str = "r1",
          env: dict[str, str] | None = None) -> subprocess.Popen:
    """`edgestream run CFG --engine local` in the background; env: variables added to this process's for it (and
    the trainers it starts: EDGESTREAM_TEST_FAIL_AT_STEP ends them at a chosen step)."""
    where = ["--out", str(out), "--run-id", run_id] if out is not None else []
    return subprocess.Popen([*CLI, "run", str(cfg), "--engine", "local", "--bootstrap", bootstrap, "--quiet",
                             *where, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env} if env else None)


def start_run(cfg: Path, bootstrap: str, out: Path, *extra: str, new_session: bool = False) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "run", str(cfg), "--engine", "local", "--bootstrap", bootstrap, "--out", str(out),
                             "--run-id", "r1", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=new_session)


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    """An orchestrator's exit: (code, stdout, stderr), or a failure if it hangs."""
    try:
        out, err = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the orchestrator hung; stderr:\n{err}")
    return proc.returncode, out, err


def run(cfg: Path, bootstrap: str, *args: str, **kw) -> tuple[int, str, str]:
    return finish(start(cfg, bootstrap, *args, **kw))


def resume(cfg: Path, bootstrap: str, run_dir: Path, *sets: str) -> tuple[int, str, str]:
    return run(cfg, bootstrap, "--resume", str(run_dir), *(x for s in sets for x in ("--set", s)))


# ---------------------------------------------------------------- while it runs

def wait_steps(run_dir: Path, proc: subprocess.Popen, devices: int, steps: int) -> None:
    deadline = time.monotonic() + HANG_S
    files = [run_dir / "ranks" / f"{r}.jsonl" for r in range(devices)]
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the orchestrator ended early ({proc.returncode}): {proc.stderr.read()}")
        if all(f.exists() and f.read_text().count('"kind":"step"') >= steps for f in files) and (
                run_dir / "pids.json").is_file() and len(json.loads((run_dir / "pids.json").read_text())["trainers"]) \
                == devices:
            return
        time.sleep(0.2)
    pytest.fail("the trainers did not start training")


def kill_run(run_dir: Path, proc: subprocess.Popen) -> None:
    """SIGKILL the orchestrator `proc`, then every trainer it started that is still there (its parent watch may
    be quicker): a run killed mid-way, for `--resume`."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(HANG_S)
    pids = pids_of(run_dir)["trainers"]
    pids = [int(p) for p in (pids.values() if isinstance(pids, dict) else pids)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, TypeError, ValueError):
            pass
    deadline = time.monotonic() + HANG_S  # gone (reaped), not a fixed pause: what --resume needs
    while any(edgestream_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"trainers {pids} still alive after SIGKILL"
        time.sleep(0.05)


def pids_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "pids.json").read_text())


def child_pids(run_dir: Path) -> list[int]:
    p = pids_of(run_dir)
    return [p["producer"], *p["trainers"].values()]


def edgestream_alive(pid: int) -> bool:
    """Whether `pid` is a live (non-zombie) process of ours (an edgestream command line)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and b"edgestream" in cmdline


def wait_training(run_dir: Path, proc: subprocess.Popen, steps: int = 3) -> dict:
    """Wait until both trainers logged `steps` step lines (the run is mid-way); return pids.json."""
    deadline = time.monotonic() + HANG_S
    tails: dict[int, JsonlTail] = {}
    seen = {0: 0, 1: 0}
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the orchestrator ended early ({proc.returncode}): {proc.stderr.read()}")
        for r in (0, 1):
            tails.setdefault(r, JsonlTail(run_dir / "ranks" / f"{r}.jsonl"))
            seen[r] += sum(1 for rec in tails[r].read() if rec.get("kind") == "step")
        if min(seen.values()) >= steps and (run_dir / "pids.json").is_file() and len(pids_of(run_dir)["trainers"]) == 2:
            return pids_of(run_dir)
        time.sleep(0.2)
    pytest.fail("the trainers did not start training")


def assert_no_child_left(run_dir: Path) -> None:
    deadline = time.monotonic() + 10  # reaped by then (PDEATHSIG delivery is asynchronous)
    while time.monotonic() < deadline and any(edgestream_alive(p) for p in child_pids(run_dir)):
        time.sleep(0.1)
    left = [p for p in child_pids(run_dir) if edgestream_alive(p)]
    assert not left, f"child processes left running: {left}"


# ---------------------------------------------------------------- what a run left

def error_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("error:")]


def step_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if '"kind":"step"' in line]


def records(path: Path) -> list[dict]:
    """Every record of a JSON-lines file (a rank's or the PS's)."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def load_ckpt(path: Path) -> dict:
    from edgestream.trainer.checkpoint import load_checkpoint

    return load_checkpoint(path)


def resume_ckpts(run_dir: Path, world: int) -> dict[int, dict]:
    """The checkpoint each rank of a lockstep run resumes from: the newest step every rank's checkpoint
    (rank<i>.pt, or the one it replaced) holds; a rank killed mid-run may have left the others one ahead."""
    from edgestream.trainer.checkpoint import held_steps, load_checkpoint

    held = held_steps(run_dir, world)
    step = max(set.intersection(*(set(h) for h in held.values())))
    return {r: load_checkpoint(h[step]) for r, h in held.items()}
