"""The run's fork server (edgestream/forkserver.py): a child forked from it is what `subprocess.Popen`
would have started. Real processes throughout: a probe module written into a temp folder (on PYTHONPATH,
the way a user's package reaches a child) reports what it sees; the same command started both ways must
report the same thing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgestream.forkserver import ForkedProc
from edgestream.launch.procs import ChildSet, describe_status

HANG_S = 60

PROBE = textwrap.dedent('''
    import json, os, sys, time
    mode = sys.argv[1]
    if mode == "report":
        report = {"argv": sys.argv, "cwd": os.getcwd(), "name": __name__, "path0": sys.path[0],
                  "env": {k: v for k, v in os.environ.items() if k.startswith("PROBE_")},
                  "leader": os.getsid(0) == os.getpid() == os.getpgid(0), "stdin": sys.stdin.read()}
        if os.environ.get("PROBE_TORCH"):
            import torch
            report["threads"] = torch.get_num_threads()
        if os.environ.get("PROBE_NUMPY"):
            import numpy
            report["random"] = numpy.random.rand()
        if os.environ.get("PROBE_FD_VAR"):
            fd = int(os.environ[os.environ["PROBE_FD_VAR"]])
            report["handed"] = os.read(fd, 1000).decode()
        print(json.dumps(report))
        print("a line on stderr", file=sys.stderr)
        sys.exit(int(sys.argv[2]))
    if mode == "sleep":
        print("sleeping", flush=True)
        time.sleep(120)
    if mode == "raise":
        raise ValueError("the probe failed on purpose")
''')


@pytest.fixture
def probe_env(tmp_path) -> dict:
    pkg = tmp_path / "userpkg"
    pkg.mkdir()
    (pkg / "es_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROBE_")}
    env["PYTHONPATH"] = str(pkg)
    return env


@pytest.fixture
def warm_set():
    children = ChildSet()
    children.warm()
    yield children
    children.close()


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "es_probe", *args]


def _finish(child, out: Path) -> tuple[int, list[str]]:
    code = child.proc.wait(timeout=HANG_S)
    return code, out.read_text().splitlines()


def test_a_forked_child_sees_what_a_started_one_sees(probe_env, warm_set, tmp_path):
    """argv, working directory, environment (exactly the one given), __main__, path, own session, stdin on
    /dev/null, stdout and stderr in the log file, the exit status: the same from the fork server and from
    a new process."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = dict(probe_env, PROBE_A="1", PROBE_B="two words")
    os.environ["PROBE_NOT_GIVEN"] = "x"  # in this process's environment, not in the child's
    try:
        forked = warm_set.start("forked", _cmd("report", "3"), tmp_path / "f.out", env=env, cwd=cwd)
        plain = ChildSet()
        started = plain.start("started", _cmd("report", "3"), tmp_path / "s.out", env=env, cwd=cwd)
    finally:
        del os.environ["PROBE_NOT_GIVEN"]
    assert isinstance(forked.proc, ForkedProc) and isinstance(started.proc, subprocess.Popen)
    (fcode, flines), (scode, slines) = _finish(forked, tmp_path / "f.out"), _finish(started, tmp_path / "s.out")
    plain.close()
    assert fcode == scode == 3
    assert flines[1:] == slines[1:] == ["a line on stderr"]
    f, s = json.loads(flines[0]), json.loads(slines[0])
    assert f == s
    assert f["argv"][0].endswith("es_probe.py") and f["argv"][1:] == ["report", "3"]
    assert f["cwd"] == str(cwd) == f["path0"] and f["name"] == "__main__" and f["leader"] and f["stdin"] == ""
    assert f["env"] == {"PROBE_A": "1", "PROBE_B": "two words"}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.integers(0, 255), value=st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=40),
       threads=st.integers(1, 4))
def test_exit_status_environment_and_threads_reach_a_forked_child(probe_env, warm_set, tmp_path, code, value,
                                                                 threads):
    out = tmp_path / f"c{code}.out"
    out.unlink(missing_ok=True)
    env = dict(probe_env, PROBE_V=value, PROBE_TORCH="1", OMP_NUM_THREADS=str(threads))
    child = warm_set.start("c", _cmd("report", str(code)), out, env=env)
    got, lines = _finish(child, out)
    assert got == code, lines
    report = json.loads(lines[0])
    assert report["env"] == {"PROBE_V": value, "PROBE_TORCH": "1"} and report["threads"] == threads


def test_signals_and_failures_read_as_from_popen(probe_env, warm_set, tmp_path):
    term = warm_set.start("t", _cmd("sleep"), tmp_path / "t.out", env=probe_env)
    killed = warm_set.start("k", _cmd("sleep"), tmp_path / "k.out", env=probe_env)
    failed = warm_set.start("r", _cmd("raise"), tmp_path / "r.out", env=probe_env)
    deadline = time.monotonic() + HANG_S
    while "sleeping" not in (tmp_path / "t.out").read_text() + "" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert term.poll() is None and term.group_alive()
    term.signal_group(signal.SIGTERM)
    assert term.proc.wait(timeout=HANG_S) == -signal.SIGTERM
    assert describe_status(term.poll()) == "killed by SIGTERM"
    warm_set.kill_all([killed])
    assert killed.poll() == -signal.SIGKILL and not killed.group_alive()
    assert failed.proc.wait(timeout=HANG_S) == 1
    assert "ValueError: the probe failed on purpose" in (tmp_path / "r.out").read_text()


def test_secrets_reach_a_forked_child_on_a_pipe_only(probe_env, warm_set, tmp_path):
    warm_set.handover = ("PROBE_SECRET_FD", b"s3cr3t-value")
    child = warm_set.start("s", _cmd("report", "0"), tmp_path / "s.out",
                           env=dict(probe_env, PROBE_FD_VAR="PROBE_SECRET_FD"))
    code, lines = _finish(child, tmp_path / "s.out")
    assert code == 0 and json.loads(lines[0])["handed"] == "s3cr3t-value"
    assert b"s3cr3t" not in Path(f"/proc/{warm_set.fork_server.pid}/environ").read_bytes()


def test_forked_children_draw_their_own_random_numbers(probe_env, warm_set, tmp_path):
    """A new interpreter seeds numpy's global generator from the OS; forked children must not share one."""
    draws = []
    for i in range(3):
        child = warm_set.start(f"n{i}", _cmd("report", "0"), tmp_path / f"n{i}.out", env=dict(probe_env, PROBE_NUMPY="1"))
        draws.append(json.loads(_finish(child, tmp_path / f"n{i}.out")[1][0])["random"])
    assert len(set(draws)) == 3


def test_the_server_and_its_children_die_with_their_orchestrator(probe_env, tmp_path):
    """SIGKILL of the process that owns the ChildSet (no handler runs): the server dies with it
    (PR_SET_PDEATHSIG) and the forked child with the server."""
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f'''
        import json, sys, time
        from pathlib import Path
        from edgestream.launch.procs import ChildSet
        c = ChildSet(); c.warm()
        child = c.start("sleeper", {_cmd("sleep")!r}, Path({str(tmp_path / "sleep.out")!r}), env={probe_env!r})
        print(json.dumps({{"server": c.fork_server.pid, "child": child.pid}}), flush=True)
        time.sleep(120)
    '''))
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(owner.stdout.readline())
        deadline = time.monotonic() + HANG_S
        while "sleeping" not in (tmp_path / "sleep.out").read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _alive(pids["server"]) and _alive(pids["child"])
        owner.kill()
        owner.wait()
        while (_alive(pids["server"]) or _alive(pids["child"])) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pids["server"]) and not _alive(pids["child"])
    finally:
        owner.kill()
        owner.wait()


def test_a_child_is_started_as_a_new_process_when_the_server_is_gone(probe_env, warm_set, tmp_path):
    os.kill(warm_set.fork_server.pid, signal.SIGKILL)
    warm_set.fork_server._proc.wait()
    child = warm_set.start("after", _cmd("report", "5"), tmp_path / "a.out", env=probe_env)
    assert isinstance(child.proc, subprocess.Popen) and warm_set.fork_server is None
    assert _finish(child, tmp_path / "a.out")[0] == 5


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_preloaded_edgestream_modules_read_no_setting_at_import():
    """The server imports PRELOAD once, in its own environment; a child's environment comes later, so no
    edgestream module the preload brings in may read os.environ at import (module level), nor call an accessor of
    edgestream/settings.py there."""
    script = textwrap.dedent("""
        import re, sys
        from edgestream.forkserver import PRELOAD
        for name in PRELOAD:
            __import__(name)
        for name, mod in sorted(sys.modules.items()):
            path = getattr(mod, "__file__", None)
            if name.startswith("edgestream") and path and path.endswith(".py"):
                for n, line in enumerate(open(path), 1):
                    if re.match(r"^\\S.*(os\\.environ|getenv)", line):
                        print(f"{name}:{n}: {line.strip()}")
        # edgestream/settings.py records each variable an accessor read; none may be read at the preload
        for v in sorted(getattr(sys.modules.get("edgestream.settings"), "READ", ())):
            print(f"edgestream.settings: {v} read at import")
        print("checked", sum(n.startswith("edgestream") for n in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_S)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines and lines[-1].startswith("checked"), out.stderr
    assert int(lines[-1].split()[1]) > 10 and lines[:-1] == []


@pytest.mark.parametrize("args, code", [(("config", "validate", "{cfg}"), 0),
                                        (("config", "validate", "{cfg}", "--set", "model.name=nope"), 2),
                                        (("run", "--engine", "warp"), 2)])
def test_the_preloaded_cli_answers_as_a_new_process(warm_set, tmp_path, args, code):
    """`python -m edgestream.cli` is preloaded in the server: run through its `main`, once, the same output
    and exit status as a new process, and no warning about a module run twice."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: fs\ndata: {dataset: digits}\nmodel: {name: mlp}\nalgorithm: {name: ddl}\n")
    cmd = [sys.executable, "-m", "edgestream.cli", *(a.format(cfg=cfg) for a in args)]
    forked = warm_set.start("forked", cmd, tmp_path / "f.out", env=dict(os.environ), cwd=tmp_path)
    plain = ChildSet()
    started = plain.start("started", cmd, tmp_path / "s.out", env=dict(os.environ), cwd=tmp_path)
    assert isinstance(forked.proc, ForkedProc)
    (fcode, flines), (scode, slines) = _finish(forked, tmp_path / "f.out"), _finish(started, tmp_path / "s.out")
    plain.close()
    assert fcode == scode == code and flines == slines and flines
    assert not any("RuntimeWarning" in line for line in flines)
