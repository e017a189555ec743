"""The algorithm registry: `ALGORITHMS[name]` -> `AlgorithmSpec` (worker generator, params, checks).

Engines look an algorithm up here, `resolve` its params (defaults merged, problems raised), build a
`WorkerContext` per worker and drive `spec.worker(ctx)`. A parameter-server algorithm also registers
its coordinator (`spec.coordinator(ServerContext, initial model)`, edgestream.sync.coordinator), which
the engine hosts; `spec.family` is "ps" for those and "collective" for the others.

The registry is the one list of algorithm names: the config accepts a name exactly when it is here.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from edgestream import plugins
from edgestream.algorithm_names import NAMES, PS
from edgestream.sync import (
    abs_sgd,
    adsp,
    asp,
    bsp,
    consgd,
    dbs_sgd,
    ddl,
    dssp,
    dynsgd,
    elastic_bsp,
    local_sgd,
    ps_local,
    scadles,
    ssp,
)
from edgestream.sync.context import WorkerContext
from edgestream.sync.coordinator import CoordinatorFactory
from edgestream.sync.hyperparams import Param, check_params, coerce, defaults
from edgestream.sync.requests import BASE_REQUESTS, COLLECTIVE_REQUESTS, PS_REQUESTS

#: the batch policy of every algorithm that declares none: a fixed batch of 64 samples
FIXED_BATCH: dict[str, Any] = {"policy": "fixed", "size": 64}

WorkerFn = Callable[[WorkerContext], Generator[Any, Any, None]]


@dataclass(frozen=True)
class AlgorithmSpec:
    """name; worker: the generator function run once per worker; schema: its params;
    synchronous: every replica holds the same parameters after each step (after each averaging
    round for the local-sgd family); summary: one line for help texts; coordinator: the PS side of a
    parameter-server algorithm (None for the collective family); batch_policies: the batch policies
    the algorithm is made for (the first kind is its own); default_batch: its batch policy when the
    config gives none."""

    name: str
    worker: WorkerFn
    schema: tuple[Param, ...]
    synchronous: bool
    summary: str
    coordinator: CoordinatorFactory | None = None
    batch_policies: tuple[str, ...] = ("fixed",)
    default_batch: Mapping[str, Any] = field(default_factory=lambda: dict(FIXED_BATCH))
    #: the engines it runs on: "sim" (the simulator), "local" (real trainers; a PS algorithm on the Kafka
    #: parameter server); None = every engine that performs the requests its workers send
    engines: tuple[str, ...] | None = None
    #: its workers' takes never depend on what a step did (a fixed batch, asked for the same way each
    #: step): an engine may take the next batch ahead while the current one computes (trainer/prefetch.py)
    takes_ahead: bool = False
    #: its workers aggregate through the weighted exchange (`exchange.synchronous_step`), which carries the drift
    #: responses a group performs together (reweight, reset_optimizer, lr_boost, checkpoint: runner/responses.py)
    weighted_exchange: bool = False

    def batch_for(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """The batch policy a run of this algorithm uses: the config's algorithm.batch, or the
        algorithm's default when the config gives none."""
        return dict(given) if given is not None else dict(self.default_batch)

    def suited_batch(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        """As `batch_for`, but a policy that does not suit this algorithm (not in `batch_policies`) is
        replaced by the default too (comparisons run every algorithm with a batch policy it is made for)."""
        if given is not None and given.get("policy") in self.batch_policies:
            return {k: v for k, v in given.items() if v is not None}
        return dict(self.default_batch)

    @property
    def family(self) -> str:
        """"ps" (a coordinator hosted by the engine) or "collective"."""
        return "ps" if self.coordinator is not None else "collective"

    @property
    def requests(self) -> frozenset[type]:
        """The request kinds this algorithm's workers send (what an engine must perform to run it)."""
        return BASE_REQUESTS | (PS_REQUESTS if self.coordinator is not None else COLLECTIVE_REQUESTS)

    @property
    def defaults(self) -> dict[str, Any]:
        """{param: default}."""
        return defaults(self.schema)

    def validate(self, params: Mapping[str, Any] | None) -> list[str]:
        """Problems of `params` (the config's algorithm.params), one line each naming the field."""
        return check_params(self.schema, params)

    def resolve(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Defaults merged with `params`; ValueError listing every problem when they are invalid."""
        problems = self.validate(params)
        if problems:
            raise ValueError("\n".join(problems))
        return coerce(self.schema, params or {})


ALGORITHMS: dict[str, AlgorithmSpec] = {
    s.name: s
    for s in (
        AlgorithmSpec("ddl", ddl.worker, ddl.PARAMS, True,
                      "distributed SGD (BSP): fixed batch, plain average", takes_ahead=True, weighted_exchange=True),
        AlgorithmSpec("scadles", scadles.worker, scadles.PARAMS, True,
                      "ScaDLES: rate-proportional batches, weighted aggregation, linear LR scaling",
                      batch_policies=("rate", "available"), default_batch={"policy": "rate", "min": 8, "max": 1024},
                      weighted_exchange=True),
        AlgorithmSpec("abs-sgd", abs_sgd.worker, abs_sgd.PARAMS, True,
                      "ABS-SGD: one-step delayed sample-weighted all-reduce with delay compensation"),
        AlgorithmSpec("dbs-sgd", dbs_sgd.worker, dbs_sgd.PARAMS, True,
                      "DBS: batch sizes re-assigned proportional to measured speed", weighted_exchange=True),
        AlgorithmSpec("local-sgd", local_sgd.local_sgd_worker, local_sgd.LOCAL_SGD_PARAMS, False,
                      "local SGD: tau local steps, then model averaging"),
        AlgorithmSpec("fixed-adacomm", local_sgd.fixed_adacomm_worker, local_sgd.FIXED_ADACOMM_PARAMS, False,
                      "Fixed AdaComm: local SGD with fixed tau (default 40)"),
        AlgorithmSpec("adacomm", local_sgd.adacomm_worker, local_sgd.ADACOMM_PARAMS, False,
                      "AdaComm: local SGD with tau shrinking with the loss"),
        # ---------------------------------------------------------------- the parameter-server family
        AlgorithmSpec("asp", asp.worker, asp.PARAMS, False,
                      "ASP (TAP): the PS applies every gradient on arrival; pulls never wait",
                      asp.ASPCoordinator),
        AlgorithmSpec("ssp", ssp.worker, ssp.PARAMS, False,
                      "SSP(s): pulls wait while the slowest worker is more than s clocks behind",
                      ssp.SSPCoordinator),
        AlgorithmSpec("dssp", dssp.worker, dssp.PARAMS, False,
                      "DSSP(s_low, r): SSP whose threshold in [s_low, s_low + r] is set by predicted push times",
                      dssp.DSSPCoordinator),
        AlgorithmSpec("consgd", consgd.worker, consgd.PARAMS, False,
                      "ConSGD(lambda): SSP pulls; every update applied scaled by lambda (default 1/M)",
                      consgd.ConSGDCoordinator),
        AlgorithmSpec("dynsgd", dynsgd.worker, dynsgd.PARAMS, False,
                      "DynSGD: SSP pulls; updates based on the same version are averaged, not summed",
                      dynsgd.DynSGDCoordinator),
        AlgorithmSpec("elastic-bsp", elastic_bsp.worker, elastic_bsp.PARAMS, False,
                      "ElasticBSP(R): asynchronous supersteps ended by a barrier ZipLine places on R "
                      "predicted pushes per worker", elastic_bsp.ElasticBSPCoordinator),
        AlgorithmSpec("adsp", adsp.worker, adsp.PARAMS, False,
                      "ADSP: no-waiting workers commit accumulated updates on a timer; the PS searches "
                      "the commit rate so all workers commit equally often", adsp.ADSPCoordinator),
        AlgorithmSpec("bsp", bsp.worker, bsp.PARAMS, False,
                      "BSP on the PS: the mean of all M gradients of a step is applied once; pulls wait for it",
                      bsp.BSPCoordinator),
        AlgorithmSpec("fixed-adacomm-ps", ps_local.fixed_adacomm_ps_worker, ps_local.FIXED_PARAMS, False,
                      "Fixed ADACOMM on the PS: tau (default 40) local steps, commit, the PS averages at a barrier",
                      ps_local.FixedAdaCommPSCoordinator),
        AlgorithmSpec("adacomm-ps", ps_local.adacomm_ps_worker, ps_local.ADAPTIVE_PARAMS, False,
                      "ADACOMM on the PS: as fixed-adacomm-ps, the PS shrinks tau with the group loss",
                      ps_local.AdaCommPSCoordinator),
    )
}


if tuple(ALGORITHMS) != NAMES or tuple(algorithm for algorithm, s in ALGORITHMS.items() if s.family == "ps") != PS:
    raise ImportError("edgestream/algorithm_names.py must list exactly the registered algorithms, in registry order")


def algorithm_names(family: str | None = None) -> list[str]:
    """Registered names, in registry order; `family` "ps" or "collective" filters."""
    return [n for n, s in ALGORITHMS.items() if family is None or s.family == family]


for _spec in ALGORITHMS.values():  # the built-ins, through the one extension mechanism
    plugins.ALGORITHMS.register(_spec.name, _spec, _spec.summary, where=_spec.worker.__module__)
plugins.ALGORITHMS._check = lambda obj: (None if isinstance(obj, AlgorithmSpec) else
                                         f"is a {type(obj).__name__}, not an edgestream.sync.AlgorithmSpec")


def get_algorithm(name: str, field: str = "algorithm.name") -> AlgorithmSpec:
    """The spec of `name`: a built-in, an import path 'package.module:attribute' to an AlgorithmSpec, or an
    entry point in the group edgestream.algorithms; ValueError (edgestream.plugins.PluginError, one line)
    otherwise."""
    spec = ALGORITHMS.get(name)
    return spec if spec is not None else plugins.ALGORITHMS.load(name, field)
