"""The config pin: what a resumed run must share with the run it resumes (checkpoints and model versions carry it)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

#: the config sections a resumed run may change (where it stops, when it evaluates, how it connects, when it
#: publishes model versions); everything else decides what the model learns, so a checkpoint is pinned to it
#: (trainer/checkpoint.py, and the orchestrator's --resume check)
RESUME_MAY_CHANGE = ("runtime", "stop", "eval", "publish")


def config_pin(cfg: Any) -> str:
    """A short hash of the resolved config's training-relevant part: all but the sections a resumed run
    may change (RESUME_MAY_CHANGE). Checkpoints and model versions carry it."""
    doc = yaml.safe_load(cfg.to_yaml()) or {}
    for section in RESUME_MAY_CHANGE:
        doc.pop(section, None)
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]
