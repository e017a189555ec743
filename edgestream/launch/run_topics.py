"""A local run's topics: created with kafka.topics resolved against the cluster (a resumed run: as its
topics.json recorded them), or, with create: false, those provisioned checked -- and recorded in topics.json.
Each refusal one line (LaunchError)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from edgestream.launch.errors import LaunchError


def create_run_topics(plan: Any, bootstrap: str, run_name: str, path: Path, resumed: bool) -> Any:
    """The run's topic settings (kafka/topic_settings.py), its topics made or checked: an existing topic with
    other settings, a missing provisioned one, Kafka trouble or a refusing ACL: LaunchError, one line each."""
    from confluent_kafka import KafkaException

    from edgestream.kafka.admin import KafkaUnavailable
    from edgestream.kafka.external import ExternalTopicError
    from edgestream.kafka.security import denied
    from edgestream.kafka.topic_check import TopicMismatch
    from edgestream.kafka.topic_provision import prepare_run_topics, run_settings
    from edgestream.kafka.topic_settings import TopicSettingsError

    cfg = plan.cfg
    try:
        if plan.external:  # the streams are the devices' own topics: they must be there as configured
            plan.external_topics(bootstrap)
        topic_settings = run_settings(cfg.kafka.topics, bootstrap, plan.security,
                                      resumed_dir=path if resumed else None)
        if not resumed:
            _check_no_topics(plan, bootstrap, run_name, topic_settings.create)
        prepare_run_topics(bootstrap, run_name, plan.world, plan.security, settings=topic_settings,
                           layout=plan.layout(run_name, bootstrap), ps=plan.algorithm.family == "ps",
                           models=_models_topic(plan, run_name))
    except TopicSettingsError as exc:
        raise LaunchError(str(exc), 2) from None
    except (ExternalTopicError, TopicMismatch) as exc:
        raise LaunchError(exc.lines[0], 2, detail=exc.lines[1:]) from None
    except (KafkaUnavailable, KafkaException) as exc:
        line = denied(exc, run_name, bootstrap, plan.security or {},
                      create=cfg.kafka.topics.create)  # an ACL refuses it: which right, what to do
        if line is not None:
            raise LaunchError(line, 1) from None
        detail = exc.args[0].str() if isinstance(exc, KafkaException) and exc.args and hasattr(
            exc.args[0], "str") else str(exc)
        raise LaunchError(f"creating the topics of run {run_name} on {bootstrap} failed: {detail}", 1) from None
    return topic_settings


def record_topics(path: Path, bootstrap: str, run_name: str, topic_settings: Any, security: Any) -> None:
    """topics.json: the run's topic settings and its topics as the cluster reports them (at the start, and
    again after the stop, when the producer's and the PS's topics exist too); best effort."""
    from confluent_kafka import KafkaException

    from edgestream.kafka.topic_provision import record_run_topics

    with contextlib.suppress(KafkaException, OSError):
        record_run_topics(path, bootstrap, run_name, topic_settings, security, timeout=10.0)


def _check_no_topics(plan: Any, bootstrap: str, run_name: str, create: bool) -> None:
    """A new run must not find its topics on the broker already: their samples belong to an earlier run under
    this id (its run directory elsewhere or deleted), and the trainers would read them; or to a concurrent one,
    named so while its orchestrator is a live member of the run's hold group (a run directory's lock cannot see
    an orchestrator of another --out folder; launch/hold.py)."""
    from edgestream.kafka.admin import list_topics
    from edgestream.kafka.topic_names import run_topic_prefix
    from edgestream.launch.hold import hold_group, live_holder

    found = list_topics(bootstrap, prefix=run_topic_prefix(run_name), security=plan.security)
    holder = live_holder(bootstrap, run_name, plan.security) if found else None
    if holder:
        raise LaunchError(f"run {run_name} is held by a concurrent run: {holder} (a live member of consumer "
                          f"group {hold_group(run_name)} on {bootstrap}); choose another --run-id, or "
                          "wait for it to end", 2)
    if found and create:  # create: false runs on the topics an administrator made for it
        raise LaunchError(f"run {run_name} already has topics on {bootstrap} ({sorted(found)[0]}, ...): "
                          "an earlier run used this run id; choose another --run-id (or --resume its run "
                          "directory)", 2)


def _models_topic(plan: Any, run_name: str) -> str | None:
    """The run's models topic when it publishes model versions (publish:; edgestream.publish), else None."""
    if plan.publish is None:
        return None
    from edgestream.kafka.topic_names import models_topic

    return plan.publish["topic"] or models_topic(run_name)
