"""edgestream.sync — every algorithm, written once as engine-free worker generators (see DESIGN.md).

A worker `yield`s requests (edgestream.sync.requests) and receives results; every engine (the
simulator, the real trainer, the in-process lockstep engine) runs it through `edgestream.runner.drive`
and performs them. `ALGORITHMS` maps names to specs. Algorithm state is explicit (`WorkerContext.state`,
see edgestream.sync.context), so engines can checkpoint and restore it.
"""

from edgestream.lazy import lazy_exports
from edgestream.sync.exchange import exchange  # noqa: F401 - also its module's name: bound here, not lazily

#: public name -> the module that defines it (loaded on first use: reading a config's algorithm needs no torch)
_EXPORTS = {
    "delay_compensate": "edgestream.sync.abs_sgd",
    "WorkerContext": "edgestream.sync.context",
    "Coordinator": "edgestream.sync.coordinator",
    "ServerContext": "edgestream.sync.coordinator",
    "reassign_batches": "edgestream.sync.dbs_sgd",
    "Codec": "edgestream.sync.exchange",
    "ExchangeResult": "edgestream.sync.exchange",
    "exchange": "edgestream.sync.exchange",
    "adacomm_tau": "edgestream.sync.local_sgd",
    "Param": "edgestream.sync.hyperparams",
    "gradient_worker": "edgestream.sync.ps_worker",
    "ALGORITHMS": "edgestream.sync.registry",
    "AlgorithmSpec": "edgestream.sync.registry",
    "get_algorithm": "edgestream.sync.registry",
    "Ack": "edgestream.sync.requests",
    "AllGather": "edgestream.sync.requests",
    "AllReduce": "edgestream.sync.requests",
    "Apply": "edgestream.sync.requests",
    "Batch": "edgestream.sync.requests",
    "Compute": "edgestream.sync.requests",
    "ComputeResult": "edgestream.sync.requests",
    "GetParams": "edgestream.sync.requests",
    "Handle": "edgestream.sync.requests",
    "Inject": "edgestream.sync.requests",
    "Log": "edgestream.sync.requests",
    "Now": "edgestream.sync.requests",
    "Poll": "edgestream.sync.requests",
    "Pull": "edgestream.sync.requests",
    "Pulled": "edgestream.sync.requests",
    "Push": "edgestream.sync.requests",
    "Request": "edgestream.sync.requests",
    "SetParams": "edgestream.sync.requests",
    "Sleep": "edgestream.sync.requests",
    "Start": "edgestream.sync.requests",
    "TakeBatch": "edgestream.sync.requests",
    "Wait": "edgestream.sync.requests",
    "scaled_lr": "edgestream.sync.scadles",
    "SSPCoordinator": "edgestream.sync.ssp",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
