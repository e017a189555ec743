"""The `detectors` kind: `make_detector(name, params, labels)` builds the detector the config's `drift:` names, or
says in one line per problem why it cannot.

A name resolves through `edgestream.plugins.DETECTORS` (a built-in -- adwin, page_hinkley, ddm --, an import path
``"pkg.mod:factory"`` or an entry point of the group ``edgestream.detectors``) to a factory called as
``factory(**params)``. Params are checked first: against the factory's `PARAMS` schema when it declares one (the
built-ins do: ``drift.params.delta: 2 is not allowed; must be < 1``), else against its signature (an unknown name
is listed with the allowed ones). A detector that reads 0/1 errors (`BINARY`, as DDM) is refused for a regression.
What the factory returns must have ``update``, ``state_dict`` and ``load_state_dict``; one that is not an
`edgestream.drift.Detector` is wrapped so it also has ``update_many``, ``statistic``, ``n`` and ``detections``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from edgestream.drift.base import PARAMS_PREFIX, STATE_VERSION, Detector, DetectorError
from edgestream.plugins import DETECTORS
from edgestream.sync.hyperparams import check_params

FIELD = "drift.detector"
#: what a detector must have (the rest a wrapper supplies)
REQUIRED = ("update", "state_dict", "load_state_dict")


def make_detector(name: str, params: Mapping[str, Any] | None = None, labels: bool = True) -> Any:
    """A fresh detector `name` built with `params` for a task whose targets are classes (`labels`: errors are
    0/1) or not (regression: absolute errors); DetectorError (a ValueError), one line per problem, otherwise."""
    factory = DETECTORS.load(name, FIELD)
    params = {} if params is None else params
    if not isinstance(params, Mapping):
        raise DetectorError(f"{PARAMS_PREFIX}: must be a mapping, got {type(params).__name__}")
    params = dict(params)
    problems = _param_problems(factory, params)
    if problems:
        raise DetectorError("\n".join(problems))
    if not labels and getattr(factory, "BINARY", False):
        raise DetectorError(f"{FIELD}: {name} reads 0/1 errors (classification); for regression use adwin or "
                            "page_hinkley")
    try:
        detector = factory(**params)
    except DetectorError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's factory may raise anything
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise DetectorError(f"{FIELD}: {name!r} could not be built as factory(**{params}) "
                            f"({type(exc).__name__}: {detail})") from None
    if isinstance(detector, Detector):
        return detector
    lacks = [m for m in REQUIRED if not callable(getattr(detector, m, None))]
    if lacks:
        raise DetectorError(f"{FIELD}: {name!r} returned a {type(detector).__name__} without {', '.join(lacks)}; a "
                            f"detector has update(value) -> bool, state_dict() and load_state_dict(d)")
    return Wrapped(detector, str(getattr(detector, "name", name)))


def _param_problems(factory: Any, params: dict[str, Any]) -> list[str]:
    """Problems of `params` for `factory`: its PARAMS schema when it declares one, else its signature."""
    schema = getattr(factory, "PARAMS", None)
    if isinstance(schema, tuple) and schema:
        return check_params(schema, params, PARAMS_PREFIX)
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    kinds = {p.kind for p in sig.parameters.values()}
    if inspect.Parameter.VAR_KEYWORD in kinds:
        return []
    allowed = [p.name for p in sig.parameters.values()
               if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    return [f"{PARAMS_PREFIX}.{key}: unknown field; allowed fields: {', '.join(allowed) or '(none)'}"
            for key in params if key not in allowed]


class Wrapped(Detector):
    """A user's detector that has update/state_dict/load_state_dict only, with the rest of the interface: `n` and
    `detections` counted here, `statistic()` its own when it has one (else {}), `update_many` a loop."""

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name  # type: ignore[misc] - an instance's own name
        super().__init__()

    def update(self, value: float) -> bool:
        self.n += 1
        hit = bool(self.inner.update(value))
        self.detections += hit
        return hit

    def statistic(self) -> dict[str, float]:
        own = getattr(self.inner, "statistic", None)
        return dict(own()) if callable(own) else {}

    def state_dict(self) -> dict[str, Any]:
        return {"detector": self.name, "version": STATE_VERSION, "params": {}, "n": self.n,
                "detections": self.detections, "inner": self.inner.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.inner.load_state_dict(state["inner"])
