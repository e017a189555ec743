"""Resolve the Apache Kafka broker jars from Maven Central, once, into a user cache dir.

The pom shipped beside this module names org.apache.kafka:kafka_2.13 (broker, KRaft controller,
StorageTool), kafka-tools (ProducerPerformance, for benchmarks) and an SLF4J binding. `resolve_jars`
runs `mvn dependency:copy-dependencies` the first time a version is asked for and marks the folder
complete; later calls only check the marker, so starting a broker afterwards needs no network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from edgestream import settings

DEFAULT_KAFKA_VERSION = "3.9.1"
POM = Path(__file__).with_name("pom.xml")
_MARKER = ".resolved"


class BrokerError(RuntimeError):
    """A managed broker could not be resolved, started, queried or stopped; the message says why."""


def cache_dir() -> Path:
    """$EDGESTREAM_CACHE, else $XDG_CACHE_HOME/edgestream, else ~/.cache/edgestream."""
    given = settings.cache()
    if given is not None:
        return given
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "edgestream"


def libs_dir(version: str = DEFAULT_KAFKA_VERSION) -> Path:
    return cache_dir() / f"kafka-{version}" / "libs"


def is_resolved(version: str = DEFAULT_KAFKA_VERSION) -> bool:
    return (libs_dir(version) / _MARKER).is_file()


def resolve_jars(version: str = DEFAULT_KAFKA_VERSION, *, log=print) -> Path:
    """Return the folder holding every jar the broker needs, resolving it through Maven if missing."""
    target = libs_dir(version)
    if (target / _MARKER).is_file():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("Maven (mvn) was not found on PATH: install Maven 3.6+ (it resolves the Kafka "
                          "broker jars from Maven Central once; nothing else is needed)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="libs-", dir=target.parent))
    log(f"resolving Apache Kafka {version} jars from Maven Central into {target} (once) ...")
    t0 = time.monotonic()
    cmd = [mvn, "-B", "-q", "-f", str(POM), "dependency:copy-dependencies",
           f"-Dkafka.version={version}", f"-DoutputDirectory={tmp}", "-DincludeScope=runtime"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    jars = list(tmp.glob("*.jar"))
    if proc.returncode != 0 or not any(j.name.startswith("kafka_2.13-") for j in jars):
        shutil.rmtree(tmp, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise BrokerError(f"Maven could not resolve Apache Kafka {version} (exit {proc.returncode}); "
                          f"last lines of its output:\n{tail}")
    (tmp / _MARKER).write_text(f"{version}\n")
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    log(f"resolved {len(jars)} jars in {time.monotonic() - t0:.1f} s")
    return target


def classpath(version: str = DEFAULT_KAFKA_VERSION) -> str:
    return str(resolve_jars(version) / "*")


def find_java() -> str:
    """Path of a java >= 17 (JAVA_HOME first, then PATH); BrokerError says what to install otherwise."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
    if java is None:
        raise BrokerError("java was not found (JAVA_HOME or PATH): install a JDK 17+ (e.g. OpenJDK 17) "
                          "to run the managed Kafka broker")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    major = _java_major(out)
    if major is not None and major < 17:
        raise BrokerError(f"{java} is Java {major}; the Kafka broker needs a JDK 17+: install one or set JAVA_HOME")
    return java


def _java_major(version_output: str) -> int | None:
    import re

    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major
