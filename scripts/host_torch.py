"""`make install TORCH=host`: the venv uses the torch another interpreter already has -- a GPU host's CUDA build, a
Jetson's JetPack wheel, a cluster image's -- instead of the lock's (PyPI's) build, which may not match the host's
driver or be published for it at all (docs/runtime.md, "Your own torch").

    python scripts/host_torch.py --host PYTHON --venv .venv --lock requirements.lock

Run by the venv's own Python (the stdlib alone: the venv holds nothing yet). It asks the host interpreter `PYTHON`
for torch's installed closure (torch and, transitively, what it requires that is installed there: triton, the CUDA
libraries, sympy, ...), then:

* links each of those distributions' top-level files (packages, modules, .dist-info) into `VENV/host-torch/`, a
  folder a `.pth` file puts on the venv's path after its own site-packages: the host's files are never inside the
  venv's site-packages, so no installer run on the venv can remove or overwrite them, and a package the venv
  installs itself comes first;
* writes `VENV/host-torch.txt`: `name==version` of every linked distribution (tests/unit/test_lock.py takes these
  as the host's, not the lock's);
* writes `VENV/host-torch-reqs.txt`: the lock's pins less those distributions, which the Makefile installs with
  --no-deps (the rest of the lock, at the lock's versions), then checks the whole with `pip check`.

Refuses, in one line naming what to change, an interpreter without torch, or one of another Python version than
the venv's (compiled packages are built for one).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

# runs in the host interpreter: torch's installed closure (with the extras each requirement names; a requirement
# whose marker is false there is linked if it is installed anyway: harmless), each distribution's top-level entries
_CLOSURE = r"""
import json, re, sys
from importlib import metadata
def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()
try:
    metadata.distribution("torch")
except metadata.PackageNotFoundError:
    print(json.dumps({"python": list(sys.version_info[:2]), "dists": None})); sys.exit(0)
seen, todo, out = set(), [("torch", frozenset())], {}
while todo:
    name, extras = todo.pop()
    name = canon(name)
    if (name, extras) in seen:
        continue
    seen.add((name, extras))
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    if name not in out:
        entries = set()
        for f in dist.files or []:
            parts = f.parts
            if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith(".pth"):
                continue
            entries.add(str(dist.locate_file(parts[0])))
        if not entries and getattr(dist, "_path", None) is not None:  # no RECORD (conda): top_level.txt + metadata
            site = dist._path.parent
            entries.add(str(dist._path))
            for top in (dist.read_text("top_level.txt") or "").split():
                entries.update(str(p) for p in site.glob(top + "*") if p.name == top or p.name.startswith(top + "."))
        out[name] = {"name": name, "version": dist.version, "entries": sorted(entries)}
    for req in dist.requires or []:
        spec, _, marker = req.partition(";")
        wanted = re.search(r"extra\s*==\s*[\x27\x22]([^\x27\x22]+)[\x27\x22]", marker)
        if wanted and canon(wanted.group(1)) not in extras:
            continue
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", spec)
        if m:
            todo.append((m.group(1), frozenset(canon(e) for e in (m.group(2) or "").split(",") if e.strip())))
print(json.dumps({"python": list(sys.version_info[:2]), "dists": list(out.values())}))
"""

LINKS = "host-torch"
RECORD = "host-torch.txt"
REQS = "host-torch-reqs.txt"


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def host_closure(host: str) -> list[dict]:
    try:
        got = subprocess.run([host, "-c", _CLOSURE], capture_output=True, text=True, timeout=120)
    except OSError as exc:
        sys.exit(f"TORCH=host: cannot run PYTHON={host}: {exc}")
    if got.returncode != 0:
        sys.exit(f"TORCH=host: PYTHON={host} failed to list its packages:\n{got.stderr.strip()}")
    answer = json.loads(got.stdout)
    if answer["dists"] is None:
        sys.exit(f"TORCH=host: PYTHON={host} has no torch installed; install your torch build into that interpreter "
                 "(or name the one that has it), or leave TORCH unset for the lock's")
    if tuple(answer["python"]) != sys.version_info[:2]:
        have = ".".join(map(str, answer["python"]))
        mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
        sys.exit(f"TORCH=host: PYTHON={host} is Python {have}, this venv's is {mine}: make the venv with that "
                 f"interpreter (rm -rf the venv, then make install TORCH=host PYTHON={host})")
    return answer["dists"]


def link(dists: list[dict], venv: Path, site: Path | None = None) -> Path:
    """The host's files of `dists` linked into venv/host-torch, put on the path by a .pth file in `site` (the
    venv's site-packages: the running interpreter's)."""
    folder = venv / LINKS
    if folder.exists():  # made again from the host's files as they are now (links only: the host's files stay)
        for entry in folder.iterdir():
            entry.unlink()
    folder.mkdir(exist_ok=True)
    for dist in dists:
        for entry in dist["entries"]:
            target = Path(entry)
            if not target.exists():
                continue
            dest = folder / target.name
            if dest.is_symlink() and dest.resolve() == target.resolve():
                continue  # a namespace folder (nvidia/) shared by several distributions
            if dest.exists() or dest.is_symlink():
                sys.exit(f"TORCH=host: {target.name} is both {dest.resolve()} and {target} on the host")
            dest.symlink_to(target)
    site = Path(sysconfig.get_paths()["purelib"]) if site is None else site
    (site / "edgestream-host-torch.pth").write_text(f"{folder.resolve()}\n")
    # the venv's own copy of one of them (setuptools, which `python -m venv` may install) would come first
    names = {d["name"] for d in dists}
    own = [p.name.split("-")[0] for p in site.glob("*.dist-info") if canon(p.name.split("-")[0]) in names]
    if own:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", *own], check=True)
    return folder


def lock_without(lock: Path, names: set[str]) -> str:
    """The lock's requirement lines (markers kept, comments dropped) less the pins of `names`."""
    out = []
    for raw in lock.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if m and canon(m.group(1)) in names:
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", required=True, help="the interpreter whose torch the venv uses")
    ap.add_argument("--venv", type=Path, required=True)
    ap.add_argument("--lock", type=Path, required=True)
    args = ap.parse_args()
    if Path(sys.prefix).resolve() != args.venv.resolve():
        sys.exit(f"host_torch.py runs with the venv's own Python ({args.venv}/bin/python), not {sys.executable}")
    dists = host_closure(args.host)
    torch = next(d for d in dists if d["name"] == "torch")
    if not any(Path(e).name == "torch" for e in torch["entries"]):
        sys.exit(f"TORCH=host: torch {torch['version']} of PYTHON={args.host} lists none of its files (no RECORD, no "
                 "top_level.txt), so it cannot be linked; install it with pip there, or leave TORCH unset")
    link(dists, args.venv)
    names = {d["name"] for d in dists}
    pins = "".join(f"{d['name']}=={d['version']}\n" for d in sorted(dists, key=lambda d: d["name"]))
    head = f"# linked from {args.host} by scripts/host_torch.py (make install TORCH=host)\n"
    (args.venv / RECORD).write_text(head + pins)
    (args.venv / REQS).write_text(lock_without(args.lock, names))
    print(f"TORCH=host: torch {torch['version']} and {len(dists) - 1} packages it needs, from {args.host} "
          f"(linked in {args.venv / LINKS}); the rest from {args.lock}")


if __name__ == "__main__":
    main()
