"""The suite's shared factories: the configs tests build, a simulated run, a free port.

Import them as the other helper modules of tests/ are imported (`from factories import cfg_of, simulate`):
tests/conftest.py puts tests/ on sys.path. More helpers, by what they hold: tests/support/.

* `merge(base, over)`: a config dict with `over` merged in, section by section (rates, batch, compression and
  injection blocks are replaced whole).
* The simulator's small runs: `SIM_BASE` (digits, the mlp, 4 devices, explicit compute times: exactly
  repeatable) and `cfg_of(**over)`; the parameter-server family's `PS_SIM_BASE` (3 devices at speeds 1:1:3)
  and `ps_cfg_of(algorithm, params, **over)`; `simulate(cfg)` runs one and returns the engine and its
  in-memory event log (`simulate_records`: the engine and the events); `steps_of(events)` the step lines;
  `DATA_VARIANTS`: data and task sections of other shapes, class counts and a regression, by name.
* Real runs: `digits_config(name, ...)`, a full config dict of a small digits run (keywords for the knobs the
  tests vary, other sections replaced whole); `write_cfg(path, name, ...)`, the local-run config the fault,
  launch and Kafka tests write; `stream_config(name, ...)`, the smallest validated config of a stream test
  (the rest defaults); `write_config(path, raw)` writes any of them as YAML.
* `free_port()`: a TCP port on 127.0.0.1 that is free right now.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from edgestream.config import validate_dict

# ---------------------------------------------------------------------------------------------- merging

REPLACED = ("rates", "batch", "compression", "injection")  # sections replaced whole, not merged


def merge(base: dict, over: dict) -> dict:
    """A deep copy of `base` with `over` merged in (dicts key by key, except the REPLACED sections)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict) and k not in REPLACED:
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


# ------------------------------------------------------------------------------------- simulated runs

#: the simulator tests' run: digits, the mlp, 4 devices, explicit compute times (no calibration, so runs are
#: exactly repeatable), 10 steps
SIM_BASE: dict[str, Any] = {
    "name": "simtest",
    "seed": 3,
    "data": {"dataset": "digits"},
    "devices": {"count": 4, "rates": {"distribution": "constant", "rate": 100},
                "compute": {"base_s": 0.02, "per_sample_s": 0.001},
                "network": {"latency_ms": 1, "bandwidth_mbps": 100}},
    "model": {"name": "mlp"},
    "optim": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.0},
    "algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": 32}, "buffer": "persist"},
    "stop": {"target_accuracy": None, "max_time_s": None, "max_steps": 10},
    "eval": {"every_s": 2.0},
}

#: the parameter-server tests' run: 3 devices at speed ratio 1:1:3, streams fast enough never to starve a
#: worker, 6 virtual seconds
PS_SIM_BASE: dict[str, Any] = {
    "name": "pstest",
    "seed": 1,
    "data": {"dataset": "digits"},
    "model": {"name": "mlp"},
    "devices": {"count": 3, "rates": {"distribution": "constant", "rate": 5000},
                "compute": {"base_s": 0.01, "per_sample_s": 0.0005, "static": [1, 1, 3]},
                "network": {"latency_ms": 1, "bandwidth_mbps": 100}},
    "optim": {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0},
    "algorithm": {"name": "asp", "batch": {"policy": "fixed", "size": 32}},
    "stop": {"target_accuracy": None, "max_time_s": 6.0, "max_steps": None},
    "eval": {"every_s": 3.0},
}


def cfg_of(**over: Any):
    """The validated SIM_BASE run with `over` merged in."""
    return validate_dict(merge(SIM_BASE, over))


def ps_cfg_of(name: str, params: dict | None = None, **over: Any):
    """The validated PS_SIM_BASE run of PS algorithm `name` with its `params`, `over` merged in."""
    return validate_dict(merge(PS_SIM_BASE, {"algorithm": {"name": name, "params": params or {}}, **over}))


DATA_VARIANTS = {  # the data and task a run trains: digits; synthetic inputs of other ranks and class counts;
    # regression (the simulator's memory and batched-compute tests draw from it)
    "digits": {},
    "synthetic 1x5x5, 3 classes": {"data": {"dataset": "synthetic", "shape": [1, 5, 5], "num_classes": 3}},
    "synthetic 12, 7 classes": {"data": {"dataset": "synthetic", "shape": [12], "num_classes": 7}},
    "regression 6 -> 1": {"task": "regression", "data": {"dataset": "synthetic", "shape": [6]},
                          "stop": {"target_accuracy": None}},
}


def simulate(cfg, path=None):
    """Run `cfg` in the simulator; returns (engine, its EventLog), the events kept in memory (and written to
    `path` when given)."""
    from edgestream.metrics import EventLog
    from edgestream.sim.engine import SimEngine

    log = EventLog(path, keep=True)
    engine = SimEngine(cfg, log)
    engine.run()
    log.close()
    return engine, log


def simulate_records(cfg) -> tuple[Any, list[dict]]:
    """Run `cfg` in the simulator; returns (engine, the events)."""
    engine, log = simulate(cfg)
    assert log.records is not None
    return engine, log.records


def steps_of(events: list[dict], device: int | None = None) -> list[dict]:
    """The step lines of `events` (of one device when given)."""
    return [e for e in events if e["kind"] == "step" and (device is None or e["device"] == device)]


# ------------------------------------------------------------------------------------------ real runs


def digits_config(name: str, *, seed: int = 0, devices: int = 2, rate: float | dict = 200,
                  compute: dict | None = None, partition: str | None = None, model: str | dict = "mlp", lr: float = 0.05,
                  momentum: float | None = 0.9, weight_decay: float | None = None, algorithm: str | dict = "ddl",
                  params: dict | None = None, batch: int = 16, buffer: str | None = None,
                  max_steps: int | None = None, max_time_s: float | None = 120, eval_s: float = 1,
                  every_steps: int | None = None, **sections: Any) -> dict:
    """A full config dict of a small digits run (the mlp, ddl with fixed batches of 16, 2 devices streaming
    200 samples/s each, no target accuracy, 120 s at most, evaluation every second).

    rate: samples/s of a constant stream, or a whole `rates` block; compute: the devices' compute block;
    partition: the data partition; model: a name or a whole block; momentum/weight_decay None: left out (the schema's default); algorithm: a
    name (with params, batch size and buffer) or a whole block; every_steps: a checkpoint every so many steps.
    `sections` replace top-level sections whole (data, checkpoint, runtime, ...), as dict.update does.
    """
    if isinstance(algorithm, dict):
        algo = algorithm
    else:
        algo = {"name": algorithm, "batch": {"policy": "fixed", "size": batch}}
        if params is not None:
            algo["params"] = params
        if buffer is not None:
            algo["buffer"] = buffer
    optim: dict[str, Any] = {"lr": lr}
    if momentum is not None:
        optim["momentum"] = momentum
    if weight_decay is not None:
        optim["weight_decay"] = weight_decay
    dev: dict[str, Any] = {"count": devices,
                           "rates": rate if isinstance(rate, dict) else {"distribution": "constant", "rate": rate}}
    if compute is not None:
        dev["compute"] = compute
    raw: dict[str, Any] = {
        "name": name, "seed": seed,
        "data": {"dataset": "digits", **({"partition": partition} if partition is not None else {})},
        "devices": dev, "model": model if isinstance(model, dict) else {"name": model}, "optim": optim, "algorithm": algo,
        "stop": {"target_accuracy": None, "max_time_s": max_time_s, "max_steps": max_steps},
        "eval": {"every_s": eval_s}}
    if every_steps is not None:
        raw["checkpoint"] = {"every_steps": every_steps}
    raw.update(sections)
    return raw


def write_config(path: Path, raw: dict) -> Path:
    """Write config dict `raw` to `path` as YAML; returns `path`."""
    path.write_text(yaml.safe_dump(raw))
    return path


def write_cfg(path: Path, name: str, *, devices: int = 2, max_steps: int | None, max_time_s: float = 120,
              every_steps: int | None = None, buffer: str = "persist", **extra: Any) -> Path:
    """The local run the fault, launch and Kafka tests start: digits split iid over `devices` devices at 200
    samples/s, the mlp, ddl with fixed batches of 16 and a `buffer` buffer, `max_steps` steps; `extra`
    replaces top-level sections. Written to `path`."""
    raw = digits_config(name, devices=devices, partition="iid", buffer=buffer, max_steps=max_steps,
                        max_time_s=max_time_s, every_steps=every_steps)
    return write_config(path, {**raw, **extra})


def stream_config(name: str, dataset: dict | None = None, batch: dict | None = None, *, count: int = 2,
                  rates: dict | None = None, **extra: Any):
    """The smallest validated config of a stream test: `dataset` (default digits), `count` devices streaming
    at `rates` (default 200 samples/s each), ddl with `batch` (default fixed batches of 16); the rest the
    schema's defaults. `extra` replaces top-level sections (algorithm, devices, ...)."""
    raw = {"name": name, "seed": 1, "data": dataset or {"dataset": "digits"},
           "devices": {"count": count, "rates": rates or {"distribution": "constant", "rate": 200}},
           "algorithm": {"name": "ddl", "batch": batch or {"policy": "fixed", "size": 16}}}
    raw.update(extra)
    return validate_dict(raw)


# ---------------------------------------------------------------------------------------------- ports


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (edgestream.kafka's, which the brokers use)."""
    from edgestream.kafka import free_port as _free_port

    return _free_port()
