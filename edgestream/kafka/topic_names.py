"""Topic names of a run (DESIGN.md "Kafka conventions"): `<name>-<algorithm>-<run id>.dev.<i>` and friends."""

from __future__ import annotations

from edgestream.runid import check_run_id, new_run_id, run_name  # noqa: F401  (re-exported: runs and topics share names)


def device_topic(run: str, device: int) -> str:
    return f"{run}.dev.{device}"


def injection_topic(run: str, device: int) -> str:
    return f"{run}.inj.{device}"


def dlq_topic(run: str) -> str:
    return f"{run}.dlq"


def meta_topic(run: str) -> str:
    """The run's small compacted topic of facts about the run (the producer config it was started with)."""
    return f"{run}.meta"


def models_topic(run: str) -> str:
    """The run's compacted topic of model versions (docs/model-format.md), unless publish.topic names another."""
    return f"{run}.models"


def run_of_topic(topic: str) -> str | None:
    """The run of a topic named `<run>.models`, else None."""
    return topic[:-len(".models")] if topic.endswith(".models") and len(topic) > len(".models") else None


def ps_topic(run: str, kind: str) -> str:
    return f"{run}.ps.{kind}"


def run_topic_prefix(run: str) -> str:
    return f"{run}."


def trainer_group(run: str, device: int, kind: str = "dev") -> str:
    """The consumer group of a run's device stream (kind 'dev') or injection topic (kind 'inj')."""
    return f"{run}.{kind}.{device}.trainer"


def hold_group(run: str) -> str:
    """The consumer group a live orchestrator of `run` is a member of (edgestream.launch.hold)."""
    return f"{run}.orchestrator"
