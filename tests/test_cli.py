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
