"""Checkpoints of a real run: one file per rank, tensors and plain types only, checked on load.

`<run dir>/checkpoints/rank<i>.pt` holds the model's state_dict, the optimizer's, the algorithm's
explicit state (WorkerContext.step and .state), the device's stream state
(`KafkaStreamDataset.state_dict()`: how far its streams were consumed when the checkpoint was taken:
the source of truth on resume, whatever the consumer groups still hold), the run's elapsed time, and
its identity: the run, the rank, the config pin (`config_pin`) and the step.

On disk (format 3) the file is a torch zip of {"format", "sha256", "body"}: `body` is the torch.save
bytes of the payload above as a uint8 tensor and `sha256` its checksum, so a flipped bit anywhere in
the payload is found before anything is restored. Both levels load with
`torch.load(..., weights_only=True)` (no pickle of arbitrary objects).

Writing: a temporary file, fsynced, renamed over the previous checkpoint, then the directory fsynced:
a crash or power loss leaves the previous checkpoint or the new one whole, never a mix. The checkpoint it
replaces stays beside it as `rank<i>.prev.pt` (a hard link made before the rename): ranks write their
checkpoints of one step each on its own, so a rank killed after the others wrote theirs leaves the ranks one
checkpoint apart; `--resume` then continues from the newest step every rank has (`agree_checkpoints`).

Loading (`load_checkpoint(path, expect=...)`) and the orchestrator's check of all ranks before a resume
(`check_checkpoints`) raise `CheckpointError`: one line naming the file and what is wrong (unreadable,
empty, checksum, another run, another rank, another config, ranks at different steps).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from edgestream.config import RESUME_MAY_CHANGE
from edgestream.config.pin import config_pin  # noqa: F401 - the one pin (checkpoints and model versions)
from edgestream.files import fsync_dir

FORMAT = 3
#: bytes a file system may keep free and still count as full for a checkpoint write that failed
FULL_MARGIN = 64 * 1024


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or must not be resumed; `str()` is one line naming the file."""


def checkpoint_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "checkpoints" / f"rank{rank}.pt"


def previous_path(path: Path) -> Path:
    """The checkpoint that `path` replaced (rank<i>.prev.pt beside rank<i>.pt)."""
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def identity(run: str, rank: int, pin: str) -> dict:
    """What a checkpoint must match to be resumed: the run, the rank, the config pin."""
    return {"run": str(run), "rank": int(rank), "pin": str(pin)}


def save_checkpoint(path: Path, *, model, optimizer, step: int, state: dict, stream: dict, elapsed_s: float,
                    samples: int, ident: dict | None = None, watch: dict | None = None) -> None:
    """Write the checkpoint atomically and durably (see module doc); CheckpointError naming the file when
    the disk refuses (full, read-only): the previous checkpoint stays whole. watch: the device's prequential
    counters and drift detector (edgestream.runner.watch, plain lists and numbers), when the run has them."""
    payload = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": int(step),
               "state": state, "stream": stream, "elapsed_s": float(elapsed_s), "samples": int(samples),
               "identity": {**(ident or {}), "step": int(step)}}
    if watch is not None:
        payload["watch"] = watch
    buf = io.BytesIO()
    torch.save(payload, buf)
    body = buf.getbuffer()
    outer = {"format": FORMAT, "sha256": hashlib.sha256(body).hexdigest(),
             "body": torch.frombuffer(bytearray(body), dtype=torch.uint8)}
    tmp = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            torch.save(outer, f)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():  # kept as the previous checkpoint: a link, so rank<i>.pt is never missing
            prev_tmp = previous_path(path).with_suffix(".prevtmp")
            with contextlib.suppress(FileNotFoundError):
                prev_tmp.unlink()
            os.link(path, prev_tmp)
            os.replace(prev_tmp, previous_path(path))
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except (OSError, RuntimeError) as exc:  # torch's zip writer reports a failed write as RuntimeError
        reason = _write_failure(exc, path.parent, len(body))  # before the partial file is removed
        with contextlib.suppress(OSError):
            tmp.unlink()
        who = f"device {ident['rank']}: " if ident and "rank" in ident else ""
        raise CheckpointError(f"{who}cannot write the checkpoint {path}: {reason}") from None


def _write_failure(exc: BaseException, folder: Path, size: int) -> str:
    """Why a checkpoint write failed, in words: the OSError's own, and for torch's zip writer (a
    RuntimeError such as "[enforce fail at inline_container.cc:671] . unexpected pos 832 vs 726", its
    internals) "No space left on device" when the folder's file system has less room left than the
    checkpoint needs, else the message's first sentence."""
    if isinstance(exc, OSError) and exc.strerror:
        full = exc.errno == errno.ENOSPC
        return f"{exc.strerror} (the disk is full)" if full else exc.strerror
    try:
        st = os.statvfs(folder)
        full = st.f_bavail * st.f_frsize < size + FULL_MARGIN
    except OSError:
        full = False
    if full or "no space left" in str(exc).lower():
        return f"{os.strerror(errno.ENOSPC)} (the disk is full)"
    return _first_line(exc)


def _first_line(exc: BaseException, limit: int = 160) -> str:
    """An error's message in one line, never cut mid-sentence: the first line when it fits in `limit`
    characters, else its first sentence (torch's "PytorchStreamReader failed reading zip archive: failed
    finding central directory. This is an internal miniz error. If you are seeing this error, there is a
    high likelihood ..." becomes "... failed finding central directory"); only a single sentence longer
    than twice `limit` is shortened, at a word, with "..."."""
    text = " ".join(str(exc).strip().splitlines()[0].split()) if str(exc).strip() else ""
    if not text:
        return type(exc).__name__
    if len(text) <= limit:
        return text.rstrip(".")
    end = re.search(r"[.!?](?=\s)", text)
    if end is not None and end.end() <= 2 * limit:
        return text[:end.start()]
    return text[:limit].rsplit(" ", 1)[0] + " ..."


def load_checkpoint(path: Path, map_location: Any = "cpu", *, expect: dict | None = None) -> dict:
    """The checkpoint at `path` (weights_only: tensors and plain types only), its checksum verified and,
    with `expect` (see `identity`), its run, rank and config pin; CheckpointError (one line naming the
    file) otherwise."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the checkpoint ({exc.strerror})") from None
    if size == 0:
        raise CheckpointError(f"{path}: empty file, not a checkpoint (a write interrupted, or a full disk)")
    try:
        outer = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a damaged zip or pickle
        raise CheckpointError(f"{path}: not a readable checkpoint: the file is truncated or damaged "
                              f"({_first_line(exc)})") from None
    if not isinstance(outer, dict) or outer.get("format") != FORMAT:
        found = outer.get("format") if isinstance(outer, dict) else type(outer).__name__
        raise CheckpointError(f"{path}: checkpoint format {found!r}, this edgestream reads {FORMAT}")
    body = outer.get("body")
    if not isinstance(body, torch.Tensor) or body.dtype != torch.uint8 or not isinstance(outer.get("sha256"), str):
        raise CheckpointError(f"{path}: not a checkpoint of format {FORMAT} (no body or checksum)")
    raw = body.numpy().tobytes()
    if hashlib.sha256(raw).hexdigest() != outer["sha256"]:
        raise CheckpointError(f"{path}: checksum mismatch: the file is corrupted (a flipped bit or a damaged "
                              "disk); restore it or resume from another copy")
    try:
        data = torch.load(io.BytesIO(raw), map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise CheckpointError(f"{path}: not a readable checkpoint ({_first_line(exc)})") from None
    ident = data.get("identity") if isinstance(data, dict) else None
    if not isinstance(ident, dict):
        raise CheckpointError(f"{path}: the checkpoint has no identity (run, rank, config pin)")
    if expect is not None:
        if ident.get("run") != expect["run"]:
            raise CheckpointError(f"{path}: a checkpoint of run {ident.get('run')}, not of run {expect['run']}")
        if ident.get("rank") != expect["rank"]:
            raise CheckpointError(f"{path}: rank {ident.get('rank')}'s checkpoint, not rank {expect['rank']}'s "
                                  "(a file copied from another rank)")
        if ident.get("pin") != expect["pin"]:
            raise CheckpointError(f"{path}: written under another config (pin {ident.get('pin')}, this config's "
                                  f"pin {expect['pin']}); a resumed run may change only {', '.join(RESUME_MAY_CHANGE)}")
    return data


def step_disagreement(where: str, steps: dict[int, int], paths: dict[int, Any] | None = None) -> str | None:
    """None when every rank is at the same step, else one line naming the ranks and their steps."""
    if len(set(steps.values())) <= 1:
        return None
    counts = Counter(steps.values())
    common = max(counts, key=lambda s: (counts[s], s))
    odd = sorted(r for r, s in steps.items() if s != common)
    agree = sorted(r for r, s in steps.items() if s == common)
    first = paths[odd[0]] if paths else where
    others = "; ".join(f"rank {r} at step {steps[r]}" for r in odd)
    return (f"{first}: the ranks' checkpoints are at different steps ({others}; rank{'s' if len(agree) > 1 else ''} "
            f"{', '.join(map(str, agree))} at step {common}): all ranks must resume from one step")


def check_checkpoints(run_dir: Path, world: int, *, run: str, pin: str, agree: bool = True) -> dict[int, int]:
    """Verify every rank's checkpoint (checksum, identity) and, with `agree`, that they hold one step;
    returns {rank: step}, or CheckpointError naming the file (the orchestrator's check before a resume)."""
    steps, paths = {}, {}
    for rank in range(world):
        paths[rank] = checkpoint_path(run_dir, rank)
        steps[rank] = int(load_checkpoint(paths[rank], expect=identity(run, rank, pin))["step"])
    problem = step_disagreement(str(run_dir / "checkpoints"), steps, paths) if agree else None
    if problem:
        raise CheckpointError(problem)
    return steps


def held_steps(run_dir: Path, world: int, *, run: str | None = None, pin: str | None = None) -> dict[int, dict]:
    """{rank: {step: file}} of each rank's checkpoint and its previous one (rank<i>.prev.pt, where whole and,
    with `run` and `pin`, of this run and config); the current file's failure is raised (CheckpointError)."""
    def expect(r: int) -> dict | None:
        return identity(run, r, pin) if run is not None else None

    held: dict[int, dict] = {}
    for r in range(world):
        path = checkpoint_path(run_dir, r)
        held[r] = {int(load_checkpoint(path, expect=expect(r))["step"]): path}
        with contextlib.suppress(CheckpointError):
            held[r].setdefault(int(load_checkpoint(previous_path(path), expect=expect(r))["step"]), previous_path(path))
    return held


def agree_checkpoints(run_dir: Path, world: int, *, run: str, pin: str) -> tuple[dict[int, int], list[int]]:
    """Before a resume of ranks that move in lockstep: when their checkpoints hold different steps (a rank
    killed after the others wrote the step's checkpoint), put back the previous checkpoint (rank<i>.prev.pt)
    of the ranks that are ahead, so every rank holds the newest step all of them have. Returns ({rank: step},
    the ranks put back); CheckpointError (check_checkpoints' line) when no step is common to all."""
    held = held_steps(run_dir, world, run=run, pin=pin)  # a current file damaged or foreign: its line
    current = {r: next(iter(h)) for r, h in held.items()}  # the current file's step comes first
    if len(set(current.values())) == 1:
        return current, []
    common = set.intersection(*(set(h) for h in held.values()))
    if not common:
        raise CheckpointError(step_disagreement(str(run_dir / "checkpoints"), current,
                                                {r: checkpoint_path(run_dir, r) for r in range(world)}))
    step = max(common)
    back = [r for r in range(world) if current[r] != step]
    for r in back:  # the newer checkpoint is one no other rank reached: its steps are trained again
        os.replace(held[r][step], checkpoint_path(run_dir, r))
    if back:
        fsync_dir(run_dir / "checkpoints")
    return {r: step for r in range(world)}, back
