"""One locked set of versions (issue 34): requirements.lock, universal for Python 3.11 and 3.12, is what the
Makefile's venvs (`make install`, the py312 venv), every Dockerfile and CI (through the Makefile) install from.
These checks fail when the lock, pyproject.toml, the running venv or a Dockerfile drift apart, with one line
per problem naming the package (or the Dockerfile's command). Regenerate the lock with `make lock`."""

from __future__ import annotations

import posixpath
import re
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker, default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
DOCKERFILES = sorted((ROOT / "docker").glob("Dockerfile*"))


@dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: str
    marker: Marker | None
    line: int

    def applies(self, env: dict[str, str]) -> bool:
        return self.marker is None or self.marker.evaluate(env)


def read_lock(path: Path) -> tuple[dict[str, list[Pin]], list[str]]:
    """The lock's pins by canonical name (a universal lock may pin one name twice, under disjoint markers),
    and the lines that are not an exact pin."""
    pins: dict[str, list[Pin]] = {}
    problems = []
    for no, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            req = Requirement(line)
        except Exception as e:  # any unparsable line is a problem to report
            problems.append(f"{path.name}:{no}: not a requirement ({e}): {raw!r}")
            continue
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            problems.append(f"{req.name}: {path.name}:{no} does not pin one version: {raw.strip()!r}")
            continue
        name = canonicalize_name(req.name)
        pins.setdefault(name, []).append(Pin(name, specs[0].version, req.marker, no))
    return pins, problems


def pin_for(pins: dict[str, list[Pin]], name: str, env: dict[str, str]) -> Pin | None:
    applying = [p for p in pins.get(canonicalize_name(name), []) if p.applies(env)]
    return applying[0] if applying else None


def target_env(python: str, machine: str = "x86_64") -> dict[str, str]:
    """The marker environment of a Linux CPython `python` (3.11 or 3.12) on `machine`: the venvs and images."""
    env = dict(default_environment())
    env.update(
        python_version=python,
        python_full_version=f"{python}.0",
        platform_machine=machine,
        sys_platform="linux",
        platform_system="Linux",
        os_name="posix",
        implementation_name="cpython",
        platform_python_implementation="CPython",
    )
    return env


# the venvs and the CPU/CUDA images (3.11, x86_64), the py312 venv (3.12), the Jetson image (3.12, arm64)
TARGETS = {"3.11/x86_64": target_env("3.11"), "3.12/x86_64": target_env("3.12"),
           "3.12/aarch64": target_env("3.12", "aarch64")}


def pyproject_requirements(path: Path) -> list[Requirement]:
    project = tomllib.loads(path.read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]


def lock_problems(lock: Path, pyproject: Path = PYPROJECT) -> list[str]:
    """Every dependency of pyproject (and its dev extra) pinned in the lock for each target, inside pyproject's range."""
    pins, problems = read_lock(lock)
    for req in pyproject_requirements(pyproject):
        for target, env in TARGETS.items():
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            pin = pin_for(pins, req.name, env)
            if pin is None:
                problems.append(f"{req.name}: pyproject.toml requires {req}, {lock.name} has no pin for it ({target})")
            elif not req.specifier.contains(pin.version, prereleases=True):
                problems.append(f"{req.name}: {lock.name} pins {pin.version} (line {pin.line}), outside pyproject.toml's "
                                f"range {req.specifier} ({target})")
    return sorted(set(problems))


def host_torch(prefix: str = sys.prefix) -> dict[str, str]:
    """{name: version} of the distributions a `make install TORCH=host` venv links from the host interpreter
    (scripts/host_torch.py writes them to VENV/host-torch.txt); {} in a venv made from the lock."""
    record = Path(prefix) / "host-torch.txt"
    if not record.exists():
        return {}
    pairs = (ln.split("==", 1) for ln in record.read_text().splitlines() if ln.strip() and not ln.startswith("#"))
    return {canonicalize_name(name): version for name, version in pairs}


def _requires(name: str, extras: frozenset[str], env: dict[str, str]) -> list[Requirement]:
    out = []
    for r in metadata.requires(name) or []:
        req = Requirement(r)
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""})):
            out.append(req)
    return out


def installed_problems(lock: Path, pyproject: Path = PYPROJECT, host: dict[str, str] | None = None) -> list[str]:
    """The running venv against the lock: every pin that applies here is installed at its version (a local label
    such as 2.15.0+cpu matches 2.15.0, as pip's constraint does), and every package that pyproject's dependencies
    pull in here, transitively, has a pin. A venv made with `make install TORCH=host` runs the host's torch and what
    it needs (`host_torch()`): those are the host's versions, not the lock's."""
    env = dict(default_environment())
    pins, problems = read_lock(lock)
    host = host_torch() if host is None else host
    for name, plist in sorted(pins.items()):
        pin = next((p for p in plist if p.applies(env)), None)
        if pin is None or name in host:
            continue
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name}: {lock.name} pins {pin.version} (line {pin.line}), not installed in this venv")
            continue
        if not SpecifierSet(f"=={pin.version}").contains(have, prereleases=True):
            problems.append(f"{name}: installed {have}, {lock.name} pins {pin.version} (line {pin.line})")
    # the closure of pyproject's requirements in this environment, by installed metadata
    todo = [(r, "pyproject.toml") for r in pyproject_requirements(pyproject)
            if r.marker is None or r.marker.evaluate({**env, "extra": ""})]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, needed_by = todo.pop()
        name, extras = canonicalize_name(req.name), frozenset(req.extras)
        if (name, extras) in seen or name in host:
            continue
        seen.add((name, extras))
        if pin_for(pins, name, env) is None:
            problems.append(f"{name}: needed by {needed_by} here, {lock.name} has no pin for it")
        try:
            deps = _requires(name, extras, env)
        except metadata.PackageNotFoundError:
            problems.append(f"{name}: needed by {needed_by}, not installed in this venv")
            continue
        todo += [(d, name) for d in deps]
    return sorted(set(problems))


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        word, _, rest = cur.partition(" ")
        out.append((word.upper(), rest.strip()))
        cur = ""
    return out


_PIP_INSTALL = re.compile(r"\bpip3?\s+install\b")
_CONSTRAINT = re.compile(r"(?:^|\s)(?:-c|--constraint)(?:\s+|=)(\S+)")


def dockerfile_problems(path: Path, text: str | None = None) -> list[str]:
    """Every `pip install` in every stage takes the lock as a constraint (-c), and that stage copies the lock to it."""
    text = path.read_text() if text is None else text
    problems = []
    copied: set[str] = set()
    workdir = "/"
    for word, args in _instructions(text):
        if word == "FROM":
            copied, workdir = set(), "/"
        elif word == "WORKDIR":
            workdir = posixpath.join(workdir, args)
        elif word in ("COPY", "ADD"):
            parts = [a for a in args.split() if not a.startswith("--")]
            if len(parts) >= 2 and "requirements.lock" in [Path(p).name for p in parts[:-1]]:
                dest = parts[-1] + ("requirements.lock" if parts[-1].endswith("/") else "")
                copied.add(posixpath.normpath(posixpath.join(workdir, dest)))
        elif word == "RUN":
            for cmd in re.split(r"&&|\|\||;", args):
                if not _PIP_INSTALL.search(cmd):
                    continue
                m = _CONSTRAINT.search(cmd)
                if m is None or Path(m.group(1).strip("\"'")).name != "requirements.lock":
                    problems.append(f"{path.name}: `{cmd.strip()}` installs without -c requirements.lock")
                elif posixpath.normpath(posixpath.join(workdir, m.group(1).strip("\"'"))) not in copied:
                    problems.append(f"{path.name}: `{cmd.strip()}` constrains with {m.group(1)}, "
                                    f"which this stage does not COPY requirements.lock to")
    return problems


def test_lock_pins_every_pyproject_dependency_inside_its_range():
    assert LOCK.exists(), "requirements.lock is missing: `make lock`"
    problems = lock_problems(LOCK)
    assert not problems, "requirements.lock and pyproject.toml disagree (`make lock`):\n" + "\n".join(problems)


def test_running_venv_has_the_locked_versions():
    problems = installed_problems(LOCK)
    assert not problems, ("this venv drifted from requirements.lock (`rm .venv/.installed-*; make install` reinstalls "
                          "from it; .venv312/.installed for the py312 venv):\n"
                          + "\n".join(problems))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_installs_with_the_lock(dockerfile):
    problems = dockerfile_problems(dockerfile)
    assert not problems, "\n".join(problems)
    assert "pip install" in dockerfile.read_text()


def test_makefile_venvs_and_ci_install_from_the_lock():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOCK\s*:=\s*requirements\.lock\s*$", make, re.M)
    # both venvs' recipes: stamped on the lock, every install constrained by it
    for stamp in ("$(STAMP):", "$(STAMP312):"):
        recipe = make.split(stamp, 1)[1].split("\n\n", 1)[0]
        assert "$(LOCK)" in recipe.splitlines()[0], f"{stamp} is not rebuilt when the lock changes"
        installs = [ln for ln in recipe.splitlines() if re.search(r"\bpip install\b", ln)]
        # uv itself, then the venv with uv (.venv: TORCH=lock, or TORCH=host: the lock less the host's torch closure)
        assert len(installs) == (3 if stamp == "$(STAMP):" else 2), recipe
        assert installs and all("-c $(LOCK)" in ln for ln in installs), recipe
    assert "--universal" in make.split("\nlock:", 1)[1].split("\n\n", 1)[0]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\b", ci, re.M) and re.search(r"^make test-py312\b", ci, re.M)
    assert "pip install" not in ci, "CI installs through the Makefile (from the lock), not on its own"


def _drifted(tmp_path: Path, name: str, version: str | None) -> Path:
    """A copy of the lock with `name`'s pin changed to `version` (None: its line removed)."""
    lines = []
    for line in LOCK.read_text().splitlines():
        head = line.split(";", 1)[0].split("#", 1)[0].strip()
        if "==" in head and canonicalize_name(head.split("==", 1)[0]) == canonicalize_name(name):
            if version is None:
                continue
            line = line.replace(head, f"{head.split('==', 1)[0]}=={version}", 1)
        lines.append(line)
    out = tmp_path / "requirements.lock"
    out.write_text("\n".join(lines) + "\n")
    assert out.read_text() != LOCK.read_text(), name
    return out


@pytest.mark.parametrize("name, version, check", [
    ("rich", "13.7.0", installed_problems),         # inside pyproject's range, not what this venv runs
    ("idna", "3.1", installed_problems),            # a transitive pin
    ("numpy", "1.25.2", lock_problems),             # below pyproject's numpy>=1.26
    ("confluent-kafka", "3.0.0", lock_problems),    # above pyproject's <3
    ("xxhash", None, lock_problems),                # a direct dependency left out
    ("xxhash", None, installed_problems),
    ("mdurl", None, installed_problems),            # a transitive one left out (markdown-it-py's, via rich)
])
def test_a_drifted_lock_is_caught_naming_the_package(tmp_path, name, version, check):
    assert not check(LOCK)
    problems = check(_drifted(tmp_path, name, version))
    assert problems, f"{name} drifted to {version} went unnoticed"
    assert all(p.startswith(f"{name}: ") for p in problems), problems


def test_a_host_torch_venv_takes_the_host_versions_of_what_it_linked(tmp_path):
    """`make install TORCH=host`: the distributions linked from the host are the host's (any version), the rest of
    the lock is still checked."""
    drifted = _drifted(tmp_path, "torch", "2.4.0")
    assert [p for p in installed_problems(drifted, host={}) if p.startswith("torch: ")]
    (tmp_path / "host-torch.txt").write_text("# linked from /opt/python by scripts/host_torch.py\ntorch==2.4.0\n")
    host = host_torch(str(tmp_path))
    assert host == {"torch": "2.4.0"}
    assert not [p for p in installed_problems(drifted, host=host) if p.startswith("torch: ")]
    other = _drifted(tmp_path, "rich", "13.7.0")
    assert [p for p in installed_problems(other, host=host) if p.startswith("rich: ")]


def test_a_dockerfile_installing_without_the_lock_is_caught():
    path = ROOT / "docker" / "Dockerfile"
    text = path.read_text()
    assert not dockerfile_problems(path, text)
    unconstrained = re.sub(r"\s(?:-c|--constraint)(?:\s+|=)\S*requirements\.lock", "", text, count=1)
    assert unconstrained != text
    problems = dockerfile_problems(path, unconstrained)
    assert len(problems) == 1 and "without -c requirements.lock" in problems[0], problems
    uncopied = re.sub(r"^COPY (\S*requirements\.lock).*$", "", text, count=1, flags=re.M)
    assert uncopied != text
    problems = dockerfile_problems(path, uncopied)
    assert problems and all("does not COPY requirements.lock" in p for p in problems), problems
