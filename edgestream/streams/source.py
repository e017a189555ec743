"""The stream-source protocol: what a device stream offers so that ONE sequence takes its batches.

Three sources implement `StreamSource`: the simulator's `edgestream.sim.stream.VirtualStream` (counts
from the rate model, waits in virtual time), the Kafka consumer's
`edgestream.consumers.kafka_stream.KafkaDeviceStream` (counts on the broker's offsets and timestamps,
waits by polling) and the lockstep engine's `edgestream.runner.array_stream.ArrayStream` (an in-memory
stream that always holds its batch). `take_batch` is the take-a-batch sequence of
`edgestream.streams.take`, written once:

1. `source.counts()`: what is buffered now, what arrived in the last window, and (with a lag bound,
   when the rule asks) in the last max_lag_s seconds (`TakeCounts`);
2. `source.rule.decide(...)`: truncate once, measure the rate, size b_i (`TakeRule`, the decisions);
3. `source.skip(n)`: drop the `decision.skip` oldest samples (counted as dropped; returns how many were);
4. `source.wait(decision, timeout)`: a generator that returns True once `decision.ready(buffered)`, or
   False when `timeout` (seconds) passed first. A cooperative source yields its engine's events while it
   waits (the simulator: a SimPy timeout); a blocking one waits inside and never yields;
5. `source.take(decision, dropped)`: the `decision.target` oldest samples plus what peers injected, as
   the source's batch.

The batch a worker trains on carries `facts` (`BatchFacts`): what the stream did to get it. The request
driver notes them on the step's meter, once, for every engine (`edgestream.runner.driver`,
`StepMeter.note_batch`).

`Stateful` is torchdata's protocol (`state_dict()` / `load_state_dict(state)`): a source's position as
plain values (ints, floats, lists; tensors where the data are tensors), loadable into a fresh source of
the same device so that both then take identical batches. No pickle.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from edgestream.streams.take import TakeDecision, TakeRule


@runtime_checkable
class Stateful(Protocol):
    """An object whose state can be saved and restored (torchdata's `Stateful`)."""

    def state_dict(self) -> dict[str, Any]:
        """The state as plain values (safe for torch.load(weights_only=True))."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned (ValueError naming what is wrong with `state`)."""
        ...


class TakeCounts(NamedTuple):
    """Step 1 of the sequence: samples buffered now, arrived in the last window (None: not measured,
    allowed when `TakeRule.measures_window` is False) and arrived in the last max_lag_s seconds (None:
    not needed, `TakeRule.needs_recent`)."""

    available: int
    arrived_in_window: int | float | None
    recent: int | None = None


@runtime_checkable
class StreamSource(Stateful, Protocol):
    """One device's stream, as `take_batch` takes from it (see module doc)."""

    rule: TakeRule

    def counts(self) -> TakeCounts: ...

    def skip(self, n: int) -> int: ...

    def wait(self, decision: TakeDecision, timeout: float | None = None) -> Generator[Any, Any, bool]: ...

    def take(self, decision: TakeDecision, dropped: int) -> Any: ...


@dataclass(slots=True)
class BatchFacts:
    """What a stream did to get a batch, as the step line reports it (`StepMeter.note_batch`).

    A field that is None is not measured by that engine and not noted (the step line keeps only the keys
    its engine measures). Counts add up over a step: `batch` (rows; None: the algorithm's Log reports it),
    `dropped`, `injected`, `dlq`. Gauges keep the newest value: `buffer_samples`, `buffer_bytes`, `rate`
    and `lag_s` (noted together when `buffer_samples` is not None; `lag_s` may then be None: unknown),
    `held_samples`, `lag_warning`. `seqs` and `labels`: the own-stream rows' sequence numbers and labels
    (`StepMeter.note_samples`; None: not noted)."""

    injected: int
    batch: int | None = None
    dropped: int | None = None
    dlq: int | None = None
    buffer_samples: int | None = None
    buffer_bytes: int | None = None
    held_samples: int | None = None
    rate: float | None = None
    lag_s: float | None = None
    lag_warning: str | None = None
    seqs: Any = None
    labels: Any = None


def take_batch(source: StreamSource, size: int | None = None,
               timeout: float | None = None) -> Generator[Any, Any, Any]:
    """Take one batch from `source` (module doc): its batch, or None when `timeout` passed while
    waiting. `size` overrides the batch policy's b_i. A generator: a cooperative engine `yield from`s it,
    a blocking one runs it with `edgestream.runner.driver.run_blocking`."""
    available, arrived, recent = source.counts()
    decision = source.rule.decide(available, arrived, size, recent)
    dropped = source.skip(decision.skip) if decision.skip else 0
    ready = yield from source.wait(decision, timeout)
    if not ready:
        return None
    return source.take(decision, dropped)


def check_state(state: Any, owner: str, version: int, keys: tuple[str, ...]) -> Mapping[str, Any]:
    """`state` as a mapping holding `keys` at `version` (a source's `load_state_dict`); ValueError naming
    what is wrong otherwise."""
    if not isinstance(state, Mapping):
        raise ValueError(f"not a {owner} state: {type(state).__name__}, expected a mapping from state_dict()")
    missing = [k for k in ("version", *keys) if k not in state]
    if missing:
        raise ValueError(f"not a {owner} state: missing {', '.join(missing)}")
    if state["version"] != version:
        raise ValueError(f"{owner} state version {state['version']!r}; this edgestream reads version {version}")
    return state
