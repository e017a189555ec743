"""The compose testbed on a real Docker Engine (issue 34, item 1), brought up by testcontainers' DockerCompose
from docker-compose.yml itself (plus tests/testbed/compose.testbed.yml: the broker's image as a setting, no
port published on the host, the project's network internal), on a small config:

- the `cpu` profile (broker, producer, trainer-0, trainer-1) trains ScaDLES to its target accuracy, the producer
  is stopped (its summary line), `collect` writes the run directory and its summary is read and checked;
- the `cpu` + `ps` profiles train SSP through the Kafka parameter server, `collect` merges the PS;
- the `cpu` + `devices` profiles: the run publishes model versions, device-0 and device-1 follow them and
  report each version's accuracy on their own streams, rising to well above chance for the final version;
- a copy of the compose file with a wrong argument in the trainers' command fails, and the failure carries
  the trainer container's own log line;
- after each, `down -v` leaves no container, network or volume with the project's label.

Not part of `make test` (pyproject's norecursedirs): `make test-testbed` runs scripts/testbed/engine.sh first
(Docker Engine and the Compose v2 plugin installed and started where missing) and then this folder. Where an
image registry cannot be reached the images are built from stand-ins: the Python base of
scripts/testbed/bases.sh (Debian packages) for docker/Dockerfile (`--build-arg BASE=`), and for the broker the
apache/kafka stand-in of scripts/testbed/kafka-image.sh. Docker's layer cache keeps them for the next run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from docker_helpers import CPU_INDEX, PYPI, ROOT, answers, pullable, sh, tail
from testcontainers.compose import DockerCompose

COMPOSE = ROOT / "docker-compose.yml"
OVERRIDE = Path(__file__).with_name("compose.testbed.yml")
PYTHON_BASE = "python:3.11.11-slim-bookworm"  # docker/Dockerfile's ARG BASE default
KAFKA = "apache/kafka:3.9.1"  # docker-compose.yml's broker
IMAGE = "edgestream-testbed/cpu:latest"  # the tag tests/testbed/test_images.py builds too: one layer cache
LABEL = "com.docker.compose.project"

pytestmark = pytest.mark.timeout(3600)


def log(msg: str) -> None:
    print(f"TESTBED {msg}", file=sys.stderr, flush=True)


def _sweep() -> None:
    """Removes what a killed earlier run of this module left (SIGKILL runs no teardown): the containers,
    networks and volumes of projects named edgestream-test-<pid>-... whose pid is gone."""
    projects: set[str] = set()
    fmt = f'{{{{.Label "{LABEL}"}}}}'
    for kind in ("container", "network", "volume"):
        args = ["docker", kind, "ls", *(["-a"] if kind == "container" else []), "--format", fmt,
                "--filter", f"label={LABEL}"]
        projects |= {x for x in sh(*args).stdout.split() if x.startswith("edgestream-test-")}
    for project in sorted(projects):
        pid = int(project.split("-")[2])
        if pid != os.getpid() and Path(f"/proc/{pid}").exists():
            continue  # a run in progress
        flt = f"label={LABEL}={project}"
        for kind, rm in (("container", ["rm", "-f"]), ("network", ["rm"]), ("volume", ["rm", "-f"])):
            ids = sh("docker", kind, "ls", *(["-a"] if kind == "container" else []), "-q", "--filter", flt).stdout.split()
            if ids:
                sh("docker", kind, *rm, *ids, check=False)
        log(f"removed what a killed run left of {project}")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")  # pytest then tears the fixtures down: `down -v` runs


@pytest.fixture(scope="module")
def images():
    """The edgestream CPU image and the broker image the testbed runs: the real bases where a registry gives
    them, else the stand-ins; built (or found in Docker's cache) once for the module. While the module runs,
    SIGTERM (CI's or a timeout's) interrupts it like Ctrl-C, so every testbed is still brought down."""
    t0 = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    sh("bash", "scripts/testbed/engine.sh", timeout=1800)
    _sweep()
    base = PYTHON_BASE
    if not pullable(PYTHON_BASE):
        res = sh("bash", "scripts/testbed/bases.sh", "python", timeout=1800)
        base = dict(x.split("=", 1) for x in res.stdout.split() if "=" in x)["python"]
    kafka = KAFKA
    if not pullable(KAFKA):
        kafka = sh("bash", "scripts/testbed/kafka-image.sh", base if base != PYTHON_BASE else "debian:bookworm-slim",
                   timeout=1800).stdout.strip().splitlines()[-1]
    index = CPU_INDEX if answers(CPU_INDEX + "/torch/") else PYPI
    t1 = time.monotonic()
    sh("docker", "build", "-q", "-f", "docker/Dockerfile", "-t", IMAGE, "--build-arg", f"BASE={base}",
       "--build-arg", f"TORCH_INDEX_URL={index}", ".", timeout=3000)
    size = int(sh("docker", "image", "inspect", "-f", "{{.Size}}", IMAGE).stdout)
    log(f"images: {IMAGE} ({size / 1e9:.2f} GB, BASE={base}, TORCH_INDEX_URL={index}, build {time.monotonic() - t1:.0f} s), "
        f"broker {kafka}; ready in {time.monotonic() - t0:.0f} s")
    yield {"edgestream": IMAGE, "kafka": kafka}
    signal.signal(signal.SIGTERM, previous)


class ComposeFailed(AssertionError):
    pass


class ComposeRun:
    """One compose project of the testbed: its own name, run id, config folder and env file."""

    def __init__(self, tmp_path: Path, images: dict[str, str], experiment: str, config: dict, profiles: list[str],
                 compose_file: Path = COMPOSE, env: dict[str, str] | None = None):
        self.project = f"edgestream-test-{os.getpid()}-{int(time.time() * 1000) % 10**7}"
        self.run_id = f"t{int(time.time() * 1000) % 10**9}"
        self.experiment = experiment
        cfg_dir = tmp_path / "config"
        cfg_dir.mkdir()
        (cfg_dir / experiment).write_text(yaml.safe_dump(config))
        cfg_dir.chmod(0o755)  # read by the containers' user (uid 10001)
        (cfg_dir / experiment).chmod(0o644)
        self.run_name = f"{config['name']}-{config['algorithm']['name']}-{self.run_id}"
        env = {"COMPOSE_PROJECT_NAME": self.project, "RUN_ID": self.run_id, "EXPERIMENT": experiment,
               "CONFIG_DIR": str(cfg_dir), "TRAINERS": "2", "TRAINER_THREADS": "1", "PRODUCER_REPORT_S": "5",
               "EDGESTREAM_IMAGE": images["edgestream"], "TESTBED_KAFKA_IMAGE": images["kafka"], **(env or {})}
        env_file = tmp_path / "testbed.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        self.compose = DockerCompose(context=str(ROOT), compose_file_name=[str(compose_file), str(OVERRIDE)],
                                     env_file=str(env_file), profiles=profiles, wait=False, pull=False, build=False)

    def cmd(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        return sh(*self.compose.docker_compose_command(), *args, timeout=timeout, check=check)

    def logs(self, service: str, n: int = 25) -> str:
        return tail(self.cmd("logs", "--no-color", "--no-log-prefix", service, check=False).stdout, n)

    def restarts(self, service: str) -> int:
        """How often the engine restarted the service's container (restart: on-failure hides a crash)."""
        name = next(c.Name for c in self.compose.get_containers(include_all=True) if c.Service == service)
        return int(sh("docker", "inspect", "-f", "{{.RestartCount}}", name).stdout)

    def wait_until(self, what: str, probe, services: list[str], timeout: float):
        """Polls `probe()` until it returns something true and returns that; while waiting, a service of
        `services` that exited fails with its log lines, and so does the bound `timeout` (the logs of all)."""
        deadline = time.monotonic() + timeout
        while True:
            got = probe()
            if got:
                return got
            state = {c.Service: c for c in self.compose.get_containers(include_all=True) if c.Service in services}
            for s in services:
                if s not in state or state[s].State != "running":
                    raise ComposeFailed(f"{what}: {s} is {state[s].State if s in state else 'gone'} "
                                        f"(exit {state[s].ExitCode if s in state else '?'}):\n{self.logs(s)}")
            if time.monotonic() > deadline:
                raise ComposeFailed(f"{what}: not within {timeout:.0f} s:\n"
                                    + "\n".join(f"{s}:\n{self.logs(s)}" for s in services))
            time.sleep(2)

    def up(self) -> None:
        try:
            self.compose.start()  # `docker compose up --detach`: the broker healthy first, then the others
        except subprocess.CalledProcessError as e:
            raise ComposeFailed(f"`docker compose up` exit {e.returncode}: {tail(e.stderr.decode(errors='replace'), 10)}"
                                f"\nbroker:\n{self.logs('broker')}") from None

    def wait_exit(self, services: list[str], timeout: float) -> dict[str, int]:
        """Waits for the services' containers to exit; a non-zero exit fails with the container's log lines."""
        deadline = time.monotonic() + timeout
        while True:
            state = {c.Service: c for c in self.compose.get_containers(include_all=True) if c.Service in services}
            done = {s: c.ExitCode for s, c in state.items() if c.State == "exited"}
            for s, code in done.items():
                if code != 0:
                    raise ComposeFailed(f"{s} exited {code}:\n{self.logs(s)}")
            if len(done) == len(services):
                return done
            if time.monotonic() > deadline:
                raise ComposeFailed(f"{sorted(set(services) - set(done))} still running after {timeout:.0f} s:\n"
                                    + "\n".join(f"{s}:\n{self.logs(s)}" for s in services if s not in done))
            time.sleep(2)

    def stop_producer(self) -> dict:
        self.cmd("stop", "--timeout", "120", "producer")  # SIGTERM: it flushes, prints its summary and exits
        summary = json.loads(self.logs("producer", 1))  # the producer's last line: its JSON summary
        assert summary["delivered"] > 0 and summary["failed"] == 0, summary
        return summary

    def collect(self) -> None:
        res = self.cmd("run", "--rm", "collect", check=False)
        if res.returncode != 0:
            raise ComposeFailed(f"collect exit {res.returncode}:\n{tail(res.stdout + res.stderr)}")

    def read(self, *paths: str) -> dict[str, str]:
        """Files of the run directory on the runs volume (read in a container of the image), plus its listing."""
        script = (f'cd /runs/{self.run_name} && ls -1 && for f in "$@"; do echo "=== $f"; cat "$f"; echo; done')
        out = self.cmd("run", "--rm", "--no-deps", "--entrypoint", "sh", "collect", "-c", script, "sh", *paths).stdout
        parts = out.split("\n=== ")
        files = {"": parts[0]}
        for p in parts[1:]:
            name, _, body = p.partition("\n")
            files[name] = body
        return files

    def down(self) -> dict[str, list[str]]:
        """`down -v`, then what is left with the project's label (containers, networks, volumes)."""
        t0 = time.monotonic()
        self.compose.stop(down=True)
        flt = f"label={LABEL}={self.project}"
        left = {"containers": sh("docker", "ps", "-aq", "--filter", flt).stdout.split(),
                "networks": sh("docker", "network", "ls", "-q", "--filter", flt).stdout.split(),
                "volumes": sh("docker", "volume", "ls", "-q", "--filter", flt).stdout.split()}
        log(f"teardown ({self.project}): down -v in {time.monotonic() - t0:.1f} s, left "
            + ", ".join(f"{len(v)} {k}" for k, v in left.items()))
        return left


@pytest.fixture
def testbeds():
    """Every ComposeRun a test makes is brought down at the end, also on failure; nothing may be left."""
    made: list[ComposeRun] = []
    yield made
    leftovers = {tb.project: tb.down() for tb in made}
    for project, left in leftovers.items():
        assert not any(left.values()), f"{project}: left behind {left}"


def _config(name: str, **changes) -> dict:
    cfg = yaml.safe_load((ROOT / "examples" / name).read_text())
    cfg["devices"]["rates"] = {"distribution": "constant", "rate": 200}
    cfg.update(changes)
    return cfg


def test_cpu_profile_trains_to_target_and_collects(tmp_path, images, testbeds):
    """The default experiment's algorithm (ScaDLES) on the mlp, to 0.85 accuracy."""
    cfg = _config("testbed.yaml", model={"name": "mlp"}, stop={"target_accuracy": 0.85, "max_time_s": 240},
                  eval={"every_s": 2})
    tb = ComposeRun(tmp_path, images, "testbed.yaml", cfg, ["cpu"])
    testbeds.append(tb)
    t0 = time.monotonic()
    tb.up()
    t_up = time.monotonic() - t0
    tb.wait_exit(["trainer-0", "trainer-1"], timeout=480)
    t_train = time.monotonic() - t0
    produced = tb.stop_producer()
    tb.collect()
    files = tb.read("summary.json", "ranks/0.log")
    listing = set(files[""].split())
    assert {"config.yaml", "events.jsonl", "summary.json", "accuracy.png", "ranks"} <= listing, listing
    s = json.loads(files["summary.json"])
    assert s["algorithm"] == "scadles" and s["devices"] == 2, s
    assert s["stop_reason"] == "target_accuracy" and s["best_accuracy"] >= 0.85 and s["time_to_target_s"], s
    assert set(s["device_steps"]) == {"0", "1"} and all(v > 0 for v in s["device_steps"].values()), s
    assert "bootstrap broker:9092" in files["ranks/0.log"]
    log(f"cpu profile: scadles trained to {s['best_accuracy']:.3f} (target 0.85; final {s['final_accuracy']:.3f}) "
        f"in {s['time_to_target_s']:.1f} s, {s['device_steps']} steps; "
        f"up {t_up:.0f} s, trainers done at {t_train:.0f} s, collected at {time.monotonic() - t0:.0f} s; "
        f"producer delivered {produced['delivered']}")


def test_cpu_ps_profiles_train_ssp_through_the_parameter_server(tmp_path, images, testbeds):
    cfg = _config("testbed-ssp.yaml", stop={"target_accuracy": 0.8, "max_time_s": 240}, eval={"every_s": 2})
    assert cfg["algorithm"]["name"] == "ssp"
    tb = ComposeRun(tmp_path, images, "testbed-ssp.yaml", cfg, ["cpu", "ps"])
    testbeds.append(tb)
    t0 = time.monotonic()
    tb.up()
    tb.wait_exit(["trainer-0", "trainer-1", "ps"], timeout=480)
    t_train = time.monotonic() - t0
    tb.stop_producer()
    tb.collect()
    files = tb.read("summary.json", "ranks/ps.summary.json", "ranks/0.summary.json", "ranks/1.summary.json")
    s = json.loads(files["summary.json"])
    ps = json.loads(files["ranks/ps.summary.json"])
    ranks = [json.loads(files[f"ranks/{r}.summary.json"]) for r in (0, 1)]
    steps = [r["steps"] for r in ranks]
    assert all(r["algorithm"] == "ssp" and r["backend"] == "kafka-ps" for r in ranks), ranks
    assert ps["status"] == "finished" and ps["rejected"] == 0, ps
    assert ps["pushes_applied"] == sum(steps) and min(steps) > 0, (ps, steps)
    assert s["algorithm"] == "ssp" and s["ps"]["pushes_applied"] == sum(steps), s
    # the PS scores its model and stops every worker at the target; pushes still in flight move the final model
    assert s["stop_reason"] == "target_accuracy" and s["best_accuracy"] >= 0.8 and s["time_to_target_s"], s
    log(f"cpu+ps profiles: ssp trained to {s['best_accuracy']:.3f} (target 0.8; final {s['final_accuracy']:.3f}) "
        f"in {s['time_to_target_s']:.1f} s through the PS "
        f"({ps['pushes_applied']} pushes, steps {steps}); trainers and PS done at {t_train:.0f} s, "
        f"collected at {time.monotonic() - t0:.0f} s")


def _device_reports(text: str) -> list[dict]:
    """The report lines of a device container's log (`infer --report-s`: one JSON line per version scored since
    the previous report), in the order it wrote them; its last line, the summary, has no "version"."""
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "version" in doc and "records" in doc:
            out.append(doc)
    return out


def test_devices_profile_follows_the_model_versions_and_scores_them(tmp_path, images, testbeds):
    """The `cpu` + `devices` profiles on testbed-devices.yaml (mlp, a version every 2 steps, to 0.85): rank 0
    publishes versions 1..N to the run directory and the models topic; device-0 and device-1 each take them
    (never an older one after a newer), answer their own stream (<run>.dev.<i>) with them and report each
    version's accuracy on it. The final version N reaches both devices; its accuracy there is >= 0.6 (chance
    is 0.1 on digits' 10 classes; the run stops at a held-out 0.85, and a device's stream is the same
    distribution, so 0.6 leaves > 5 standard deviations of a one-batch sample of 64 records) and above the
    accuracy of the first version that device scored (trained a couple of steps). SIGTERM: each device exits 0
    with its summary (every record answered, none in error, each counted in a report); neither was restarted."""
    base = yaml.safe_load((ROOT / "examples" / "testbed-devices.yaml").read_text())
    assert base.get("publish"), "examples/testbed-devices.yaml publishes no versions: the devices would wait forever"
    cfg = _config("testbed-devices.yaml", model={"name": "mlp"}, stop={"target_accuracy": 0.85, "max_time_s": 240},
                  eval={"every_s": 2}, publish={"every_steps": 2})
    devices = ["device-0", "device-1"]
    tb = ComposeRun(tmp_path, images, "testbed-devices.yaml", cfg, ["cpu", "devices"], env={"DEVICE_REPORT_S": "2"})
    testbeds.append(tb)

    def reports(device: str) -> list[dict]:
        return _device_reports(tb.cmd("logs", "--no-color", "--no-log-prefix", device, check=False).stdout)

    t0 = time.monotonic()
    tb.up()  # the devices start with the producer, before any version, and wait for the first one
    tb.wait_exit(["trainer-0", "trainer-1"], timeout=480)
    t_train = time.monotonic() - t0
    listing = tb.cmd("run", "--rm", "--no-deps", "--entrypoint", "sh", "collect", "-c",
                     f"ls -1 /runs/{tb.run_name}/models").stdout.split()
    versions = sorted(int(x[1:]) for x in listing if x[:1] == "v" and x[1:].isdigit())
    assert versions and versions == list(range(1, len(versions) + 1)), listing
    final = versions[-1]
    files = tb.read(*(f"models/v{v}/meta.json" for v in versions))
    meta = {v: json.loads(files[f"models/v{v}/meta.json"]) for v in versions}
    assert all(meta[v].get("version") == v and meta[v].get("run") == tb.run_name for v in versions), meta
    assert len(versions) >= 3, f"{len(versions)} version(s): too few to follow"
    # the producer still streams: the final version answers the devices' next records and is reported
    tb.wait_until(f"version {final} reported by both devices",
                  lambda: all(any(r["version"] == final for r in reports(d)) for d in devices),
                  devices, timeout=240)
    tb.cmd("stop", "--timeout", "60", *devices)  # SIGTERM: the batch in hand answered, the last report, the summary
    tb.wait_exit(devices, timeout=90)
    restarts = {d: tb.restarts(d) for d in devices}
    assert restarts == {d: 0 for d in devices}, restarts
    tb.stop_producer()
    figures = {}
    for i, d in enumerate(devices):
        text = tb.cmd("logs", "--no-color", "--no-log-prefix", d).stdout
        lines = _device_reports(text)
        summary = json.loads(text.strip().splitlines()[-1])
        assert summary["errors"] == 0 and summary["answered"] == sum(r["records"] for r in lines) > 0, summary
        assert {r["topic"] for r in lines} == {f"{tb.run_name}.dev.{i}"}, lines  # its own stream
        seen = [r["version"] for r in lines]
        assert seen == sorted(seen) and set(seen) <= set(versions), seen  # a newer version, never an older one
        acc: dict[int, list[float]] = {}
        for r in lines:
            n, right = acc.setdefault(r["version"], [0, 0.0])
            acc[r["version"]] = [n + r["records"], right + r["accuracy"] * r["records"]]
        acc = {v: right / n for v, (n, right) in acc.items()}
        assert len(acc) >= 2 and final in acc, acc
        assert acc[final] >= 0.6, (d, acc)
        assert acc[final] > acc[min(acc)], (d, acc)
        figures[d] = {v: round(a, 3) for v, a in acc.items()}
    heldout = {v: (meta[v].get("metrics", {}).get("heldout") or {}).get("accuracy") for v in versions}
    log(f"devices profile: {final} versions (steps {[meta[v].get('step') for v in versions]}, held-out {heldout}); "
        f"accuracy per version on each device's own stream {figures}; "
        f"trainers done at {t_train:.0f} s, devices stopped at {time.monotonic() - t0:.0f} s")


def test_a_broken_compose_file_fails_with_the_containers_log_line(tmp_path, images, testbeds):
    """A copy of the compose file whose trainers get a wrong argument: the test's failure names the trainer
    and carries the line the container wrote (typer's refusal), not just an exit code."""
    text = COMPOSE.read_text()
    train = 'command: ["train", "/config/${EXPERIMENT:-testbed.yaml}", "--run-id",'
    assert text.count(train) == 1, "the trainers' command (x-trainer) moved: update this test"
    broken = tmp_path / "broken" / "docker-compose.yml"
    broken.parent.mkdir()
    broken.write_text(text.replace(train, train.replace('"--run-id"', '"--run-ident"')))
    cfg = _config("testbed.yaml", model={"name": "mlp"}, stop={"target_accuracy": 0.85, "max_time_s": 60})
    tb = ComposeRun(tmp_path, images, "testbed.yaml", cfg, ["cpu"], compose_file=broken)
    testbeds.append(tb)
    tb.up()
    with pytest.raises(ComposeFailed) as err:
        tb.wait_exit(["trainer-0", "trainer-1"], timeout=240)
    msg = str(err.value)
    assert msg.startswith(("trainer-0 exited 2", "trainer-1 exited 2")), msg
    assert "No such option: --run-ident" in msg, msg
    log(f"broken compose file: the failure reads {msg.splitlines()[0]!r} ... "
        f"{next(x for x in msg.splitlines() if 'No such option' in x).strip()!r}")


def test_engine_script_is_idempotent():
    """A second run of scripts/testbed/engine.sh with the engine up installs and builds nothing; the daemon's
    bridge and address pools are inside the testbed's range."""
    res = sh("bash", "scripts/testbed/engine.sh", timeout=120)
    assert "ready" in res.stderr and "installing" not in res.stderr and "building" not in res.stderr, res.stderr
    daemon = json.loads(Path("/etc/docker/daemon.json").read_text())
    assert daemon["bip"].startswith("10.214.") and all(p["base"].startswith("10.214.")
                                                        for p in daemon["default-address-pools"]), daemon
    assert shutil.which("docker") and "v2." in sh("docker", "compose", "version").stdout
