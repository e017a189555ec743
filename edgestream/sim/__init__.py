"""edgestream.sim — the virtual-time simulator: the unchanged `sync` algorithms driven by SimPy processes
over modelled streams, devices and network, with real gradients (see engine.py and DESIGN.md)."""

from edgestream.sim.compare import Variant, compare_algorithms, parse_variants, run_compare
from edgestream.sim.engine import SimConfigError, SimEngine
from edgestream.sim.models import ComputeModel, NetworkModel, calibrate
from edgestream.sim.run import run_sim

__all__ = ["ComputeModel", "NetworkModel", "SimConfigError", "SimEngine", "Variant", "calibrate",
           "compare_algorithms", "parse_variants", "run_compare", "run_sim"]
