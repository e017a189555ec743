"""Only the optional C extension lives here; everything else is in pyproject.toml.

edgestream.data._wirefast turns a batch of uint8 wire samples into normalised float32 in one pass
(the consumer's hot loop). It is optional: without a C compiler the install still succeeds and
edgestream.data.wire uses its numpy path, which gives the same values.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("edgestream.data._wirefast", ["edgestream/data/_wirefast.c"], optional=True,
                             # no fused multiply-add (GCC contracts by default on e.g. aarch64): the
                             # values stay bit-identical to the numpy path's on every platform
                             extra_compile_args=["-O3", "-ffp-contract=off"])])
