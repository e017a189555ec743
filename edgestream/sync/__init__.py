"""edgestream.sync — every algorithm, written once as engine-free worker generators (see DESIGN.md).

A worker `yield`s requests (edgestream.sync.requests) and receives results; every engine (the
simulator, the real trainer, the in-process lockstep engine) runs it through `edgestream.runner.drive`
and performs them. `ALGORITHMS` maps names to specs. Algorithm state is explicit (`WorkerContext.state`,
see edgestream.sync.context), so engines can checkpoint and restore it.
"""

from edgestream.sync.abs_sgd import delay_compensate
from edgestream.sync.context import WorkerContext
from edgestream.sync.coordinator import Coordinator, ServerContext
from edgestream.sync.dbs_sgd import reassign_batches
from edgestream.sync.exchange import Codec, ExchangeResult, exchange
from edgestream.sync.local_sgd import adacomm_tau
from edgestream.sync.params import Param
from edgestream.sync.ps_worker import gradient_worker
from edgestream.sync.registry import ALGORITHMS, AlgorithmSpec, get_algorithm
from edgestream.sync.requests import (
    Ack,
    AllGather,
    AllReduce,
    Apply,
    Batch,
    Compute,
    ComputeResult,
    GetParams,
    Handle,
    Inject,
    Log,
    Now,
    Poll,
    Pull,
    Pulled,
    Push,
    Request,
    SetParams,
    Sleep,
    Start,
    TakeBatch,
    Wait,
)
from edgestream.sync.scadles import scaled_lr
from edgestream.sync.ssp import SSPCoordinator

__all__ = [
    "ALGORITHMS", "Ack", "AlgorithmSpec", "AllGather", "AllReduce", "Apply", "Batch", "Codec", "Compute",
    "ComputeResult", "Coordinator", "ExchangeResult", "GetParams", "Handle", "Inject", "Log", "Now", "Param",
    "Poll", "Pull", "Pulled", "Push", "Request", "SSPCoordinator", "ServerContext", "SetParams", "Sleep", "Start",
    "TakeBatch", "Wait", "WorkerContext", "adacomm_tau", "delay_compensate", "exchange", "get_algorithm",
    "gradient_worker", "reassign_batches", "scaled_lr",
]
