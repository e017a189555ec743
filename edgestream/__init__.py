"""edgestream: train models on data streaming from heterogeneous edge devices through Kafka.

The Python API (docs/python-api.md; edgestream.api):

    import edgestream
    cfg = edgestream.load_config("exp.yaml", overrides=["devices.count=8"])   # or a dict
    result = edgestream.run(cfg, engine="sim", progress=False)               # RunResult
    result.summary, result.records.steps, result.records.evals, result.run_dir
    edgestream.compare(cfg, algorithms=["ddl", "scadles"]).rows
    with edgestream.DeviceProducer(bootstrap, run, device=3, rate=50) as dev:  # a device's samples (no torch)
        dev.send(x, y)                                                          # docs/wire-format.md
    with edgestream.ModelSubscriber(bootstrap, run) as sub:   # the run's model versions (no torch)
        sub.wait_for(newer_than=0); sub.predict(x)             # docs/model-format.md

Errors raise (ConfigError, EngineError, RunFailed, PluginError); nothing here exits the interpreter.
Importing the package is light: the names below load on first use (torch only when a run needs it).
"""

from __future__ import annotations

import importlib
from typing import Any

from edgestream.lazy import lazy_exports

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "load_config": "edgestream.api", "run": "edgestream.api", "compare": "edgestream.api",
    "list_plugins": "edgestream.api", "RunResult": "edgestream.api", "CompareResult": "edgestream.api",
    "Records": "edgestream.api", "RunFailed": "edgestream.api",
    "ConfigError": "edgestream.config", "ExperimentConfig": "edgestream.config",
    "EngineError": "edgestream.runner.engines", "EngineUnavailable": "edgestream.runner.engines",
    "PlanError": "edgestream.runner.plan", "PluginError": "edgestream.plugins",
    "DeviceProducer": "edgestream.producers.device", "DeliveryError": "edgestream.producers.device",
    "KafkaUnavailable": "edgestream.kafka.admin",
    "ModelSubscriber": "edgestream.edge.subscriber",
}

__all__ = [*_EXPORTS, "plugins", "__version__"]


_getattr = lazy_exports("edgestream", globals(), _EXPORTS)[0]


def __getattr__(name: str) -> Any:
    if name == "plugins":  # the registries (edgestream.plugins.MODELS, DATASETS, ALGORITHMS, COMPRESSORS)
        return importlib.import_module("edgestream.plugins")
    return _getattr(name)


def __dir__() -> list[str]:
    return sorted(__all__)
