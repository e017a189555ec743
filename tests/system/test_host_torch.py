"""`make install TORCH=host` (issue 36 item 2: a GPU host's, a Jetson's own torch), run the way a user runs it: a copy
of the project, `make install TORCH=host PYTHON=<an interpreter that has torch>` (here the project's own venv stands
in for the host's interpreter), then the venv imports that interpreter's torch, none of its own, runs the console
script, builds the C decoders, and passes the lock's check (tests/unit/test_lock.py) with the host's torch taken as
the host's. An interpreter without torch is refused in one line before anything is made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _copy_project(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.split(b"\0")
    for rel in (f.decode() for f in files if f):
        src = ROOT / rel
        if not src.is_file() or rel.startswith("bench-out/"):
            continue
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(src.read_bytes())
    return dest


def _make(project: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    return subprocess.run(["make", "install", *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_a_venv_on_the_hosts_own_torch(tmp_path):
    project = _copy_project(tmp_path / "edgestream")
    host = Path(sys.executable)  # the project's venv, standing in for a GPU host's interpreter with its torch
    got = _make(project, "TORCH=host", f"PYTHON={host}")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "TORCH=host: torch " in got.stdout and "No broken requirements found" in got.stdout, got.stdout
    venv = project / ".venv"
    assert (venv / ".torch").read_text().strip() == "host" and (venv / ".installed-host").exists()
    py = str(venv / "bin" / "python")
    where = subprocess.run([py, "-c", "import os, torch, edgestream.data._wirefast, edgestream.sim._shuffle; "
                            "print(os.path.realpath(torch.__file__)); print(torch.__version__)"],
                           capture_output=True, text=True, check=True).stdout.split()
    host_site = subprocess.run([str(host), "-c", "import os, torch; print(os.path.realpath(torch.__file__))"],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert where[0] == host_site  # the host's own files, not a copy
    own = {p.name.split("-")[0].lower() for p in venv.glob("lib/python*/site-packages/*.dist-info")}
    assert not {"torch", "triton", "nvidia_cublas", "sympy"} & own, own  # nothing of torch's installed in the venv
    linked = dict(ln.split("==") for ln in (venv / "host-torch.txt").read_text().splitlines()
                  if ln and not ln.startswith("#"))
    assert linked["torch"] == where[1].split("+")[0] or linked["torch"] == where[1]
    # the console script, and the lock's check with the host's versions taken as the host's
    assert subprocess.run([str(venv / "bin" / "edgestream"), "--help"], capture_output=True).returncode == 0
    check = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_lock.py"],
                           cwd=project, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    # make again: nothing to do (the venv keeps TORCH=host without naming it)
    again = subprocess.run(["make", "-q", "install"], cwd=project, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    # an unknown TORCH is refused, naming what is allowed
    bad = _make(project, "TORCH=cuda")
    assert bad.returncode != 0 and "TORCH=cuda: must be lock" in bad.stdout + bad.stderr, bad.stdout + bad.stderr


def test_an_interpreter_without_torch_is_refused_before_anything_is_made(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    project = _copy_project(tmp_path / "edgestream")
    got = _make(project, "TORCH=host", f"PYTHON={bare / 'bin' / 'python'}", timeout=120)
    assert got.returncode != 0
    assert f"TORCH=host: PYTHON={bare / 'bin' / 'python'} has no torch" in got.stderr, got.stdout + got.stderr
    assert not (project / ".venv").exists()


def _dist(site: Path, name: str, version: str, requires: list[str], files: list[str] | None) -> None:
    """A distribution installed in `site`: its files (written), METADATA, and a RECORD unless files is None (a conda
    package without one: top_level.txt names its files)."""
    meta = site / f"{name}-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    top = name if files is None else files[0].split("/")[0].removesuffix(".py")
    for rel in files or [f"{name}/__init__.py"]:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(f"__version__ = {version!r}\n")
    if files is None:
        (meta / "top_level.txt").write_text(top + "\n")
    else:
        (meta / "RECORD").write_text("".join(f"{r},,\n" for r in [*files, f"{meta.name}/METADATA",
                                                                   f"{meta.name}/RECORD"]))


def test_the_closure_follows_extras_and_links_a_torch_without_a_record(tmp_path):
    """scripts/host_torch.py against a stand-in host: its torch has no RECORD (as conda installs it), requires a
    package with an extra, whose requirement under that extra is installed; another installed package is
    required only under an extra nobody asks for, one required package is not installed at all."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("host_torch", ROOT / "scripts" / "host_torch.py")
    host_torch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host_torch)
    fake = tmp_path / "host"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fake)], check=True)
    site = Path(subprocess.run([str(fake / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    _dist(site, "torch", "2.15.0", ["fake-dep[cuda]>=1", "not-installed", 'extra-only ; extra == "opt"'], None)
    _dist(site, "fake_dep", "1.0", ['via-extra==2.0 ; extra == "cuda"', "typing-extensions"], ["fake_dep.py"])
    _dist(site, "via_extra", "2.0", [], ["via_extra/__init__.py", "via_extra/lib.so"])
    _dist(site, "extra_only", "1.0", [], ["extra_only.py"])
    dists = host_torch.host_closure(str(fake / "bin" / "python"))
    assert {d["name"]: d["version"] for d in dists} == {"torch": "2.15.0", "fake-dep": "1.0", "via-extra": "2.0"}
    venv, own_site = tmp_path / "venv", tmp_path / "venv-site"
    venv.mkdir()
    own_site.mkdir()
    folder = host_torch.link(dists, venv, own_site)
    assert sorted(p.name for p in folder.iterdir()) == sorted([
        "torch", "torch-2.15.0.dist-info", "fake_dep.py", "fake_dep-1.0.dist-info", "via_extra",
        "via_extra-2.0.dist-info"])
    assert all(p.is_symlink() and p.resolve().parent == site.resolve() for p in folder.iterdir())
    assert (own_site / "edgestream-host-torch.pth").read_text().strip() == str(folder.resolve())
    got = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import torch, "
                          "fake_dep, via_extra; print(torch.__version__, via_extra.__file__)", str(folder)],
                         capture_output=True, text=True, check=True).stdout.split()
    assert got[0] == "2.15.0" and got[1].startswith(str(folder))
    lock = tmp_path / "requirements.lock"
    lock.write_text("torch==2.15.0\n    # via edgestream\nfake-dep==1.0 ; sys_platform == 'linux'\nnumpy==2.4.6\n")
    assert host_torch.lock_without(lock, {d["name"] for d in dists}) == "numpy==2.4.6\n"
    folder_again = host_torch.link(dists, venv, own_site)  # made again: the links as the host's files are now
    assert folder_again == folder and len(list(folder.iterdir())) == 6 and (site / "torch").is_dir()
