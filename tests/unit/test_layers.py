"""The package's layering (issue 30, item 3): no import cycle among module-level imports, and the named upward
imports stay gone. Imports under `if TYPE_CHECKING:` do not count; imports inside functions count only where
said (they are the measured start-up exceptions)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "edgestream"


def _modules() -> dict[str, Path | None]:
    mods: dict[str, Path | None] = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    for p in PKG.rglob("*.so"):  # compiled extensions: leaves
        mods.setdefault(".".join((p.relative_to(ROOT).parent / p.name.split(".")[0]).parts), None)
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(mod: str, *, in_functions: bool) -> set[str]:
    """The edgestream modules `mod` imports (at module level; with `in_functions`, inside functions too)."""
    path = MODULES[mod]
    if path is None:
        return set()
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and (in_functions or not inner):
                if isinstance(child, ast.Import):
                    names = [a.name for a in child.names]
                else:
                    base = child.module or ""
                    if child.level:
                        parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                        base = ".".join(parts[: len(parts) - child.level + 1] + ([base] if base else []))
                    names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in child.names]
                out.update(r for n in names if n.startswith("edgestream") and (r := _resolve(n)) and r != mod)
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_cycle_among_module_level_imports() -> None:
    cycles = _cycles({m: _imports(m, in_functions=False) for m in MODULES})
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("pair", [
    ("edgestream.compression.base", "edgestream.compression.error_feedback"),
    ("edgestream.config.load", "edgestream.config.check"),
    ("edgestream.launch.command", "edgestream.launch.orchestrator"),
    ("edgestream.kafka.status", "edgestream.kafka.status_external"),
], ids=lambda p: p[0].rpartition(".")[2])
def test_closed_cycles_stay_closed_counting_function_imports(pair: tuple[str, str]) -> None:
    """The cycles issue 30 named, closed: not even an import inside a function goes back."""
    graph = {m: _imports(m, in_functions=True) for m in MODULES}
    cycles = [c for c in _cycles(graph) if set(pair) <= set(c)]
    assert not cycles, " <-> ".join(cycles[0])


def _all_imports(folder: str) -> dict[str, set[str]]:
    return {m: _imports(m, in_functions=True) for m in MODULES if m == folder or m.startswith(folder + ".")}


@pytest.mark.parametrize("upper", ["edgestream.consumers", "edgestream.producers", "edgestream.trainer",
                                   "edgestream.launch", "edgestream.runner", "edgestream.sim", "edgestream.ps"])
def test_kafka_does_not_import_upward(upper: str) -> None:
    """kafka/ (the broker, topics, clients, status) knows nothing of the processes that use it."""
    bad = {m: sorted(n for n in names if n == upper or n.startswith(upper + "."))
           for m, names in _all_imports("edgestream.kafka").items()}
    assert not any(bad.values()), {m: n for m, n in bad.items() if n}


@pytest.mark.parametrize("upper", ["edgestream.consumers", "edgestream.producers"])
def test_runner_does_not_import_consumers_or_producers(upper: str) -> None:
    """runner/ (the plan, the driver, the run) is engine-neutral: a run's Kafka consumers and producer are built
    from its plan beside them (consumers/from_plan.py, producers/from_plan.py), not by the plan."""
    bad = {m: sorted(n for n in names if n == upper or n.startswith(upper + "."))
           for m, names in _all_imports("edgestream.runner").items()}
    assert not any(bad.values()), {m: n for m, n in bad.items() if n}


def test_launch_does_not_import_the_trainers_dispatch_table() -> None:
    """The orchestrator registers the local engine with sync.requests.REQUESTS, the same set as the trainer's
    table (checked here), without importing the trainer's performer side."""
    bad = {m: names for m, names in _all_imports("edgestream.launch").items() if "edgestream.trainer.handlers" in names}
    assert not bad, bad
    import edgestream.launch  # noqa: F401 - registers "local"
    from edgestream.runner.engines import engine
    from edgestream.sync.requests import REQUESTS
    from edgestream.trainer.handlers import PERFORMS

    assert PERFORMS == REQUESTS == engine("local").performs
