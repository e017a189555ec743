"""The `kafka` marker is applied by tests/conftest.py, never by hand: `pytest -m "not kafka"` collects no test that
uses a broker (the session's `bootstrap`, `cluster`, `cluster_session`, directly or through a fixture built on them,
a file's own broker fixture, or a broker the test starts itself), and keeps the unit tests.

Collection runs in a subprocess (`pytest --collect-only`) with a probe plugin that writes what was collected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import KAFKA_FIXTURES, OWN_BROKER_FIXTURES

TESTS = Path(__file__).resolve().parents[1]  # tests/

PROBE = '''
import json, os

def pytest_collection_finish(session):
    with open(os.environ["MARKERS_PROBE_OUT"], "w") as f:
        json.dump({i.nodeid: {"fixtures": sorted(getattr(i, "fixturenames", ())),
                              "kafka": i.get_closest_marker("kafka") is not None} for i in session.items}, f)
'''


def _collect(tmp_path: Path, marks: str, *paths: str) -> dict[str, dict]:
    (tmp_path / "markers_probe.py").write_text(PROBE)
    out = tmp_path / f"collected-{len(list(tmp_path.iterdir()))}.json"
    env = os.environ | {"MARKERS_PROBE_OUT": str(out), "PYTEST_ADDOPTS": "",
                        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "markers_probe", "-m", marks, *paths], cwd=TESTS.parent, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 5), proc.stdout[-3000:] + proc.stderr[-3000:]  # 5: nothing selected
    return json.loads(out.read_text())


def test_not_kafka_collects_no_test_that_uses_a_broker(tmp_path):
    units = _collect(tmp_path, "not kafka", "tests")
    uses = {n: sorted((KAFKA_FIXTURES | OWN_BROKER_FIXTURES) & set(d["fixtures"])) for n, d in units.items()}
    assert not {n: f for n, f in uses.items() if f}
    assert not [n for n, d in units.items() if d["kafka"]]
    # the unit tests stay: a simulator run, a broker test that needs no broker
    for unit in ("tests/unit/test_sim_engine.py::test_persist_buffer_follows_eq2",
                 "tests/kafka/test_broker.py::test_unreachable_broker_names_the_address"):
        assert unit in units


def test_tests_that_start_a_broker_of_their_own_are_kafka_tests(tmp_path):
    kafka = _collect(tmp_path, "kafka", "tests/kafka/test_broker.py", "tests/system/test_kafka_cluster_cli.py")
    assert {n.split("::")[1] for n in kafka if n.startswith("tests/kafka/test_broker.py")} == {
        "test_produce_consume_restart_keeps_data",  # a LocalBroker it starts
        "test_two_brokers_side_by_side",            # bootstrap
        "test_port_in_use_is_named",                # a broker start refused: its port is taken
        "test_topic_admin_and_run_cleanup",         # bootstrap
        "test_cli_start_status_stop"}               # `edgestream broker start`
    assert "tests/system/test_kafka_cluster_cli.py::test_broker_start_nodes_3_status_stop" in kafka
    assert all(d["kafka"] for d in kafka.values())


def test_loadgroup_keeps_a_module_fixtures_tests_on_one_worker() -> None:
    """conftest groups the tests of a module-scoped fixture (xdist_group, `--dist loadgroup`), so the fixture is
    made once, on one worker. Under pytest 9 that needs the "@group" suffix on the item's id where pytest reads it
    (conftest `_group_id`; xdist 3.8 writes it where pytest < 9 reads it): a real 2-worker run of a file with one
    module fixture (tests/unit/test_streams_rates.py's `models`) and tests without it."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
                           "no:cacheprovider", "tests/unit/test_streams_rates.py"], cwd=TESTS.parent,
                          env=os.environ | {"PYTEST_ADDOPTS": ""}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = [line.split() for line in proc.stdout.splitlines() if line.startswith("[gw") and " PASSED " in line]
    grouped = {words[0] for words in ran if words[-1].endswith("@test_streams_rates.py")}
    free = [words[-1] for words in ran if "@" not in words[-1]]
    assert len(ran) >= 20 and free, proc.stdout[-3000:]
    assert len(grouped) == 1, (grouped, proc.stdout[-3000:])  # every test of the fixture on one worker
    assert sum(words[-1].endswith("@test_streams_rates.py") for words in ran) >= 5
