"""The algorithm registry: `ALGORITHMS[name]` -> `AlgorithmSpec` (worker generator, params, checks).

Engines look an algorithm up here, `resolve` its params (defaults merged, problems raised), build a
`WorkerContext` per worker and drive `spec.worker(ctx)`. Parameter-server algorithms will add a
coordinator object next to their worker.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from edgestream.sync import abs_sgd, dbs_sgd, ddl, local_sgd, scadles
from edgestream.sync.context import WorkerContext
from edgestream.sync.params import Param, check_params, coerce, defaults

WorkerFn = Callable[[WorkerContext], Generator[Any, Any, None]]


@dataclass(frozen=True)
class AlgorithmSpec:
    """name; worker: the generator function run once per worker; schema: its params;
    synchronous: every replica holds the same parameters after each step (after each averaging
    round for the local-sgd family); summary: one line for help texts."""

    name: str
    worker: WorkerFn
    schema: tuple[Param, ...]
    synchronous: bool
    summary: str

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
                      "distributed SGD (BSP): fixed batch, plain average"),
        AlgorithmSpec("scadles", scadles.worker, scadles.PARAMS, True,
                      "ScaDLES: rate-proportional batches, weighted aggregation, linear LR scaling"),
        AlgorithmSpec("abs-sgd", abs_sgd.worker, abs_sgd.PARAMS, True,
                      "ABS-SGD: one-step delayed sample-weighted all-reduce with delay compensation"),
        AlgorithmSpec("dbs-sgd", dbs_sgd.worker, dbs_sgd.PARAMS, True,
                      "DBS: batch sizes re-assigned proportional to measured speed"),
        AlgorithmSpec("local-sgd", local_sgd.local_sgd_worker, local_sgd.LOCAL_SGD_PARAMS, False,
                      "local SGD: tau local steps, then model averaging"),
        AlgorithmSpec("fixed-adacomm", local_sgd.fixed_adacomm_worker, local_sgd.FIXED_ADACOMM_PARAMS, False,
                      "Fixed AdaComm: local SGD with fixed tau (default 40)"),
        AlgorithmSpec("adacomm", local_sgd.adacomm_worker, local_sgd.ADACOMM_PARAMS, False,
                      "AdaComm: local SGD with tau shrinking with the loss"),
    )
}


def get_algorithm(name: str) -> AlgorithmSpec:
    """The spec of `name`; ValueError naming the implemented algorithms otherwise."""
    if name not in ALGORITHMS:
        raise ValueError(f"algorithm.name: {name!r} is not implemented in edgestream.sync; "
                         f"available: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]
