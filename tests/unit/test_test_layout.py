"""The test suite's own layout (issue 30 item 5; README.md, "Tests"): every test file sits in one of three folders,

* tests/unit/   needs no broker and starts no run's processes (the simulator and the lockstep engine run in the
                test's process; short subprocesses such as `--help` or an import probe are fine);
* tests/kafka/  talks to a Kafka broker (the `kafka` marker, applied by tests/conftest.py) but starts no run;
* tests/system/ whole runs: orchestrators, trainers and the parameter server as processes, multi-node clusters,
                broker outages under a run, network namespaces;

(tests/testbed/ apart: the compose testbed on a real Docker Engine, `make test-testbed`), a test file's basename is
unique (conftest names files by basename), and no test file imports another: what test files share lives in
tests/factories.py and tests/support/ (tests/conftest.py puts tests/ on sys.path)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FOLDERS = ("unit", "kafka", "system")
APART = ("testbed",)  # collected by `make test-testbed` only (pyproject.toml's norecursedirs)


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _test_files() -> list[Path]:
    return [p for p in _python_files() if p.name.startswith("test_")]


def _imported(path: Path) -> set[str]:
    """The top-level names of every module `path` imports, at module level or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level > 0:  # from . import test_x / from .test_x import y
            names |= {node.module.split(".")[0]} if node.module else {alias.name for alias in node.names}
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value.split(".")[0])
    return names


def test_every_test_file_sits_in_unit_kafka_or_system():
    misplaced = [str(p.relative_to(TESTS)) for p in _test_files()
                 if p.parent.parent != TESTS or p.parent.name not in FOLDERS + APART]
    assert not misplaced, (f"test files outside tests/{{{','.join(FOLDERS)}}}/: {misplaced} -- move each to the folder "
                           "its heaviest test belongs to (README.md, \"Tests\")")
    for folder in FOLDERS:
        assert list((TESTS / folder).glob("test_*.py")), f"tests/{folder}/ holds no test file"


def test_test_file_basenames_are_unique():
    twice = {name: n for name, n in Counter(p.name for p in _test_files()).items() if n > 1}
    assert not twice, f"test files of one basename in two folders (conftest names files by basename): {twice}"


def test_no_file_imports_a_test_file():
    test_modules = {p.stem for p in _test_files()}
    offenders = {str(p.relative_to(TESTS)): sorted(_imported(p) & test_modules) for p in _python_files()}
    offenders = {path: names for path, names in offenders.items() if names}
    assert not offenders, (f"imports of test files: {offenders} -- move what they share to tests/factories.py or a "
                           "module of tests/support/")


def test_the_import_check_sees_every_form_of_import(tmp_path):
    """The check above is only as good as `_imported`: each way of importing a module by name is seen."""
    probe = tmp_path / "probe.py"
    probe.write_text("import test_a\nimport test_b.sub as b\nfrom test_c import x\nfrom .test_d import y\n"
                     "from . import test_e\nimport importlib\n\n\ndef f():\n    from test_f import z\n"
                     "    return importlib.import_module('test_g.sub')\n")
    assert {"test_a", "test_b", "test_c", "test_d", "test_e", "test_f", "test_g"} <= _imported(probe)


def test_unit_holds_no_kafka_test_and_every_kafka_file_holds_one():
    """The `kafka` marker (tests/conftest.py `needs_kafka`) against the folders: no test in tests/unit/ needs a
    broker, and every file in tests/kafka/ has at least one test that does. Collection only, in a subprocess."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "kafka",
                           "tests/unit", "tests/kafka"], cwd=TESTS.parent, env=os.environ | {"PYTEST_ADDOPTS": ""},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = {line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line}
    assert not {f for f in files if f.startswith("tests/unit/")}, "unit test files with tests that need a broker"
    kafka_files = {f"tests/kafka/{p.name}" for p in (TESTS / "kafka").glob("test_*.py")}
    assert kafka_files - files == set(), "files in tests/kafka/ without a test that needs a broker: unit tests?"
