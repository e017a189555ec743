"""The EDGESTREAM_* environment variables: every one read in edgestream/ is read here, by one typed accessor.

A config file is the run's configuration; these variables are the few knobs outside it (a process's device,
hand-overs from the orchestrator to its children, timings of the local engine, test-only switches). Each is a
`Setting` (name, default, what is allowed, what it means; `table()` is docs/settings.md) with an accessor
below that reads the environment when it is called -- never at import: the fork server
(edgestream/forkserver.py) imports modules before a child's environment is in place. The few values a module
keeps from its own import (the local engine's timings in launch/run_children.py and launch/watch.py, ps/server.py's
checkpoint period) call their accessor there, in modules the fork server does not preload
(tests/unit/test_forkserver.py).

A value that is not allowed raises `SettingError` (a ValueError), one line naming the variable and what is
allowed -- except where the domain owns the check and its error: EDGESTREAM_BACKEND and EDGESTREAM_DEVICE
(trainer/backend.py, trainer/gpus.py), EDGESTREAM_SIM_COMPUTE (the simulator's SimConfigError),
EDGESTREAM_TOPIC_SETTINGS (kafka/topic_settings.py) and the secrets (launch/command.py); there the accessor
gives the text as set. `environ`: a mapping to read instead of the environment (tests, a child's planned env).

`python -m edgestream.settings` prints the table (tests/unit/test_settings.py keeps docs/settings.md equal to it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

#: the variables read from the environment in this process so far (tests/unit/test_forkserver.py: none while the fork
#: server's preloaded modules are imported)
READ: set[str] = set()


class SettingError(ValueError):
    """An EDGESTREAM_* variable set to a value that is not allowed (one line: the variable, what is allowed)."""


@dataclass(frozen=True)
class Setting:
    """One variable: `default` and `allowed` as the table says them, `meaning` in one line, `read`: when and
    where edgestream reads it."""

    name: str
    default: str
    allowed: str
    meaning: str
    read: str

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The text set (None: unset), from os.environ when `environ` is None."""
        if environ is None:
            READ.add(self.name)
            return os.environ.get(self.name)
        return environ.get(self.name)

    def pop(self, environ: MutableMapping[str, str] | None = None) -> str | None:
        """`raw`, and the variable dropped from the environment (nothing this process starts sees it)."""
        if environ is None:
            READ.add(self.name)
            return os.environ.pop(self.name, None)
        return environ.pop(self.name, None)

    def error(self, value: str, allowed: str | None = None) -> SettingError:
        return SettingError(f"{self.name}={value!r} is not allowed; must be {allowed or self.allowed}")

    def number(self, environ: Mapping[str, str] | None, default: float) -> float:
        raw = self.raw(environ)
        if raw is None:
            return default
        try:
            return float(raw)
        except ValueError:
            raise self.error(raw) from None

    def integer(self, environ: Mapping[str, str] | None, default: int) -> int:
        raw = self.raw(environ)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise self.error(raw) from None


SETTINGS: dict[str, Setting] = {}


def _setting(name: str, default: str, allowed: str, meaning: str, read: str) -> Setting:
    SETTINGS[name] = Setting(name, default, allowed, meaning, read)
    return SETTINGS[name]


_CALL = "when used"

# --- a trainer's device --------------------------------------------------------------------------------------
BACKEND = _setting(
    "EDGESTREAM_BACKEND", "empty", "gloo, nccl or empty",
    "the trainers' collective backend; empty: nccl when every rank has a GPU of its own, else gloo (all ranks "
    "must be told the same)", f"{_CALL}: trainer/main.py, trainer/gpus.py (checked by trainer/backend.py)")
DEVICE = _setting(
    "EDGESTREAM_DEVICE", "empty", "cpu, cuda or empty",
    "where a trainer computes: cpu; cuda (an error without a GPU); empty: a GPU by the rank-to-GPU rule when "
    "CUDA is there, else the CPU", f"{_CALL}: trainer/gpus.py (checked there)")
PREFETCH = _setting(
    "EDGESTREAM_PREFETCH", "1", "0, 1 or 2 (more: 2; anything else: the default)",
    "the trainer's prefetch queue depth where every batch can be taken ahead; 0 turns prefetch off",
    f"{_CALL}: trainer/prefetch.py")
CUDA_GRAPHS = _setting(
    "EDGESTREAM_CUDA_GRAPHS", "on", "0 (off); anything else: on",
    "a trainer on a GPU replays a step of fixed-shape batches from CUDA graphs", f"{_CALL}: trainer/graphs.py")
RENDEZVOUS_TIMEOUT_S = _setting(
    "EDGESTREAM_RENDEZVOUS_TIMEOUT_S", "60", "a number of seconds",
    "how long a trainer waits for all its peers at the rendezvous (a collective: this plus "
    "runtime.kafka_outage_s)", f"{_CALL}: trainer/main.py")
TEST_FAIL_AT_STEP = _setting(
    "EDGESTREAM_TEST_FAIL_AT_STEP", "unset", "a step number (0-based)",
    "test only: a trainer raises InjectedFailure when it computes this step", f"{_CALL}: trainer/performer.py")

# --- the local engine (the orchestrator) and its children ----------------------------------------------------
LAUNCH_GRACE_S = _setting(
    "EDGESTREAM_LAUNCH_GRACE_S", "10", "a number of seconds",
    "how long a child has after SIGTERM before SIGKILL (the producer's flush time follows from it)",
    "at import of launch/run_children.py")
LAUNCH_STRAGGLER_S = _setting(
    "EDGESTREAM_LAUNCH_STRAGGLER_S", "120", "a number of seconds",
    "how long after the first trainer finished the others may still run before the run fails",
    "at import of launch/watch.py")
PS_RESTARTS = _setting(
    "EDGESTREAM_PS_RESTARTS", "3", "an integer",
    "how many times the local engine restarts a parameter server that failed", "at import of launch/run_children.py")
KAFKA_SECRETS_FD = _setting(
    "EDGESTREAM_KAFKA_SECRETS_FD", "unset", "the number of a file descriptor open for reading",
    "the runtime.kafka_client secrets (a JSON object) on an inherited pipe or file: read to its end, closed, "
    "and the variable dropped (docs/runtime.md)", f"{_CALL}: launch/command.py (checked there)")
KAFKA_SECRETS = _setting(
    "EDGESTREAM_KAFKA_SECRETS", "unset", "a JSON object",
    "the same secrets in the environment itself (a warning: readable in /proc/PID/environ); dropped once read",
    f"{_CALL}: launch/command.py (checked there)")
TOPIC_SETTINGS = _setting(
    "EDGESTREAM_TOPIC_SETTINGS", "unset", "a TopicSettings as JSON",
    "set by the orchestrator for its children: the run's kafka.topics resolved (unset: a process resolves them "
    "against the cluster)", f"{_CALL}: kafka/topic_settings.py (checked there), cli/produce.py")
CACHE = _setting(
    "EDGESTREAM_CACHE", "$XDG_CACHE_HOME/edgestream, else ~/.cache/edgestream", "a folder",
    "where the Kafka jars and the managed broker live", f"{_CALL}: kafka/jars.py")
PROGRESS_EVERY_S = _setting(
    "EDGESTREAM_PROGRESS_EVERY_S", "5", "a number >= 0 (anything else: the default)",
    "seconds between two plain progress lines when the output is not a terminal", f"{_CALL}: runner/progress.py")

# --- the parameter server ------------------------------------------------------------------------------------
PS_CHECKPOINT_S = _setting(
    "EDGESTREAM_PS_CHECKPOINT_S", "2.0", "a number of seconds",
    "the parameter server's checkpoint period", "at import of ps/server.py")
PS_MALLOC = _setting(
    "EDGESTREAM_PS_MALLOC", "empty", "default; anything else: tuned",
    "default leaves glibc's malloc alone in the PS and its clients; else buffers of a message's size are kept "
    "in the heap, reused warm", f"{_CALL}: ps/malloc.py")

# --- the simulator -------------------------------------------------------------------------------------------
SIM_COMPUTE = _setting(
    "EDGESTREAM_SIM_COMPUTE", "auto", "auto, batched or per-device",
    "how the simulator serves Compute requests: all devices' in one batched pass, or one device at a time",
    f"{_CALL}: sim/engine.py (checked there)")
SIM_MEMORY_BYTES = _setting(
    "EDGESTREAM_SIM_MEMORY_BYTES", "MemAvailable", "a number of bytes > 0",
    "the memory a simulation may use, checked against its estimated footprint before it starts",
    f"{_CALL}: sim/footprint.py")


# --- the accessors -------------------------------------------------------------------------------------------
def backend(environ: Mapping[str, str] | None = None) -> str:
    """EDGESTREAM_BACKEND as set ("" unset); trainer.backend.check_requested checks it."""
    return BACKEND.raw(environ) or ""


def device(environ: Mapping[str, str] | None = None) -> str:
    """EDGESTREAM_DEVICE as set ("" unset); trainer.gpus.check_told checks it."""
    return DEVICE.raw(environ) or ""


def prefetch(environ: Mapping[str, str] | None = None) -> int:
    """EDGESTREAM_PREFETCH: 0, 1 or 2 (a larger number: 2); unset, empty or not a number: 1."""
    raw = (PREFETCH.raw(environ) or "").strip()
    return max(0, min(2, int(raw))) if raw.isdigit() else 1


def cuda_graphs(environ: Mapping[str, str] | None = None) -> bool:
    """EDGESTREAM_CUDA_GRAPHS: False only for 0."""
    return (CUDA_GRAPHS.raw(environ) or "").strip() != "0"


def rendezvous_timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """EDGESTREAM_RENDEZVOUS_TIMEOUT_S, 60 when unset."""
    return RENDEZVOUS_TIMEOUT_S.number(environ, 60.0)


def fail_at_step(environ: Mapping[str, str] | None = None) -> int | None:
    """EDGESTREAM_TEST_FAIL_AT_STEP (None: unset or empty)."""
    raw = (TEST_FAIL_AT_STEP.raw(environ) or "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise TEST_FAIL_AT_STEP.error(raw) from None



def launch_grace_s(environ: Mapping[str, str] | None = None) -> float:
    """EDGESTREAM_LAUNCH_GRACE_S, 10 when unset."""
    return LAUNCH_GRACE_S.number(environ, 10.0)


def launch_straggler_s(environ: Mapping[str, str] | None = None) -> float:
    """EDGESTREAM_LAUNCH_STRAGGLER_S, 120 when unset."""
    return LAUNCH_STRAGGLER_S.number(environ, 120.0)


def ps_restarts(environ: Mapping[str, str] | None = None) -> int:
    """EDGESTREAM_PS_RESTARTS, 3 when unset."""
    return PS_RESTARTS.integer(environ, 3)


def kafka_secrets_fd(environ: MutableMapping[str, str] | None = None, *, drop: bool = False) -> str | None:
    """EDGESTREAM_KAFKA_SECRETS_FD as set (None: unset); `drop`: removed from the environment as it is read."""
    return KAFKA_SECRETS_FD.pop(environ) if drop else KAFKA_SECRETS_FD.raw(environ)


def kafka_secrets(environ: MutableMapping[str, str] | None = None, *, drop: bool = False) -> str | None:
    """EDGESTREAM_KAFKA_SECRETS as set (None: unset); `drop`: removed from the environment as it is read."""
    return KAFKA_SECRETS.pop(environ) if drop else KAFKA_SECRETS.raw(environ)


def topic_settings(environ: Mapping[str, str] | None = None) -> str | None:
    """EDGESTREAM_TOPIC_SETTINGS as set (None: unset); kafka.topic_settings.TopicSettings.from_json reads it."""
    return TOPIC_SETTINGS.raw(environ)


def cache(environ: Mapping[str, str] | None = None) -> Path | None:
    """EDGESTREAM_CACHE (None: unset or empty)."""
    raw = CACHE.raw(environ)
    return Path(raw) if raw else None


def progress_every_s(environ: Mapping[str, str] | None = None) -> float | None:
    """EDGESTREAM_PROGRESS_EVERY_S when it is a number >= 0, else None (the caller's default)."""
    try:
        value = float(PROGRESS_EVERY_S.raw(environ) or "")
    except ValueError:
        return None
    return value if value >= 0 else None


def ps_checkpoint_s(environ: Mapping[str, str] | None = None) -> float:
    """EDGESTREAM_PS_CHECKPOINT_S, 2.0 when unset."""
    return PS_CHECKPOINT_S.number(environ, 2.0)


def ps_malloc(environ: Mapping[str, str] | None = None) -> str:
    """EDGESTREAM_PS_MALLOC: "default" (leave malloc alone) or "tuned" (anything else, unset included)."""
    return "default" if (PS_MALLOC.raw(environ) or "").strip().lower() == "default" else "tuned"


def sim_compute(environ: Mapping[str, str] | None = None) -> str | None:
    """EDGESTREAM_SIM_COMPUTE stripped and lower-cased, "auto" when empty, None when unset; the simulator
    checks it against its modes."""
    raw = SIM_COMPUTE.raw(environ)
    return None if raw is None else (raw or "auto").strip().lower()


def sim_memory_bytes(environ: Mapping[str, str] | None = None) -> int | None:
    """EDGESTREAM_SIM_MEMORY_BYTES as an integer > 0 (a float's text allowed: 8e9); None when unset or empty."""
    raw = SIM_MEMORY_BYTES.raw(environ)
    if not raw:
        return None
    try:
        value = int(float(raw))
    except ValueError:
        raise SettingError(f"{SIM_MEMORY_BYTES.name}: {raw!r} is not allowed; give a number of bytes") from None
    if value <= 0:
        raise SettingError(f"{SIM_MEMORY_BYTES.name}: {raw!r} is not allowed; must be > 0")
    return value


def table() -> str:
    """The Markdown table of every setting (docs/settings.md), in the order above."""
    rows = ["| Variable | Default | Allowed | Meaning | Read |", "|---|---|---|---|---|"]
    rows += [f"| `{s.name}` | {s.default} | {s.allowed} | {s.meaning} | {s.read} |" for s in SETTINGS.values()]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(table(), end="")
