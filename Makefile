# edgestream — the two commands a new user runs: `make demo` and `make test`.
# Everything the project needs is installed from here: a venv with the Python packages (PyPI)
# and the Apache Kafka broker jars (Maven Central, resolved once into ~/.cache/edgestream).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP   = $(VENV)/.installed-$(TORCH)
PYTEST_ARGS ?=
# one locked set of versions (Python 3.11 and 3.12, every platform): the venvs, the images and CI install from it;
# tests/unit/test_lock.py fails when they drift. `make lock` regenerates it (LOCK_ARGS=--upgrade to move every pin).
LOCK   := requirements.lock
LOCK_ARGS ?=

.PHONY: demo test test-py312 test-testbed test-images bench bench-flower reproduce lint install jars lock clean help

help:
	@echo "make demo   run the main job (managed Kafka broker + streaming + training demo)"
	@echo "make test   run the whole test suite against a real local Kafka broker"
	@echo "make test-testbed  the compose testbed on a real Docker Engine (installs it where missing; root)"
	@echo "make test-images   the CPU, CUDA and Jetson images built and run (stand-in bases; long from nothing)"
	@echo "make bench  run the benchmarks (figures go to docs/BENCHMARKS.md by hand)"
	@echo "make bench-flower  the simulator beside Flower's simulation (Flower in its own venv, .venv-flower)"
	@echo "make reproduce  the papers' claims, quick runs (REPRODUCE_ARGS= for the full ones) -> reproduce/"
	@echo "make lint   ruff"
	@echo "make lock   regenerate requirements.lock from pyproject.toml (uv pip compile --universal)"

# uv (PyPI, pinned by the lock) installs the packages: with its cache warm a fresh venv takes seconds, not minutes.
# uv reads UV_* settings, not pip's: an index set for pip (PIP_INDEX_URL) is passed on.
# --compile-bytecode, as pip does: without it the suite's first parallel processes each compile torch's modules.
LOCK_INDEX := $(if $(PIP_INDEX_URL),--index-url $(PIP_INDEX_URL))
# TORCH=host: the venv uses the torch that $(PYTHON) already has (a GPU host's own CUDA build, a Jetson's JetPack
# wheel), linked in by scripts/host_torch.py with what it needs; the rest of the lock at its versions. Made with
# PYTHON=the interpreter that has that torch. The venv keeps the TORCH it was made with; naming the other one makes
# it again (docs/runtime.md, "Your own torch").
TORCH  ?= $(or $(shell cat $(VENV)/.torch 2>/dev/null),lock)
$(if $(filter-out lock host,$(TORCH)),$(error TORCH=$(TORCH): must be lock (the lock's torch, default) or host (PYTHON's own torch)))
$(STAMP): pyproject.toml $(LOCK) setup.py edgestream/data/_wirefast.c edgestream/sim/_shuffle.c $(if $(filter host,$(TORCH)),scripts/host_torch.py)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "edgestream needs Python 3.11+ (set PYTHON=...)")'
ifeq ($(TORCH),host)
	@$(PYTHON) -c 'import importlib.util as u, sys; sys.exit(0 if u.find_spec("torch") else "TORCH=host: PYTHON=$(PYTHON) has no torch; name the interpreter that has yours, or leave TORCH unset for the lock torch")'
endif
	@was=$$(cat $(VENV)/.torch 2>/dev/null || echo lock); if [ -x $(PY) ] && [ "$$was" != "$(TORCH)" ]; then \
		echo "TORCH=$(TORCH): making $(VENV) again (it was made with TORCH=$$was)"; rm -rf $(VENV); fi
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo $(TORCH) > $(VENV)/.torch
	$(PY) -m pip install -q -c $(LOCK) uv
ifeq ($(TORCH),host)
	$(PY) scripts/host_torch.py --host $(PYTHON) --venv $(VENV) --lock $(LOCK)
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) $(LOCK_INDEX) --no-deps -c $(LOCK) -r $(VENV)/host-torch-reqs.txt -e .
	$(PY) -m pip check
	@$(PY) -c 'import torch; print(f"TORCH=host: torch {torch.__version__} (CUDA {torch.version.cuda}) from {torch.__file__}; GPUs seen: {torch.cuda.device_count()}")'
else
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) $(LOCK_INDEX) -c $(LOCK) -b $(LOCK) -e ".[dev]"
endif
	@touch $(STAMP)

install: $(STAMP)

# regenerate the lock: the pins already in it are kept where pyproject.toml still allows them
lock:
	@test -x $(VENV)/bin/uv || { test -x $(PY) || $(PYTHON) -m venv $(VENV); $(PY) -m pip install -q -c $(LOCK) uv; }
	$(VENV)/bin/uv pip compile -q pyproject.toml --extra dev --universal --python-version 3.11 $(LOCK_INDEX) \
		--custom-compile-command "make lock" -o $(LOCK) $(LOCK_ARGS)
	@# every pin has a wheel for the venvs and images: x86_64 3.11 and 3.12, the Jetson image's arm64 3.12
	@for t in x86_64/3.11 x86_64/3.12 aarch64/3.12; do \
		$(VENV)/bin/uv pip compile -q pyproject.toml --extra dev -c $(LOCK) --only-binary :all: $(LOCK_INDEX) \
			--python-platform $${t%/*}-manylinux_2_28 --python-version $${t#*/} >/dev/null \
			|| { echo "$(LOCK): no wheel of some pin for $$t (above)"; exit 1; }; done

jars: $(STAMP)
	@command -v java >/dev/null || { echo "java not found: install a JDK 17+ (needed by the Kafka broker)"; exit 1; }
	$(VENV)/bin/edgestream broker fetch >/dev/null

demo: jars
	$(VENV)/bin/edgestream demo

# The suite (tests/unit, tests/kafka, tests/system: README.md, "Tests") runs on TEST_WORKERS pytest-xdist workers
# (4 on this 2-core box: many tests mostly wait on brokers and processes): one managed broker serves them all
# (tests/conftest.py) and the files that mostly wait (broker outages, cut-off leaders) start first. conftest marks the tests that should not meet with xdist_group (the
# session's 3-node cluster, the network-namespace hosts, a file's module fixture): loadgroup keeps each group on one
# worker (xdist 3.8 writes the group where pytest < 9 reads an item's id; conftest writes it where pytest 9 does).
# 4 workers: 11 min 12 s here (docs/BENCHMARKS.md, issue 34 item 4), once the producer stopped spinning a core and
# the tests that failed on overloaded cores checked what they mean (the lag bound against what the producer wrote,
# not its rate; a dry run's groups without the hold groups Kafka may clean up). TEST_WORKERS=0 runs it in this
# process, in file order.
TEST_WORKERS ?= 4
test: jars
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# Python 3.12 (the Jetson image's Python): a second venv runs the tests that cover every package under
# 3.12 -- config, wire, serde, sync, simulator, collectives, PS wire, decode, CLI, backend agreement,
# TensorBoard, real trainers on the broker, and the local runtime's fork server. CI runs it after `make test`.
PYTHON312 ?= $(shell command -v python3.12 >/dev/null 2>&1 && python3.12 -c 'import sys' 2>/dev/null && command -v python3.12 || ls -d $$HOME/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)
VENV312   := .venv312
STAMP312  := $(VENV312)/.installed
PY312_TESTS ?= tests/unit/test_config.py tests/unit/test_data_wire.py tests/unit/test_data_serde.py \
	tests/unit/test_sync_exchange.py tests/unit/test_sim_engine.py tests/unit/test_sim_batched.py \
	tests/unit/test_collectives.py tests/unit/test_ps_wire.py tests/kafka/test_consumer_device_decode.py \
	tests/unit/test_cli.py tests/system/test_backend.py tests/system/test_tensorboard.py \
	tests/system/test_trainer.py::test_ddl_two_ranks_learn_with_identical_replicas tests/unit/test_lock.py \
	tests/unit/test_forkserver.py

$(STAMP312): pyproject.toml $(LOCK) setup.py edgestream/data/_wirefast.c edgestream/sim/_shuffle.c
	@test -n "$(PYTHON312)" || { echo "python3.12 not found: install it or set PYTHON312=/path/to/python3.12"; exit 1; }
	@test -x $(VENV312)/bin/python || $(PYTHON312) -m venv $(VENV312)
	$(VENV312)/bin/python -m pip install -q -c $(LOCK) uv
	$(VENV312)/bin/uv pip install -q --compile-bytecode --python $(VENV312)/bin/python $(LOCK_INDEX) -c $(LOCK) -b $(LOCK) -e ".[dev]"
	@touch $(STAMP312)

test-py312: jars $(STAMP312)
	$(VENV312)/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version'
	$(VENV312)/bin/pytest -p no:cacheprovider $(PY312_TESTS)

# The compose testbed on a real Docker Engine (tests/testbed/; `make test` does not collect it: pyproject's
# norecursedirs). scripts/testbed/engine.sh installs and starts Docker Engine (Debian's docker.io) and the Compose v2
# plugin (go install) where missing (root); the tests build the CPU image (on a stand-in base of Debian packages
# where no registry answers: scripts/testbed/bases.sh, kafka-image.sh; Docker's layer cache keeps them for the next
# run) and bring the testbed up through testcontainers. At the end, also on failure, the daemon engine.sh started is
# stopped (TESTBED_KEEP_ENGINE=1 keeps it). CI runs it. `make test-images`: the CPU, CUDA and Jetson images built
# and run (about 25 minutes from nothing on 2 cores, the Jetson image through qemu-user >= 10; not in CI).
# TESTBED_ARGS: more pytest arguments (e.g. -k cpu_profile).
TESTBED_ARGS ?=
TESTBED_KEEP_ENGINE ?=
# $(call on_engine,TEST_FILE): the engine up, the tests, then the daemon engine.sh started stopped, whatever failed
on_engine = scripts/testbed/engine.sh && $(VENV)/bin/pytest -p no:cacheprovider -s -v $(1) $(TESTBED_ARGS); rc=$$?; \
	[ -n "$(TESTBED_KEEP_ENGINE)" ] || scripts/testbed/engine.sh stop; exit $$rc
test-testbed: jars
	$(call on_engine,tests/testbed/test_compose_up.py)

test-images: jars
	$(call on_engine,tests/testbed/test_images.py)

bench: jars
	$(PY) benchmarks/run_all.py

# The simulator beside Flower's simulation engine (benchmarks/bench_vs_flower.py). Flower is not a dependency of
# edgestream: it lives in its own venv, .venv-flower, made from benchmarks/flower-requirements.txt (flwr[simulation]
# pinned, torch and numpy at the lock's versions) with uv from the lock. BENCH_FLOWER_ARGS: the script's arguments.
FLOWER_VENV := .venv-flower
FLOWER_REQ  := benchmarks/flower-requirements.txt
BENCH_FLOWER_ARGS ?=
$(FLOWER_VENV)/.installed: $(FLOWER_REQ) $(LOCK)
	@test -x $(FLOWER_VENV)/bin/python || $(PYTHON) -m venv $(FLOWER_VENV)
	$(FLOWER_VENV)/bin/python -m pip install -q -c $(LOCK) uv
	$(FLOWER_VENV)/bin/uv pip install -q --compile-bytecode --python $(FLOWER_VENV)/bin/python $(LOCK_INDEX) -r $(FLOWER_REQ)
	@touch $@

bench-flower: $(STAMP) $(FLOWER_VENV)/.installed
	$(PY) benchmarks/bench_vs_flower.py --flower-python $(FLOWER_VENV)/bin/python $(BENCH_FLOWER_ARGS)

REPRODUCE_ARGS ?= --quick
reproduce: $(STAMP)
	$(VENV)/bin/edgestream reproduce $(REPRODUCE_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check edgestream tests benchmarks

clean:
	rm -rf $(VENV) $(VENV312) $(FLOWER_VENV) runs .pytest_cache build
	rm -f edgestream/data/_wirefast*.so edgestream/sim/_shuffle*.so
