"""The EDGESTREAM_* environment variables (issue 30, item 4): read in one module, edgestream/settings.py, by one
accessor each, when called; documented in one table (docs/settings.md), which is the module's."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from edgestream import settings
from edgestream.settings import SETTINGS, SettingError

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "edgestream"
NAME = re.compile(r"EDGESTREAM_[A-Z][A-Z0-9_]*")
#: how a module refers to a variable's name without spelling it: `settings.SIM_COMPUTE.name`
SETTING_NAME = re.compile(r"\bsettings\.[A-Z][A-Z0-9_]*\.name$")


def _sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(PKG.rglob("*.py")) if p.name != "settings.py"
            or p.parent != PKG}


def _aliases(sources: dict[str, str]) -> set[str]:
    """Module-level names bound to a variable's name (`COMPUTE_ENV = settings.SIM_COMPUTE.name`); a module
    importing one imports it under the same name."""
    out = set()
    for text in sources.values():
        for node in ast.parse(text).body:
            if isinstance(node, ast.Assign) and SETTING_NAME.search(ast.unparse(node.value)):
                out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def _is_environ(node: ast.AST) -> bool:
    return ast.unparse(node) == "os.environ"


def _reads(tree: ast.AST, aliases: set[str]) -> list[tuple[int, str]]:
    """Reads of an EDGESTREAM_ variable outside the settings module: os.environ (or os.getenv) by a key that is
    not a string constant of another variable; any mapping by a spelled EDGESTREAM_ name or one of
    `aliases` (an `env`/`environ` mapping standing for os.environ); `from os import environ/getenv`."""
    found = []

    def key_is_setting(key: ast.AST) -> bool:
        if isinstance(key, ast.Constant):
            return isinstance(key.value, str) and bool(NAME.fullmatch(key.value))
        return (isinstance(key, ast.Name) and key.id in aliases) or bool(SETTING_NAME.search(ast.unparse(key)))

    def check(node: ast.AST, key: ast.AST | None, on_environ: bool) -> None:
        if key is None:
            return
        if key_is_setting(key) or (on_environ and not (isinstance(key, ast.Constant) and isinstance(key.value, str))):
            found.append((node.lineno, ast.unparse(node)))

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            check(node, node.slice, _is_environ(node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("get", "pop", "setdefault") and node.args:
                check(node, node.args[0], _is_environ(node.func.value))
            elif ast.unparse(node.func) == "os.getenv" and node.args:
                check(node, node.args[0], True)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            check(node, node.left, any(_is_environ(c) for c in node.comparators))
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if {a.name for a in node.names} & {"environ", "getenv", "environb"}:
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_checker_finds_reads() -> None:
    """The check below on a few reads it must find, and on what it must let be."""
    bad = ('os.environ.get("EDGESTREAM_CACHE")', 'os.environ["EDGESTREAM_X"]', '"EDGESTREAM_X" in os.environ',
           "os.environ.get(COMPUTE_ENV)", "env.get(COMPUTE_ENV)", "env.pop(settings.KAFKA_SECRETS.name, None)",
           "os.getenv(name)", "os.environ[name]", "from os import environ")
    for line in bad:
        assert _reads(ast.parse(line), {"COMPUTE_ENV"}), line
    fine = ('os.environ.get("JAVA_HOME")', "env[COMPUTE_ENV] = 'x'", "dict(os.environ)",
            "{k: v for k, v in os.environ.items() if k not in (COMPUTE_ENV,)}", "f'{COMPUTE_ENV}=1'")
    for line in fine:
        assert not _reads(ast.parse(line), {"COMPUTE_ENV"}), line


def test_no_module_but_settings_reads_an_edgestream_variable() -> None:
    sources = _sources()
    aliases = _aliases(sources)
    assert {"COMPUTE_ENV", "MEMORY_ENV", "SECRET_FD_ENV", "TOPIC_SETTINGS_ENV"} <= aliases, aliases
    found = [f"{path}:{n}: {text}" for path, src in sources.items() for n, text in _reads(ast.parse(src), aliases)]
    assert not found, "\n".join(found)


def test_the_variable_names_are_spelled_only_in_the_settings_module() -> None:
    """A name as a string (what a read or a write of the environment needs) only in edgestream/settings.py;
    elsewhere `settings.X.name`. Messages and docs may mention them, as long as each is a setting."""
    spelled, unknown = [], []
    for path, src in _sources().items():
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
                spelled.append(f"{path}:{node.lineno}: {node.value}")
        unknown += [f"{path}: {m}" for m in NAME.findall(src) if m not in SETTINGS]
    assert not spelled, spelled
    assert not unknown, f"not in edgestream/settings.py: {unknown}"


def test_the_docs_table_is_the_modules() -> None:
    doc = (ROOT / "docs" / "settings.md").read_text()
    assert settings.table() in doc, "docs/settings.md: paste `python -m edgestream.settings` over its table"
    assert len(SETTINGS) >= 18 and all(s.meaning and s.allowed and s.default and s.read for s in SETTINGS.values())


def test_defaults_when_unset() -> None:
    env: dict[str, str] = {}
    assert (settings.backend(env), settings.device(env), settings.prefetch(env), settings.cuda_graphs(env)) == (
        "", "", 1, True)
    assert (settings.rendezvous_timeout_s(env), settings.launch_grace_s(env), settings.launch_straggler_s(env),
            settings.ps_restarts(env), settings.ps_checkpoint_s(env)) == (60.0, 10.0, 120.0, 3, 2.0)
    assert settings.fail_at_step(env) is settings.cache(env) is settings.progress_every_s(env) is None
    assert settings.sim_compute(env) is settings.sim_memory_bytes(env) is settings.topic_settings(env) is None
    assert settings.kafka_secrets(env) is settings.kafka_secrets_fd(env) is None
    assert settings.ps_malloc(env) == "tuned"


def test_values_as_before() -> None:
    """What each accessor makes of a value: the readings the modules made before they moved here."""
    assert [settings.prefetch({"EDGESTREAM_PREFETCH": v}) for v in ("0", "2", "9", " 1 ", "x", "-1", "")] == [
        0, 2, 2, 1, 1, 1, 1]
    assert [settings.cuda_graphs({"EDGESTREAM_CUDA_GRAPHS": v}) for v in ("0", " 0", "1", "off")] == [
        False, False, True, True]
    assert [settings.progress_every_s({"EDGESTREAM_PROGRESS_EVERY_S": v}) for v in ("0", "2.5", "-1", "x")] == [
        0.0, 2.5, None, None]
    assert [settings.sim_compute({"EDGESTREAM_SIM_COMPUTE": v}) for v in ("", " Batched ", "x")] == [
        "auto", "batched", "x"]
    assert settings.sim_memory_bytes({"EDGESTREAM_SIM_MEMORY_BYTES": "8e9"}) == 8_000_000_000
    assert settings.ps_malloc({"EDGESTREAM_PS_MALLOC": " Default "}) == "default"
    assert settings.cache({"EDGESTREAM_CACHE": ""}) is None
    assert settings.cache({"EDGESTREAM_CACHE": "/c"}) == Path("/c")
    assert settings.fail_at_step({"EDGESTREAM_TEST_FAIL_AT_STEP": " 6 "}) == 6
    env = {"EDGESTREAM_KAFKA_SECRETS_FD": "3", "EDGESTREAM_KAFKA_SECRETS": "{}"}
    assert (settings.kafka_secrets_fd(env), settings.kafka_secrets(env, drop=True)) == ("3", "{}")
    assert env == {"EDGESTREAM_KAFKA_SECRETS_FD": "3"}


@pytest.mark.parametrize("name, value, accessor, allowed", [
    ("EDGESTREAM_PS_RESTARTS", "many", settings.ps_restarts, "='many' is not allowed; must be an integer"),
    ("EDGESTREAM_LAUNCH_GRACE_S", "", settings.launch_grace_s, "='' is not allowed; must be a number of seconds"),
    ("EDGESTREAM_TEST_FAIL_AT_STEP", "six", settings.fail_at_step,
     "='six' is not allowed; must be a step number (0-based)"),
    ("EDGESTREAM_SIM_MEMORY_BYTES", "-5", settings.sim_memory_bytes, ": '-5' is not allowed; must be > 0"),
    ("EDGESTREAM_SIM_MEMORY_BYTES", "lots", settings.sim_memory_bytes,
     ": 'lots' is not allowed; give a number of bytes"),
])
def test_a_value_not_allowed_is_one_line_naming_the_variable(name, value, accessor, allowed) -> None:
    with pytest.raises(SettingError) as exc:
        accessor({name: value})
    assert str(exc.value) == name + allowed and isinstance(exc.value, ValueError)


def test_read_when_called_not_at_import(monkeypatch) -> None:
    monkeypatch.setenv("EDGESTREAM_RENDEZVOUS_TIMEOUT_S", "5")
    assert settings.rendezvous_timeout_s() == 5.0
    monkeypatch.setenv("EDGESTREAM_RENDEZVOUS_TIMEOUT_S", "7")
    assert settings.rendezvous_timeout_s() == 7.0 and "EDGESTREAM_RENDEZVOUS_TIMEOUT_S" in settings.READ
    monkeypatch.delenv("EDGESTREAM_RENDEZVOUS_TIMEOUT_S")
    assert settings.rendezvous_timeout_s() == 60.0
