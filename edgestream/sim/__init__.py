"""edgestream.sim — the virtual-time performer: the unchanged `sync` algorithms' requests performed over
modelled streams, devices and network with SimPy, with real gradients (see engine.py and DESIGN.md).
The run loop, run directory, stop rule, evaluation and comparison are edgestream.runner's; importing
this package registers the engine "sim" there."""

from edgestream.runner.engines import register_engine
from edgestream.sim.costs import ComputeModel, NetworkModel, calibrate
from edgestream.sim.engine import SimConfigError, SimEngine, run_sim

register_engine("sim", run_sim, host="simpy", performs=SimEngine.performs)  # every request kind

__all__ = ["ComputeModel", "NetworkModel", "SimConfigError", "SimEngine", "calibrate", "run_sim"]
