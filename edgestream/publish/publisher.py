"""`ModelPublisher`: the model versions of a real run, written by whoever holds the global model -- a collective
run's rank 0 (edgestream.trainer.main) or the parameter server (edgestream.ps.server) -- beside its checkpoints.

Version N (1, 2, ...) is written to the run directory first, as `models/v<N>/` (model.onnx, model.safetensors,
meta.json: the version's metadata, docs/model-format.md), made in `models/.v<N>.tmp/` and renamed, so a
directory `v<N>` is always whole; then sent to the models topic (`publish.topic`, default `<run>.models`:
compacted, replicated as kafka.topics says) and acknowledged there; then `models/v<N>/published.json` records
its topic and chunk count. Versions older than the `keep` newest are deleted from the topic by tombstones
(their keys with a null value), so compaction keeps the topic at about `keep` versions; the run directory
keeps them all.

Numbering continues over a resume: the next version is one more than the highest `models/v<N>` there is, so no
number is ever sent with other bytes (a version killed between its directory and its send is skipped on the
topic, never re-sent with the resumed model). The cadence (`publish.every_s` of the run's clock, the one
checkpoints and step lines use; `publish.every_steps`) also continues from the last version's step and time.

Where the time goes: `offer` (at a step boundary) copies the parameters into a CPU scratch model and returns;
a background thread exports (edgestream.publish.export), writes and sends, so training never waits for it.
An offer while the previous version is still being made is dropped (the next one is due at once). `final`
waits for it, then writes the version of the end of the run in the caller's thread.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from edgestream.edge.model_format import META_FILE, chunk_key, encode, metadata
from edgestream.files import fsync_dir
from edgestream.kafka.topic_names import models_topic
from edgestream.publish.export import export
from edgestream.publish.metrics import version_metrics

log = logging.getLogger("edgestream.models")

#: a version's record of where it went (models/v<N>/published.json)
PUBLISHED_FILE = "published.json"
#: room for a chunk's header, run name and Kafka's record overhead above publish.chunk_bytes
HEADER_ROOM = 64 * 1024
#: the topic's max.message.bytes never goes below the producer's 1 MiB batch
MIN_TOPIC_BYTES = 2 * 1024 * 1024


def version_dirs(models: Path) -> dict[int, Path]:
    """version -> its directory, of the whole `models/v<N>` directories under `models`."""
    out = {}
    if models.is_dir():
        for d in models.iterdir():
            if d.is_dir() and d.name.startswith("v") and d.name[1:].isdigit() and (d / META_FILE).exists():
                out[int(d.name[1:])] = d
    return out


class ModelPublisher:
    """The versions of run `run` (module doc). `spec`: RunPlan.publish; `facts`: RunPlan.model_facts();
    `bootstrap` None: the run directory only (no topic)."""

    def __init__(self, spec: Mapping[str, Any], facts: Mapping[str, Any], run: str, run_dir: Path, *,
                 bootstrap: str | None, security: Mapping[str, str] | None = None, settings: Any = None,
                 outage: Any = None, stop: Callable[[], bool] | None = None) -> None:
        self.spec, self.facts, self.run = dict(spec), dict(facts), run
        self.dir = Path(run_dir) / "models"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.topic = spec.get("topic") or models_topic(run)
        have = version_dirs(self.dir)
        self.next = max(have, default=0) + 1
        last = json.loads((have[max(have)] / META_FILE).read_text()) if have else {}
        self.last_step, self.last_time = int(last.get("step", 0)), float(last.get("run_time_s", 0.0))
        self.published = list(sorted(have))
        self.made_step: int | None = None  # the step of the last version made by this publisher
        self.errors: list[str] = []
        self._scratch: Any = None
        self._busy = threading.Lock()
        self._thread: threading.Thread | None = None
        self.writer = None
        if bootstrap is not None:
            from edgestream.kafka.admin import create_topics
            from edgestream.kafka.topic_writer import TopicWriter

            chunk = int(spec["chunk_bytes"])

            def create() -> None:
                create_topics(bootstrap, {self.topic: 1}, security=security, settings=settings,
                              config={"cleanup.policy": "compact"},
                              max_message_bytes=max(MIN_TOPIC_BYTES, chunk + HEADER_ROOM))

            if outage is not None:  # through an outage, as the run's other topics (KafkaUnavailable past it)
                from edgestream.kafka.outage_calls import call_through

                call_through(outage, create, f"creating the models topic {self.topic}")
            else:
                create()
            self.writer = TopicWriter(bootstrap, chunk, security, outage=outage, stop=stop, who="model publisher")

    @classmethod
    def of(cls, plan: Any, run: str, run_dir: Path, bootstrap: str | None, *, outage: Any = None,
           stop: Callable[[], bool] | None = None) -> ModelPublisher | None:
        """The publisher of `plan`'s run (None without `publish:`): its cadence and formats, the facts of its model
        and records (RunPlan.model_facts) with the config pin, its topic made with the run's topic settings."""
        if plan.publish is None:
            return None
        from edgestream.config.pin import config_pin

        facts = {**plan.model_facts(), "config_pin": config_pin(plan.cfg)}
        return cls(plan.publish, facts, run, run_dir, bootstrap=bootstrap, security=plan.security,
                   settings=plan.topic_settings(bootstrap) if bootstrap is not None else None, outage=outage,
                   stop=stop)

    # ------------------------------------------------------------------ when
    def due(self, step: int, now: float) -> bool:
        every_s, every_steps = self.spec.get("every_s"), self.spec.get("every_steps")
        return bool((every_steps and step >= self.last_step + every_steps)
                    or (every_s and now >= self.last_time + every_s))

    # ------------------------------------------------------------------ what
    def offer(self, model: Any, step: int, now: float, metrics: Callable[[], Mapping[str, Any] | None]) -> bool:
        """A version of `model` now, made in the background (module doc); False when one is still being made."""
        if not self._busy.acquire(blocking=False):
            return False
        try:
            self._snapshot(model)
        except BaseException:
            self._busy.release()
            raise
        self.last_step, self.last_time = int(step), float(now)
        self._thread = threading.Thread(target=self._background, args=(step, now, metrics), daemon=True,
                                        name="model publisher")
        self._thread.start()
        return True

    def _snapshot(self, model: Any) -> None:
        import torch

        if self._scratch is None:
            self._scratch = copy.deepcopy(model).to("cpu")
        with torch.no_grad():
            self._scratch.load_state_dict({k: v.detach().to("cpu") for k, v in model.state_dict().items()})

    def _background(self, step: int, now: float, metrics: Callable[[], Mapping[str, Any] | None]) -> None:
        try:
            self._publish(self._scratch, step, now, metrics())
        except Exception as exc:  # noqa: BLE001 - said once; the run goes on, the next version is due
            line = f"model version at step {step}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            self.errors.append(line)
            log.error("%s", line)
        finally:
            self._busy.release()

    def final(self, model: Any, step: int, now: float, metrics: Mapping[str, Any] | None) -> int | None:
        """The version of the end of the run (unless the last one was of this very step); returns its number."""
        self.wait()
        if self.made_step == int(step):  # the model of this very step is out already
            return None
        self._snapshot(model)
        self.last_step, self.last_time = int(step), float(now)
        return self._publish(self._scratch, step, now, metrics)

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def close(self) -> None:
        self.wait()
        if self.writer is not None:
            self.writer.close()

    # ------------------------------------------------------------------ how
    def _publish(self, model: Any, step: int, now: float, metrics: Mapping[str, Any] | None) -> int:
        v = self.next
        self.next += 1
        made = export(model, v, self.facts, tuple(self.spec["formats"]))
        if made.onnx_error:
            log.warning("%s", made.onnx_error)
        meta = {**self.facts, "step": int(step), "run_time_s": round(float(now), 3),
                "created_unix": round(time.time(), 3), "metrics": version_metrics(metrics or {}), "onnx": made.onnx,
                "onnx_error": made.onnx_error}
        doc = metadata(self.run, v, meta, made.files)
        self._write(v, doc, made.files)
        if self.writer is not None:
            msgs = encode(self.run, v, meta, made.files, int(self.spec["chunk_bytes"]))
            self.writer.send_values(self.topic, msgs, what=f"sending model version {v} to {self.topic}")
            (self.dir / f"v{v}" / PUBLISHED_FILE).write_text(json.dumps({"topic": self.topic, "chunks": len(msgs)}))
            self._retire()
        self.published.append(v)
        self.made_step = int(step)
        log.info("model version %d (step %d, %s) in %s%s", v, step, ", ".join(made.files), self.dir / f"v{v}",
                 f" and on {self.topic}" if self.writer is not None else "")
        return v

    def _write(self, v: int, doc: dict[str, Any], files: Mapping[str, bytes]) -> None:
        tmp, final = self.dir / f".v{v}.tmp", self.dir / f"v{v}"
        if final.exists():  # never: numbering continues past every whole directory
            raise FileExistsError(f"{final} exists")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name, data in {**files, META_FILE: (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()}.items():
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, final)
        fsync_dir(self.dir)

    def _retire(self) -> None:
        """Tombstones for the chunks of every version older than the `keep` newest still on the topic."""
        keep = int(self.spec.get("keep", 2))
        for v in sorted(version_dirs(self.dir))[:-keep]:
            rec = self.dir / f"v{v}" / PUBLISHED_FILE
            try:
                info = json.loads(rec.read_text())
            except (OSError, ValueError):
                continue
            if info.get("retired") or info.get("topic") != self.topic:
                continue
            self.writer.send_values(self.topic, [(chunk_key(v, i), None, None) for i in range(int(info["chunks"]))],
                                    what=f"deleting model version {v} from {self.topic}")
            rec.write_text(json.dumps({**info, "retired": True}))
