"""What every drift detector is (the `detectors` kind, docs/extending.md): an object fed one prequential error at a
time, in the order the model scored the samples, that says when their distribution changed.

The interface the engines call (`Detector` gives the parts a subclass need not write):

* ``name``: how events name it;  ``n``: values seen;  ``detections``: drifts reported;
* ``update(value) -> bool``: True when a drift is detected at this value; the detector then starts afresh (its
  statistics are dropped before the next value, as River's detectors do), so the next detection needs new evidence;
* ``update_many(values) -> list[int]``: the positions of the detections within `values`, the same as calling
  `update` on each in turn; `last_statistics` then holds `statistic()` at each of them;
* ``statistic() -> dict[str, float]``: the figures at the last value (at a detection, those a ``drift`` event
  reports: each built-in names its own);
* ``state_dict() -> dict`` / ``load_state_dict(d)``: plain ints, floats, strings and lists only (JSON, and a
  checkpoint read with ``torch.load(weights_only=True)``): a detector restored mid-stream detects what the
  uninterrupted one would.

A built-in declares its params as `Param`s (the schema algorithms use, edgestream.sync.hyperparams) under
``drift.params``; its state is the attributes it lists in `STATE`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from edgestream.sync.hyperparams import Param, check_params, coerce

#: how a detector's params are named in one-line errors (the config's `drift.params`)
PARAMS_PREFIX = "drift.params"
#: state_dict layout version
STATE_VERSION = 1


class DetectorError(ValueError):
    """A detector that cannot be built, a value it cannot read or a state it cannot load (one line)."""


def not_finite(name: str, value: float, position: int | None = None) -> DetectorError:
    at = "" if position is None else f" at position {position}"
    return DetectorError(f"drift detector {name}: the error {value!r}{at} is not a finite number (a diverged model?)")


def as_values(values: Any) -> np.ndarray:
    """`values` as a 1-D float64 array (a list, a tuple or an array of any float dtype)."""
    return np.asarray(values, dtype=np.float64).reshape(-1)


def as_finite(name: str, values: Any) -> np.ndarray:
    """`values` as `as_values` gives them; DetectorError naming the first that is not finite, and where."""
    x = as_values(values)
    finite = np.isfinite(x)
    if not finite.all():
        at = int(np.argmin(finite))
        raise not_finite(name, float(x[at]), at)
    return x


class Detector:
    """The base of the built-in detectors, and of a user's when they like (the module doc): a subclass writes
    `update`, `statistic`, `_reset` and lists its state's attributes in `STATE`; `PARAMS` declares its params."""

    name: ClassVar[str] = "detector"
    #: the params `make_detector` checks (`drift.params.<name>: ...`) and their defaults
    PARAMS: ClassVar[tuple[Param, ...]] = ()
    #: the attributes `state_dict` holds besides n and detections (ints, floats, bools, strs, lists of floats)
    STATE: ClassVar[tuple[str, ...]] = ()
    #: reads 0/1 errors only (a classification task's): `make_detector` refuses it for a regression
    BINARY: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        problems = check_params(self.PARAMS, params, PARAMS_PREFIX)
        if problems:
            raise DetectorError("\n".join(problems))
        self.params: dict[str, Any] = coerce(self.PARAMS, params)
        self.n = 0
        self.detections = 0
        self.last_statistics: list[dict[str, float]] = []
        self._reset()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.params.items())})"

    # ------------------------------------------------------------------ what a subclass writes
    def _reset(self) -> None:
        """Forget the statistics (at the start and after a detection); `n` and `detections` stay."""

    def update(self, value: float) -> bool:
        raise NotImplementedError

    def statistic(self) -> dict[str, float]:
        return {}

    # ------------------------------------------------------------------ given
    def update_many(self, values: Any) -> list[int]:
        """The positions within `values` where `update` detects a drift (it is called on each in turn)."""
        x = as_finite(self.name, values)
        found: list[int] = []
        stats: list[dict[str, float]] = []
        update = self.update
        for i, v in enumerate(x.tolist()):
            if update(v):
                found.append(i)
                stats.append(self.statistic())
        self.last_statistics = stats
        return found

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"detector": self.name, "version": STATE_VERSION, "params": dict(self.params),
                               "n": self.n, "detections": self.detections}
        for key in self.STATE:
            out[key] = _plain(getattr(self, key))
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take the state `state_dict` gave (after JSON or a checkpoint); DetectorError (one line) when it is another
        detector's, another version's or was saved with other params."""
        if not isinstance(state, Mapping):
            raise DetectorError(f"drift detector {self.name}: a state is a mapping, got {type(state).__name__}")
        if state.get("detector") != self.name or state.get("version") != STATE_VERSION:
            raise DetectorError(f"drift detector {self.name}: the state is of {state.get('detector')!r} version "
                                f"{state.get('version')!r}, not of {self.name!r} version {STATE_VERSION}")
        saved = dict(state.get("params") or {})
        if saved != self.params:
            raise DetectorError(f"drift detector {self.name}: the state was saved with params {saved}, this detector "
                                f"has {self.params}")
        missing = [k for k in ("n", "detections", *self.STATE) if k not in state]
        if missing:
            raise DetectorError(f"drift detector {self.name}: the state lacks {', '.join(missing)}")
        self.n, self.detections = int(state["n"]), int(state["detections"])
        for key in self.STATE:
            setattr(self, key, _restored(getattr(self, key), state[key]))
        self.last_statistics = []


def _plain(value: Any) -> Any:
    """A copy of a state value as plain JSON-able Python: bools as ints, numpy scalars (a value fed as np.float64)
    as int / float -- a checkpoint read with weights_only=True takes no numpy object --, nested lists copied."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise DetectorError(f"a detector's state holds {value!r}: not JSON (a bug in the detector)")
        return float(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    return value


def _restored(template: Any, value: Any) -> Any:
    """`value` back in the type the attribute has now (`template`): ints, floats, bools, nested lists."""
    if isinstance(template, bool):
        return bool(value)
    if isinstance(template, int):
        return int(value)
    if isinstance(template, float):
        return float(value)
    if isinstance(template, list):
        return [_restored_item(v) for v in value]
    return value


def _restored_item(value: Any) -> Any:
    if isinstance(value, list):
        return [_restored_item(v) for v in value]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
