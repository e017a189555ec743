"""What the testbed tests share: the repository root, the package indexes, commands run there, images."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # docker/Dockerfile's TORCH_INDEX_URL default
PYPI = "https://pypi.org/simple"


def tail(text: str, n: int = 30) -> str:
    return "\n".join(text.splitlines()[-n:])


def sh(*args: str, timeout: float = 3600, check: bool = True) -> subprocess.CompletedProcess:
    """`args` run in the repository root; check: a non-zero exit fails with the command and its output's tail."""
    res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"`{' '.join(args)}` exit {res.returncode}:\n{tail(res.stdout + res.stderr)}")
    return res


def pullable(image: str) -> bool:
    """The image is here, or a registry gives it to us."""
    if sh("docker", "image", "inspect", image, check=False).returncode == 0:
        return True
    try:
        return sh("docker", "pull", "-q", image, timeout=300, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=10).close()
        return True
    except Exception:  # noqa: BLE001 - no name, no route, a refusal: it does not answer
        return False
