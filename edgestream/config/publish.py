"""The `publish:` section: model versions of a real run, sent back to the devices (docs/model-format.md).

    publish:                 # absent (default): no versions; `publish: {}`: on, with the defaults below
      every_s: null          # seconds of training between versions (null with every_steps null: 30)
      every_steps: null      # steps between versions (rank 0's steps; the PS: model versions applied)
      formats: [onnx, safetensors]
      topic: null            # null: <run>.models (compacted, replicated as kafka.topics says)
      chunk_bytes: 1048576   # body bytes per Kafka message
      keep: 2                # versions kept on the topic (older ones' chunks are deleted by tombstones)

A version is also written at the end of the run. Every version goes to the run directory (models/v<N>/) and
the topic; the simulator writes none (it has no Kafka and no real model clock: docs/model-format.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from edgestream.config.base import Float, Int, _Model

FORMATS = ("onnx", "safetensors")
#: publish.every_s when neither every_s nor every_steps is given
DEFAULT_EVERY_S = 30.0


class PublishConfig(_Model):
    every_s: Float | None = Field(None, gt=0)
    every_steps: Int | None = Field(None, ge=1)
    formats: list[Literal["onnx", "safetensors"]] = Field(default_factory=lambda: list(FORMATS), min_length=1)
    topic: str | None = Field(None, pattern=r"^[A-Za-z0-9._\-]{1,249}$")
    chunk_bytes: Int = Field(1024 * 1024, ge=1024, le=8 * 1024 * 1024)
    keep: Int = Field(2, ge=1)

    @field_validator("formats")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"each format once (allowed: {', '.join(FORMATS)})")
        return v

    @model_validator(mode="after")
    def _cadence(self) -> PublishConfig:
        """`publish: {}` (neither cadence given): every DEFAULT_EVERY_S seconds (as `config show` says)."""
        if self.every_s is None and self.every_steps is None:
            self.every_s = DEFAULT_EVERY_S
        return self
