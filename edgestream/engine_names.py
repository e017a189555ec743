"""Every engine's name, in one place, importable without torch (the config schema, the CLI's options and the
engine registry read it).

`ENGINE_MODULES`: engine name -> the module that registers it with the engine registry
(edgestream.runner.engines) when imported. `ENGINES`: the names, in the order help texts list them.

* sim: the simulator (edgestream.sim), virtual time.
* local: a real run on this machine (edgestream.launch: broker, producer and trainer processes), wall time.
* lockstep: the in-process lockstep engine (edgestream.runner.lockstep_run): the workers round robin in one
  process, requests performed at once, no network or stream-rate model; collective algorithms only. For tests
  and quick checks that an algorithm runs.
"""

#: engine name -> the module that registers it when imported
ENGINE_MODULES: dict[str, str] = {"sim": "edgestream.sim", "local": "edgestream.launch",
                                  "lockstep": "edgestream.runner.lockstep_run"}
ENGINES: tuple[str, ...] = tuple(ENGINE_MODULES)
