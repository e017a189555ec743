"""staleness-ssp: SSP whose parameter server weights each push by 1 / (1 + staleness).

A plain edgestream algorithm: the worker is SSP's (push a gradient, pull the model), the coordinator a
subclass of edgestream's SSP coordinator; it runs in the simulator and on the Kafka parameter server.
"""

from __future__ import annotations

from edgestream.sync import AlgorithmSpec, Param, Push, SSPCoordinator, gradient_worker


class StalenessSSPCoordinator(SSPCoordinator):
    """SSP's pull rule; an update computed `staleness` versions ago is applied at lr / (1 + staleness)."""

    def on_push(self, worker: int, push: Push, now: float) -> dict:
        staleness = max(0, self.version - int(push.version))
        weight = 1.0 / (1.0 + staleness)
        self.apply(push.update, push.lr * weight)
        return {"weight": weight}


STALENESS_SSP = AlgorithmSpec(
    name="staleness-ssp",
    worker=gradient_worker,
    schema=(Param("s", 3, "int", ge=0, doc="staleness bound, as SSP's"),
            Param("batch", None, "int", ge=1, optional=True, doc="fixed batch; null = the run's batch policy")),
    synchronous=False,
    summary="SSP whose server weights each push by 1/(1 + staleness)",
    coordinator=StalenessSSPCoordinator,
)
