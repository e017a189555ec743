"""`edgestream ps`: the parameter-server process -- its log, its signals, the wait for Kafka (a restart waits the
outage budget), then the run's `ParameterServer` (ps/server.py) until it stops."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from edgestream.kafka.admin import KafkaUnavailable
from edgestream.kafka.topic_check import TopicMismatch
from edgestream.kafka.topic_settings import TopicSettingsError
from edgestream.metrics.logfile import attach_log_file
from edgestream.ps.checkpoint import PSError, ps_checkpoint_path
from edgestream.ps.server import ParameterServer, ps_outage


def serve(cfg: Any, *, run_id: str, bootstrap: str, out: str | Path) -> dict[str, Any]:
    """The `edgestream ps` process: serve run `<name>-<algorithm>-<run id>` until it stops; returns the summary."""
    import signal

    from edgestream.kafka.admin import WaitInterrupted, wait_for_broker
    from edgestream.kafka.outage_calls import wait_until_answers
    from edgestream.kafka.security import KafkaRefused
    from edgestream.runner.engines import EngineError
    from edgestream.runner.plan import RunPlan

    try:
        plan = RunPlan.resolve(cfg)
    except EngineError as exc:
        raise PSError("; ".join(exc.problems)) from None
    if plan.algorithm.coordinator is None:
        raise PSError(f"algorithm.name: {plan.algorithm.name!r} is not a parameter-server algorithm; it needs no "
                      "PS (edgestream train runs it over torch.distributed)")
    run = plan.run_name(run_id)
    run_dir = Path(out) / run
    (run_dir / "ranks").mkdir(parents=True, exist_ok=True)
    handler = attach_log_file(run_dir / "ranks" / "ps.log")
    stop_event = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop_event.set())
    try:
        try:
            if ps_checkpoint_path(run_dir).exists():  # a restart, maybe while Kafka is away: wait the budget
                wait_until_answers(bootstrap, ps_outage(plan, bootstrap), plan.security, should_stop=stop_event.is_set)
            else:
                wait_for_broker(bootstrap, plan.security, should_stop=stop_event.is_set)
        except (KafkaUnavailable, KafkaRefused, WaitInterrupted) as exc:
            raise PSError(str(exc)) from None
        server = ParameterServer(plan, run, bootstrap, run_dir, stop_event=stop_event)
        try:
            return server.run()
        except (TopicMismatch, TopicSettingsError) as exc:  # its topics exist otherwise (kafka.topics): one line each
            raise PSError(str(exc)) from None
    finally:
        logging.getLogger("edgestream").removeHandler(handler)
        handler.close()
