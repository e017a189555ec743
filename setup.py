"""Only the optional C extension lives here; everything else is in pyproject.toml.

Both extensions are optional: without a C compiler the install still succeeds and the Python paths,
which give the same values, run instead.

* edgestream.data._wirefast turns a batch of uint8 wire samples into normalised float32 in one pass
  (the consumer's hot loop; edgestream.data.wire's numpy path otherwise);
* edgestream.sim._shuffle computes numpy's PCG64 permutations of many epoch keys in one call (the
  simulator's small-shard epoch orders; edgestream.sim.orders.permutation otherwise).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("edgestream.data._wirefast", ["edgestream/data/_wirefast.c"], optional=True,
                             # no fused multiply-add (GCC contracts by default on e.g. aarch64): the
                             # values stay bit-identical to the numpy path's on every platform
                             extra_compile_args=["-O3", "-ffp-contract=off"]),
                   Extension("edgestream.sim._shuffle", ["edgestream/sim/_shuffle.c"], optional=True,
                             extra_compile_args=["-O3"])])
