"""asp — fully asynchronous parallel (TAP; ALGORITHMS.md "Parameter-server family").

Workers push a gradient per step (`ps_worker.gradient_worker`); the PS applies every update on
arrival (W -= eta g, the server optimizer with the run's momentum and weight decay) and pulls never
wait. The baseline with no bound on staleness.
"""

from __future__ import annotations

from edgestream.sync.coordinator import Coordinator
from edgestream.sync.ps_worker import BATCH, gradient_worker

PARAMS = (BATCH,)
worker = gradient_worker


class ASPCoordinator(Coordinator):
    """Apply on arrival, answer every pull at once (the base coordinator's defaults)."""
