"""`edgestream --help` and every subcommand's --help work."""

from __future__ import annotations

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from edgestream.cli import app

runner = CliRunner()


def _all_command_paths():
    root = get_command(app)
    paths = []

    def walk(cmd, prefix):
        paths.append(prefix)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*prefix, name])

    walk(root, [])
    return paths


@pytest.mark.parametrize("path", _all_command_paths(), ids=lambda p: " ".join(p) or "edgestream")
def test_help(path):
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_expected_commands_exist():
    paths = {" ".join(p) for p in _all_command_paths()}
    assert {"config validate", "config show", "broker start", "broker status", "broker stop", "demo"} <= paths


# ---------------------------------------------------------------- small CLI defects (issue 19)
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_python_dash_m_edgestream_is_the_cli(tmp_path):
    out = subprocess.run([sys.executable, "-m", "edgestream", "config", "validate", str(ROOT / "examples" / "s1.yaml")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("s1.yaml: valid")


@pytest.mark.parametrize("names", [("s1", "s2"), ("adsp", "testbed-ssp", "s1p")])
def test_config_validate_takes_several_files(names):
    files = [str(ROOT / "examples" / f"{n}.yaml") for n in names]
    result = runner.invoke(app, ["config", "validate", *files])
    assert result.exit_code == 0, result.output
    assert [line for line in result.stdout.splitlines() if line.endswith(": valid")] == [f"{f}: valid" for f in files]


@pytest.mark.parametrize("bad_first", [True, False])
def test_config_validate_checks_every_file_and_names_the_bad_one(tmp_path, bad_first):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nalgorithm: {name: nope}\n")
    other = tmp_path / "other.yaml"
    other.write_text("name: y\ndevices: {count: 0}\n")
    good = str(ROOT / "examples" / "s1.yaml")
    files = [str(bad), good, str(other)] if bad_first else [good, str(bad), str(other)]
    result = runner.invoke(app, ["config", "validate", *files])
    assert result.exit_code == 2
    assert f"{good}: valid" in result.stdout
    errors = result.stderr.splitlines()
    assert any(line.startswith(f"{bad}: algorithm.name") for line in errors), errors
    assert any(line.startswith(f"{other}: devices.count") for line in errors), errors
    assert "2 of 3 config(s) invalid" in errors[-1]


@pytest.mark.parametrize("out", [None, "elsewhere/runs", "/tmp/abs-runs"])
def test_config_show_prints_absolute_paths(tmp_path, monkeypatch, out):
    import yaml

    monkeypatch.chdir(tmp_path)
    args = ["config", "show", str(ROOT / "examples" / "s1.yaml")] + ([] if out is None else ["--set", f"runtime.out={out}"])
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.stdout)["runtime"]["out"]
    assert Path(shown).is_absolute()
    expected = Path(out) if out is not None and Path(out).is_absolute() else tmp_path / (out or "runs/")
    assert Path(shown) == expected


def test_compare_help_lists_every_algorithm():
    from edgestream.sync import ALGORITHMS

    result = runner.invoke(app, ["compare", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    missing = [name for name in ALGORITHMS if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)]
    assert not missing, f"compare --help does not list {missing}"


def test_docs_link_only_files_in_the_repository():
    """Relative links in README and docs/ point at files that exist, and no doc sends readers to DESIGN.md
    (it lives outside the repository)."""
    problems = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        if "DESIGN.md" in text:
            problems.append(f"{doc.name}: mentions DESIGN.md")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                problems.append(f"{doc.name}: link to {target} does not exist")
    assert not problems, problems
