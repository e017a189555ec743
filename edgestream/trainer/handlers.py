"""The real performer's table: request kind -> the `TrainerPerformer` method that performs it
(trainer/performer.py dispatches through it). Its keys are the "local" engine's capabilities
(runner/engines.py): the collective family and, through the Kafka PS, the parameter-server one. No torch
here, so the orchestrator registers the engine and checks a config without importing it."""

from __future__ import annotations

from edgestream.sync.requests import (
    Ack,
    AllGather,
    AllReduce,
    Apply,
    Compute,
    GetParams,
    Inject,
    Log,
    Now,
    Poll,
    Pull,
    Push,
    SetParams,
    Sleep,
    Start,
    TakeBatch,
    Wait,
)

HANDLERS: dict[type, str] = {
    TakeBatch: "_take", Compute: "_compute", AllReduce: "_collective", AllGather: "_collective", Start: "_start",
    Poll: "_poll", Wait: "_wait", Apply: "_apply", GetParams: "_get_params", SetParams: "_set_params", Ack: "_ack",
    Inject: "_inject", Now: "_now", Sleep: "_sleep", Log: "_log", Push: "_push", Pull: "_pull",
}
PERFORMS: frozenset[type] = frozenset(HANDLERS)
