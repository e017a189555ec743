"""The Kafka parameter server in this process: `Served(plan, run, bootstrap, run_dir)` runs a ParameterServer
in a thread (checkpoints every 0.2 s, no evaluation) until `stop()`, which returns its result."""

from __future__ import annotations

import threading
from pathlib import Path

from edgestream.ps.server import ParameterServer
from edgestream.runner.plan import RunPlan


class Served:
    """A ParameterServer running in a thread until `stop()`."""

    def __init__(self, plan: RunPlan, run: str, bootstrap: str, run_dir: Path) -> None:
        self.stop_event = threading.Event()
        self.server = ParameterServer(plan, run, bootstrap, run_dir, stop_event=self.stop_event, checkpoint_s=0.2,
                                      evaluate=False)
        self.result: dict = {}
        self.thread = threading.Thread(target=lambda: self.result.update(self.server.run()), daemon=True)
        self.thread.start()

    def stop(self) -> dict:
        self.stop_event.set()
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.result
