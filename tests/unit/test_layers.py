"""The package's layering (issue 30, item 3): no import cycle among edgestream's modules, counting imports inside
functions and under `if TYPE_CHECKING:` too, and the named upward imports stay gone. `from package import name`
counts as an import of the module the package's __init__ takes `name` from (its imports and its lazy
`_EXPORTS` table)."""

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
    for p in [*PKG.rglob("*.so"), *PKG.rglob("*.c")]:  # compiled extensions (built or not yet): leaves
        mods.setdefault(".".join((p.relative_to(ROOT).parent / p.name.split(".")[0]).parts), None)
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _reexports(package: str) -> dict[str, str]:
    """The names a package's __init__ hands on -> the module defining each: its `from X import name` lines and its
    lazy `_EXPORTS` table (edgestream.lazy)."""
    path = MODULES.get(package)
    if path is None or path.name != "__init__.py":
        return {}
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("edgestream") and not node.level:
            out.update((a.asname or a.name, node.module) for a in node.names)
        elif (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets)
              and isinstance(node.value, ast.Dict)):
            out.update((k.value, v.value) for k, v in zip(node.value.keys, node.value.values, strict=True)
                       if isinstance(k, ast.Constant) and isinstance(v, ast.Constant))
    return out


def _imports(mod: str, *, in_functions: bool, type_checking: bool = False) -> set[str]:
    """The edgestream modules `mod` imports (at module level; with `in_functions`, inside functions too; with
    `type_checking`, under `if TYPE_CHECKING:` too). `from package import name` counts as an import of the module
    the package's __init__ takes `name` from, where it re-exports it, and of the package itself otherwise."""
    path = MODULES[mod]
    if path is None:
        return set()
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()

    def target(base: str, name: str) -> str:
        if f"{base}.{name}" in MODULES:
            return f"{base}.{name}"
        source = _reexports(base).get(name) if base != mod else None
        return source if source and source != mod else base

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and not type_checking:
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
                    names = [target(base, a.name) for a in child.names]
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


def test_no_cycle_counting_function_and_type_checking_imports() -> None:
    """Not even an import inside a function or under TYPE_CHECKING goes back: every arrow points one way."""
    cycles = _cycles({m: _imports(m, in_functions=True, type_checking=True) for m in MODULES})
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def _room(module: str) -> str:
    """The room a module stands in: its top-level package or module (edgestream.runner, edgestream.api)."""
    return ".".join(module.split(".")[:2])


def test_no_arrow_runs_back_up_between_rooms() -> None:
    """The rooms (edgestream's packages and top-level modules) stand on floors: no import, not even one inside a
    function or under TYPE_CHECKING, runs from a room to one that imports it (e.g. config's load runs the plan's
    checks, so runner imports nothing of config; metrics reads a target's direction from tasks, not runner)."""
    graph: dict[str, set[str]] = {}
    for m in MODULES:
        graph.setdefault(_room(m), set()).update(
            r for n in _imports(m, in_functions=True, type_checking=True) if (r := _room(n)) != _room(m))
    cycles = _cycles(graph)
    assert not cycles, "rooms that import each other: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_graph_sees_function_imports_and_reexports() -> None:
    """The scan itself: a function-level import counts, and `from edgestream.data import load_dataset` is an
    import of edgestream.data.datasets (the lazy table's module), not only of the package."""
    assert "edgestream.tasks" not in _imports("edgestream.data.entry", in_functions=False)
    assert "edgestream.tasks" in _imports("edgestream.data.entry", in_functions=True)
    assert _reexports("edgestream.data")["load_dataset"] == "edgestream.data.datasets"
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("pair", [
    ("edgestream.plugins", "edgestream.tasks"),
    ("edgestream.data.formats", "edgestream.data.datasets"),
    ("edgestream.data.records.base", "edgestream.data.records.values"),
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


def test_launch_declares_what_the_trainers_performer_performs() -> None:
    """The orchestrator registers the local engine with sync.requests.REQUESTS, without importing the trainer's
    performer (torch); that set is what TrainerPerformer's do_* methods perform (checked here)."""
    bad = {m: names for m, names in _all_imports("edgestream.launch").items()
           if "edgestream.trainer.performer" in names or "edgestream.trainer" in names}
    assert not bad, bad
    import edgestream.launch  # noqa: F401 - registers "local"
    from edgestream.runner.engines import engine
    from edgestream.sync.requests import REQUESTS
    from edgestream.trainer.performer import TrainerPerformer

    assert TrainerPerformer.performs == REQUESTS == engine("local").performs
