"""What an engine is to the driver: a `Performer`, one typed method per request kind, dispatched here once.

A worker (edgestream.sync) yields requests; the driver (runner.driver.drive) hands each to
`performer.perform(rank, request)`. An engine subclasses `Performer` and implements, for every request
kind it can perform, the method `do_<kind in snake case>(rank, request)`: `do_take_batch` for `TakeBatch`,
`do_all_reduce` for `AllReduce`, `do_get_params` for `GetParams` (`method_name`). What an engine can
perform (`performs`, the kinds of sync.requests.REQUESTS with such a method) is derived from what its
class implements, never listed by hand; the engine registry (runner.engines) and `check_runs` read it.

A method returns the request's result, or, in a cooperative engine, a generator producing it (SimPy
events in the simulator, park tokens in the lockstep engine): see runner.driver. `Now` and `Log` have
defaults every engine shares (the engine's clock; the driver writes the step line).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property
from typing import Any, ClassVar

from edgestream.sync.requests import REQUESTS, Log, Now


def method_name(kind: type) -> str:
    """The performer method of request kind `kind`: `TakeBatch` -> "do_take_batch"."""
    return "do_" + re.sub(r"(?<!^)(?=[A-Z])", "_", kind.__name__).lower()


class Performer:
    """Base of every engine's performer (see module doc). `engine` names the engine in errors."""

    engine: ClassVar[str] = "engine"
    #: the request kinds this class performs: derived from its do_* methods when the class is defined
    performs: ClassVar[frozenset[type]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.performs = frozenset(k for k in REQUESTS if callable(getattr(cls, method_name(k), None)))

    def now(self, rank: int) -> float:
        """The engine's time in seconds for worker `rank` (virtual, monotonic wall, or a counter)."""
        raise NotImplementedError

    @cached_property
    def _methods(self) -> dict[type, Callable[[int, Any], Any]]:
        return {k: getattr(self, method_name(k)) for k in self.performs}

    def perform(self, rank: int, request: Any) -> Any:
        """Worker `rank`'s request performed: its result, or a generator producing it."""
        method = self._methods.get(type(request))
        if method is None:
            raise TypeError(f"the {self.engine} cannot perform {type(request).__name__} (worker {rank}); it "
                            f"performs {', '.join(sorted(k.__name__ for k in self.performs))}")
        return method(rank, request)

    def do_now(self, rank: int, request: Now) -> float:
        return float(self.now(rank))

    def do_log(self, rank: int, request: Log) -> None:
        return None  # the driver writes the step line
