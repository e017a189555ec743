"""The three images as users build them (issue 34, item 3), on a real Docker Engine: docker/Dockerfile (CPU),
docker/Dockerfile.cuda and docker/Dockerfile.jetson (arm64 binaries, run through qemu-user binfmt) are built against the
stand-in bases of scripts/testbed/bases.sh (Debian packages; no image registry needed), and in each built image
edgestream is imported and the simulator runs a tiny config. The CPU image's size and every build's time are
printed (`IMAGE ...` lines) and, with TESTBED_IMAGES_REPORT=path, written there as JSON.

The CUDA and Jetson images always build on the stand-ins (the real bases are many GB and need NVIDIA's runtime); the
CPU image on python:3.11.11-slim-bookworm where a registry gives it, else on the stand-in (as test_compose_up.py does:
same tag and build arguments, one layer cache). Run by `make test-images` (scripts/testbed/engine.sh first: it installs and starts the engine where missing).
TORCH_INDEX_URL: the CPU image's torch index; default the Dockerfile's own (PyTorch's CPU wheel index) when it answers,
else PyPI (its Linux torch is the CUDA build: the image then carries CUDA libraries and the test says so).
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest
from docker_helpers import CPU_INDEX, PYPI, answers, pullable, sh, tail

PREFIX = "edgestream-testbed"  # tags of the images this test builds (kept: they are the layer cache of the next run)
PYTHON_BASE = "python:3.11.11-slim-bookworm"  # docker/Dockerfile's ARG BASE default
TINY = textwrap.dedent("""\
    name: tiny
    seed: 1
    data: {dataset: digits}
    devices:
      count: 2
      rates: {distribution: uniform, low: 30, high: 90}
      compute: {base_s: 0.05, per_sample_s: 0.002}
    model: {name: mlp}
    optim: {lr: 0.05}
    algorithm: {name: scadles, batch: {policy: rate, min: 8, max: 64}, buffer: truncate}
    stop: {target_accuracy: 0.99, max_time_s: 2.0}
    eval: {every_s: 1.0}
""")
# in the container: import edgestream's compiled parts and torch, run the tiny config on the simulator, print the summary
PROBE = ("python -c 'import edgestream, edgestream.data._wirefast, torch, platform; "
         "print(\"PROBE\", platform.machine(), \"torch\", torch.__version__)' && "
         "edgestream run /config/tiny.yaml --engine sim --out /tmp/runs --run-id img --quiet >/dev/null && "
         "cat /tmp/runs/tiny-*-img/summary.json")

pytestmark = pytest.mark.timeout(5400)
REPORT: dict[str, dict] = {}


@pytest.fixture(scope="module")
def bases() -> dict[str, str]:
    """The stand-in bases' tags, built (or found up to date) by scripts/testbed/bases.sh."""
    t0 = time.monotonic()
    res = sh("bash", "scripts/testbed/bases.sh", "all", check=False)
    assert res.returncode == 0, f"bases.sh failed:\n{tail(res.stderr)}"
    tags = dict(line.split("=", 1) for line in res.stdout.split() if "=" in line)
    assert set(tags) == {"python", "cuda", "jetson"}, res.stdout
    REPORT["bases"] = {"seconds": round(time.monotonic() - t0, 1),
                       **{n: {"tag": t, "bytes": image_size(t)} for n, t in tags.items()}}
    return tags


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    for name, entry in REPORT.items():
        print(f"\nIMAGE {name}: {json.dumps(entry)}")
    if os.environ.get("TESTBED_IMAGES_REPORT"):
        Path(os.environ["TESTBED_IMAGES_REPORT"]).write_text(json.dumps(REPORT, indent=2) + "\n")


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("config")
    (d / "tiny.yaml").write_text(TINY)
    d.chmod(0o755)
    (d / "tiny.yaml").chmod(0o644)
    return d


def image_size(tag: str) -> int:
    res = sh("docker", "image", "inspect", "-f", "{{.Size}}", tag, check=False)
    assert res.returncode == 0, res.stderr
    return int(res.stdout.strip())


def build(name: str, dockerfile: str, base: str, *, platform: str | None = None, args: dict | None = None) -> str:
    tag = f"{PREFIX}/{name}:latest"
    # --force-rm: a failed step's container is removed too (the legacy builder keeps it otherwise)
    cmd = ["docker", "build", "--force-rm", "-f", dockerfile, "-t", tag, "--build-arg", f"BASE={base}"]
    for k, v in (args or {}).items():
        cmd += ["--build-arg", f"{k}={v}"]
    if platform:
        cmd += ["--platform", platform]
    t0 = time.monotonic()
    res = sh(*cmd, ".", check=False)
    seconds = round(time.monotonic() - t0, 1)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{tail(res.stdout + res.stderr)}"
    REPORT[name] = {"tag": tag, "build_s": seconds, "bytes": image_size(tag), "base": base, **(args or {})}
    return tag


def probe(tag: str, config_dir: Path, *, platform: str | None = None) -> tuple[str, dict]:
    """Runs PROBE in the image as its user (no network: the simulator needs none); (PROBE line, summary)."""
    cmd = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh",
           "-v", f"{config_dir}:/config:ro"]
    if platform:
        cmd += ["--platform", platform]
    res = sh(*cmd, tag, "-c", PROBE, timeout=1800, check=False)
    assert res.returncode == 0, f"{tag}: probe failed:\n{tail(res.stdout + res.stderr)}"
    line = next(x for x in res.stdout.splitlines() if x.startswith("PROBE"))
    summary = json.loads(res.stdout[res.stdout.index("{"):])
    assert summary["engine"] == "sim" and summary["steps"] > 0 and summary["samples_trained"] > 0, summary
    assert 0.0 <= summary["final_accuracy"] <= 1.0, summary
    return line, summary


def pip_list(tag: str) -> list[str]:
    res = sh("docker", "run", "--rm", "--network", "none", "--entrypoint", "pip", tag, "list", "--format=freeze", check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def torch_index() -> str:
    if os.environ.get("TORCH_INDEX_URL"):
        return os.environ["TORCH_INDEX_URL"]
    return CPU_INDEX if answers(CPU_INDEX + "/torch/") else PYPI


def test_cpu_image(bases, config_dir):
    index = torch_index()
    base = PYTHON_BASE if pullable(PYTHON_BASE) else bases["python"]
    tag = build("cpu", "docker/Dockerfile", base, args={"TORCH_INDEX_URL": index})
    line, summary = probe(tag, config_dir)
    assert "x86_64" in line
    cuda_libs = [p for p in pip_list(tag) if p.lower().startswith("nvidia-")]
    REPORT["cpu"].update(torch=line.split()[-1], cuda_wheels=len(cuda_libs), steps=summary["steps"])
    if index == CPU_INDEX:
        assert not cuda_libs, f"the CPU image carries CUDA libraries: {cuda_libs}"
    else:
        print(f"\n{CPU_INDEX} does not answer: torch from {index}, the image carries {len(cuda_libs)} CUDA wheels")


def test_cuda_image(bases, config_dir):
    tag = build("cuda", "docker/Dockerfile.cuda", bases["cuda"])
    line, summary = probe(tag, config_dir)
    assert "x86_64" in line
    REPORT["cuda"].update(torch=line.split()[-1], steps=summary["steps"])


def test_jetson_image(bases, config_dir):
    # The stand-in's binaries are arm64 (debootstrap --arch arm64): every RUN of the build and the probe run them
    # through qemu-user binfmt. No --platform: Debian's docker.io 20.10 ignores `docker import --platform`, so the
    # stand-in's metadata says amd64 and a build or run asking for linux/arm64 would refuse it.
    # bases.sh registers a qemu-user >= 10 (bookworm-backports on bookworm): 7.2 crashed in `import torch`
    tag = build("jetson", "docker/Dockerfile.jetson", bases["jetson"])
    line, summary = probe(tag, config_dir)
    assert "aarch64" in line, line
    REPORT["jetson"].update(torch=line.split()[-1], steps=summary["steps"], machine="aarch64")
