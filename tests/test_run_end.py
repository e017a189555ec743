"""Issue 35 item 4, the end of a run: run names `<name>-<algorithm>-<run id>` (directories, Kafka topics, the
compare's runs), the summary of an interrupted run, the short human summary at the end, `compare RUN_DIR...`
of finished runs, and plain progress lines when the output is not a terminal. Simulated runs of a few
virtual seconds; nothing asserts a wall-clock time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edgestream.config import validate_dict
from edgestream.kafka.lifecycle import RUN_ID_TIME, run_of_topic
from edgestream.kafka.status import find_run
from edgestream.kafka.topics import device_topic, ps_topic
from edgestream.runid import new_run_id, run_name
from edgestream.runner import run_config

TINY = {
    "name": "tiny",
    "seed": 1,
    "data": {"dataset": "digits"},
    "devices": {"count": 2, "rates": {"distribution": "constant", "rate": 60},
                "compute": {"base_s": 0.05, "per_sample_s": 0.002}},
    "model": {"name": "mlp"},
    "optim": {"lr": 0.05},
    "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 16}},
    "stop": {"target_accuracy": 0.95, "max_time_s": 3.0},
    "eval": {"every_s": 1.0},
}
#: what Kafka accepts as a topic name
TOPIC = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")
DEFAULT_ID = r"\d{8}-\d{6}-[0-9a-f]{4}"


# ---------------------------------------------------------------- run names

def test_a_run_name_is_name_algorithm_run_id():
    rid = new_run_id()
    assert re.fullmatch(DEFAULT_ID, rid)
    assert run_name("s1", "ddl", rid) == f"s1-ddl-{rid}"
    assert run_name("s1", "abs-sgd", "r1") == "s1-abs-sgd-r1"
    # a user's algorithm by import path: its attribute; characters a folder or topic cannot hold become '-'
    assert run_name("s1", "my_pkg.algos:Fancy_SGD", "r1") == "s1-Fancy_SGD-r1"
    assert run_name("s1", "weird name!", "r1") == "s1-weird-name-r1"
    with pytest.raises(ValueError, match="run id 'a b' is not allowed"):
        run_name("s1", "ddl", "a b")


def test_the_longest_run_name_still_makes_valid_kafka_topics():
    run = run_name("n" * 100, "pkg.mod:" + "a" * 300, "i" * 64)
    for topic in (device_topic(run, 1023), ps_topic(run, "pull.1023"), f"{run}.orchestrator"):
        assert TOPIC.match(topic), (len(topic), topic)


def test_tools_that_read_run_names_still_read_them():
    """`topics list/delete` (run_of_topic, the run id's time) and `status` (a run id finds its run)."""
    run = run_name("s1", "scadles", "20261125-214000-3fa2")
    assert run_of_topic(device_topic(run, 3)) == run and run_of_topic(ps_topic(run, "push")) == run
    assert RUN_ID_TIME.search(run)["t"] == "20261125-214000"
    other = run_name("s1", "ddl", "20261125-214001-0b1c")
    topics = [device_topic(run, 0), device_topic(other, 0)]
    assert find_run(topics, "20261125-214000-3fa2") == run and find_run(topics, other) == other


def test_six_runs_of_one_config_are_told_apart_by_algorithm_and_sort_by_time(tmp_path):
    names = [run_name("s1", a, rid) for rid, a in (("20261125-214000-3fa2", "ddl"), ("20261125-214002-0001", "ddl"),
                                                   ("20261125-214001-ffff", "scadles"))]
    assert sorted(names) == ["s1-ddl-20261125-214000-3fa2", "s1-ddl-20261125-214002-0001",
                             "s1-scadles-20261125-214001-ffff"]


def test_a_sim_run_directory_is_named_name_algorithm_run_id(tmp_path):
    path, summary = run_config(validate_dict(TINY), "sim", out=tmp_path, progress=False)
    assert re.fullmatch(rf"tiny-ddl-{DEFAULT_ID}", path.name), path.name
    assert summary["run"] == path.name


def test_compare_runs_are_named_by_algorithm_and_the_compare_id(tmp_path):
    from edgestream.demo import VARIANTS
    from edgestream.runner.compare import parse_variants, run_compare

    cfg = validate_dict({**TINY, "stop": {"target_accuracy": 0.95, "max_time_s": 1.0}})
    folder, summaries, _ = run_compare(cfg, parse_variants(VARIANTS), out=tmp_path, run_id="c1", progress=False)
    # the demo's variants: no truncated overrides in the names
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["tiny-ddl-c1", "tiny-scadles-c1"]
    folder, summaries, _ = run_compare(cfg, parse_variants("ddl,ddl[algorithm.buffer=truncate]"), out=tmp_path,
                                       run_id="c2", progress=False)
    assert [Path(s["run_dir"]).name for s in summaries.values()] == ["tiny-ddl-c2-v1", "tiny-ddl-c2-v2"]
    assert "tiny-ddl-c2-v2" in (folder / "compare.md").read_text()


def test_resume_reads_the_run_id_after_name_and_algorithm(tmp_path):
    from edgestream.launch.orchestrator import LaunchError, resume_target

    cfg = validate_dict({**TINY, "runtime": {"engine": "local"}})
    run = tmp_path / "tiny-ddl-20261125-214000-3fa2"
    run.mkdir()
    (run / "config.yaml").write_text(cfg.to_yaml())
    assert resume_target(run, cfg) == (tmp_path, "20261125-214000-3fa2")
    old = tmp_path / "tiny-20261125-214000-3fa2"
    old.mkdir()
    (old / "config.yaml").write_text(cfg.to_yaml())
    with pytest.raises(LaunchError, match=r"not a run of 'tiny' with algorithm 'ddl' \(expected tiny-ddl-<run id>\)"):
        resume_target(old, cfg)


def _summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())
