"""Topic lifecycle (issue 31 item 5) on the session broker, as a user meets it: `edgestream topics list` /
`topics delete` in a subprocess, real runs (`edgestream run --engine local`) and producer-only runs
(`edgestream produce`), `runtime.cleanup: delete-on-success`. What is left on the broker is read back with
the admin API. Nothing is mocked; timeouts are hang guards only."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml
from support.runs import finish, wait_training
from support.runs import write_truncating_cfg as write_cfg  # the local run, buffers that truncate

from edgestream.consumers.device_stream import commit_offset, trainer_group
from edgestream.kafka.admin import admin_client, create_topics, list_topics
from edgestream.kafka.lifecycle import parse_duration, run_of_topic
from edgestream.kafka.topic_names import device_topic, hold_group

CLI = [sys.executable, "-m", "edgestream.cli"]


def _config(tmp_path: Path, name: str, *, max_steps: int, cleanup: str) -> Path:
    path = write_cfg(tmp_path / f"{name}.yaml", name, max_steps=max_steps, max_time_s=600)
    cfg = yaml.safe_load(path.read_text())
    cfg["runtime"] = {"cleanup": cleanup}
    path.write_text(yaml.safe_dump(cfg))
    return path


def _start(cfg: Path, bootstrap: str, out: Path, run_id: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "run", str(cfg), "--engine", "local", "--bootstrap", bootstrap, "--out", str(out),
                             "--run-id", run_id, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _produce(cfg: Path, bootstrap: str, run_id: str) -> subprocess.Popen:
    """A producer-only run: its topics (created by the producer) and two seconds of samples."""
    return subprocess.Popen([*CLI, "produce", str(cfg), "--bootstrap", bootstrap, "--run-id", run_id, "--duration",
                             "2", "--report-every", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def topics(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "topics", *args, "--bootstrap", bootstrap], capture_output=True, text=True,
                          timeout=180)


def groups_on(bootstrap: str) -> set[str]:
    admin = admin_client(bootstrap)  # kept while the future runs (it resolves through the client)
    res = admin.list_consumer_groups(request_timeout=30).result(timeout=40)
    assert not res.errors, res.errors
    return {g.group_id for g in res.valid}


def left(bootstrap: str, run: str) -> tuple[list[str], list[str]]:
    """The run's topics and consumer groups on the broker (admin API)."""
    return list_topics(bootstrap, f"{run}."), sorted(g for g in groups_on(bootstrap) if g.startswith(f"{run}."))


def test_a_finished_run_with_delete_on_success_leaves_none_of_its_topics_or_groups(bootstrap, run_prefix, tmp_path):
    cfg = _config(tmp_path, run_prefix, max_steps=6, cleanup="delete-on-success")
    code, _, err = finish(_start(cfg, bootstrap, tmp_path / "runs", "r1"))
    run = f"{run_prefix}-ddl-r1"
    assert code == 0, err
    m = re.search(rf"runtime\.cleanup: deleted run {run}'s (\d+) topic\(s\) and (\d+) consumer group\(s\)", err)
    assert m, err
    # 2 devices: .dev.0/1, .inj.0/1, .dlq, .meta; the trainers' groups and the orchestrator's hold group
    assert int(m[1]) >= 6 and int(m[2]) >= 3, err
    assert "NOT deleted" not in err
    assert left(bootstrap, run) == ([], [])
    assert (tmp_path / "runs" / run / "summary.json").is_file()  # the run directory stays


def test_topics_list_and_delete_three_runs(bootstrap, run_prefix, tmp_path):
    """Run A (real, delete-on-success) is live: listed as live, a delete of it refused; stopped by SIGTERM it
    keeps its topics for --resume and says so. Producer-only runs B and C (C's run id 2020's), neighbour run D
    and two topics that are no run's. The dry run deletes nothing; --yes deletes A, B and C's topics and
    groups and nothing else on the broker."""
    a, b, c, d = (f"{run_prefix}{x}" for x in "abcd")
    tag = run_prefix[-6:]  # run ids of this test's own: another test on the shared broker may run an "r2" meanwhile
    ids = {a: f"r1{tag}", b: f"r2{tag}", c: "20200101-000000-c0de", d: f"r4{tag}"}
    runs = {name: f"{name}-ddl-{run_id}" for name, run_id in ids.items()}
    ra, rb, rc, rd = runs.values()
    out = tmp_path / "runs"
    proc = _start(_config(tmp_path, a, max_steps=100000, cleanup="delete-on-success"), bootstrap, out, ids[a])
    try:
        producers = {run: _produce(_config(tmp_path, name, max_steps=10, cleanup="keep"), bootstrap, ids[name])
                     for name, run in ((b, rb), (c, rc), (d, rd))}
        for run, producer in producers.items():
            code, _, err = finish(producer)
            assert code == 0, err
            commit_offset(bootstrap, device_topic(run, 0), trainer_group(run, 0), 1)  # a trainer's ack
        others = [f"notarun{uuid.uuid4().hex[:6]}", f"{run_prefix}.plain"]
        create_topics(bootstrap, others)
        wait_training(out / ra, proc)

        listed = topics(bootstrap, "list")
        assert listed.returncode == 0, listed.stderr
        rows = {line.split()[0]: line for line in listed.stdout.splitlines() if line.split()}
        for run in runs.values():
            names, groups = left(bootstrap, run)
            assert names and groups
            cells = rows[run].split()
            assert (int(cells[2]), int(cells[5])) == (len(names), len(groups)), rows[run]  # TOPICS, GROUPS
        assert f"live (orchestrator pid {proc.pid}" in rows[ra] and rows[rb].endswith("idle")
        assert rows[rc].split()[1].endswith("h") and int(rows[rc].split()[1].split("d")[0]) > 2000  # AGE: days
        assert not any(o in rows for o in others)

        refused = topics(bootstrap, "delete", "--run", ra, "--yes")
        assert refused.returncode == 1
        assert f"run {ra} is live: held by orchestrator pid {proc.pid}" in refused.stdout
        assert left(bootstrap, ra)[0]

        proc.send_signal(signal.SIGTERM)
        code, _, err = finish(proc)
        assert code == 128 + signal.SIGTERM, err
        assert f"run {ra} did not finish, so its topics and consumer groups stay" in err and "--resume" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert left(bootstrap, ra)[0] and left(bootstrap, ra)[1]

    old = topics(bootstrap, "list", "--older-than", "7d")
    assert old.returncode == 0, old.stderr
    assert rc in old.stdout and not any(r in old.stdout for r in (ra, rb, rd))

    # what this test made (its runs, neighbour D, the topics that are no run's): other tests may share the broker
    # (TEST_WORKERS > 0) and make or delete their own topics and groups meanwhile
    def mine(names) -> set[str]:
        return {n for n in names if n.startswith(run_prefix) or n in others}

    # ... but not the stopped orchestrators' hold groups: each left (RunHold.close), and an empty group without
    # offsets is Kafka's to delete at its next cleanup (offsets.retention.check.interval.ms, every 10 min), which
    # a shared broker reached in the middle of this comparison once
    def now_on_broker() -> tuple[set[str], set[str]]:
        return mine(list_topics(bootstrap)), {g for g in mine(groups_on(bootstrap)) if not g.endswith(hold_group(""))}

    # settled first: A's stopped trainers may still be leaving (or committing) as the broker is read, under load
    before_topics, before_groups = now_on_broker()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        time.sleep(1.0)
        again = now_on_broker()
        if again == (before_topics, before_groups):
            break
        before_topics, before_groups = again
    ours = {r: left(bootstrap, r) for r in (ra, rb, rc)}
    dry = topics(bootstrap, "delete", "--run", ra, "--run", ids[b], "--run", rc)  # a run id names its run too
    assert dry.returncode == 0, dry.stderr
    assert [line.split()[3].rstrip(":") for line in dry.stdout.splitlines() if line.startswith("would delete")] == \
        [ra, rb, rc]
    assert "dry run: nothing deleted" in dry.stdout
    after_topics, after_groups = now_on_broker()
    assert (after_topics, after_groups) == (before_topics, before_groups), \
        ("topics gone, new:", before_topics - after_topics, after_topics - before_topics,
         "groups gone, new:", before_groups - after_groups, after_groups - before_groups)

    done = topics(bootstrap, "delete", "--run", ra, "--run", rb, "--run", rc, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    for run in (ra, rb, rc):
        assert f"deleted run {run}: " in done.stdout
        assert left(bootstrap, run) == ([], [])
    gone_topics = {t for names, _ in ours.values() for t in names}
    gone_groups = {g for _, groups in ours.values() for g in groups}
    assert mine(list_topics(bootstrap)) == before_topics - gone_topics  # D's and the non-run ones stay
    assert mine(groups_on(bootstrap)) == before_groups - gone_groups
    assert set(others) <= set(list_topics(bootstrap)) and all(left(bootstrap, rd))

    again = topics(bootstrap, "delete", "--run", ra)
    assert again.returncode == 2 and f"--run {ra}: no such run on the broker" in again.stderr


def test_only_run_topics_belong_to_a_run():
    runs = {"s1-20261125-214000-3fa2.dev.12": "s1-20261125-214000-3fa2", "a-b.ps.pull.3": "a-b", "a-b.ps.push": "a-b",
            "a-b.streams": "a-b", "a-b.inj": "a-b", "a-b.inj.0": "a-b", "a-b.dlq": "a-b", "a-b.meta": "a-b"}
    for topic, run in runs.items():
        assert run_of_topic(topic) == run, topic
    for topic in ("__consumer_offsets", "notarun", "a.dev.0", "a-b.mine", "a-b.dev", "a-b.dev.x", "a-b.c.dev.0",
                  "-a.dev.0", "a-b.dlq.1"):
        assert run_of_topic(topic) is None, topic
    assert [parse_duration(t) for t in ("90s", "30m", "2h", "7d", "1w", "1.5h")] == [90, 1800, 7200, 604800,
                                                                                      604800, 5400]


def test_bad_input_is_one_line(bootstrap):
    for args, expect in ((["delete"], "exactly one of --run"),
                         (["delete", "--all-runs", "--older-than", "2h"], "exactly one of --run"),
                         (["list", "--older-than", "2 days"], "--older-than: '2 days' is not allowed")):
        out = topics(bootstrap, *args)
        assert out.returncode == 2 and expect in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
