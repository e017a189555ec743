"""The engine seam (DESIGN.md "Target layout"): runner/ imports no engine; engines register by name;
sim/ is a performer only (no request loop, run loop or comparison); sync/ holds no engine."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from edgestream.runner import engines

PKG = Path(__file__).resolve().parents[2] / "edgestream"
ENGINE_PACKAGES = ("edgestream.sim", "edgestream.trainer", "edgestream.launch", "edgestream.ps")


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", sorted((PKG / "runner").glob("*.py")), ids=lambda p: p.name)
def test_runner_imports_no_engine(path: Path) -> None:
    bad = [n for n in _imports(path) if any(n == e or n.startswith(e + ".") for e in ENGINE_PACKAGES)]
    assert not bad, f"runner/{path.name} imports {bad}"


@pytest.mark.parametrize("path", sorted((PKG / "sync").glob("*.py")), ids=lambda p: p.name)
def test_sync_does_not_import_the_run_core(path: Path) -> None:
    """sync/ is below runner/: algorithms know requests and their context, not the loop that runs them."""
    bad = [n for n in _imports(path) if n == "edgestream.runner" or n.startswith("edgestream.runner.")]
    assert not bad, f"sync/{path.name} imports {bad}"


def test_importing_the_runner_loads_no_engine() -> None:
    code = ("import sys, edgestream.runner, edgestream.runner.lockstep, edgestream.comparisons; "
            f"print([m for m in sys.modules if m.startswith({ENGINE_PACKAGES!r})])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_sim_is_a_performer_only() -> None:
    files = {p.name for p in (PKG / "sim").glob("*.py")}
    assert not files & {"run.py", "compare.py", "progress.py"}, files
    for path in (PKG / "sim").glob("*.py"):
        tree = ast.parse(path.read_text())
        sends = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "send"]
        assert not sends, f"sim/{path.name}:{sends} drives a generator itself (the request loop is runner.drive)"
    assert not (PKG / "sync" / "driver_local.py").exists()


def test_engines_register_by_name() -> None:
    import edgestream.sim  # noqa: F401  (registers "sim")
    from edgestream.sim.engine import run_sim

    assert engines.get_engine("sim") is run_sim
    assert {"sim", "local"} <= set(engines.engine_names())
    with pytest.raises(engines.EngineUnavailable, match="engine 'warp' is not available"):
        engines.get_engine("warp")

    def fake(cfg, **kw):
        return Path("."), {"engine": "fake"}

    engines.register_engine("fake", fake)
    try:
        from edgestream.runner import run_config

        assert run_config(None, "fake") == (Path("."), {"engine": "fake"})
    finally:
        engines.unregister_engine("fake")
    with pytest.raises(TypeError):
        engines.register_engine("x", "not callable")  # type: ignore[arg-type]
