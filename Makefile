# edgestream — the two commands a new user runs: `make demo` and `make test`.
# Everything the project needs is installed from here: a venv with the Python packages (PyPI)
# and the Apache Kafka broker jars (Maven Central, resolved once into ~/.cache/edgestream).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test bench reproduce lint install jars clean help

help:
	@echo "make demo   run the main job (managed Kafka broker + streaming + training demo)"
	@echo "make test   run the whole test suite against a real local Kafka broker"
	@echo "make bench  run the benchmarks (figures go to docs/BENCHMARKS.md by hand)"
	@echo "make reproduce  the papers' claims, quick runs (REPRODUCE_ARGS= for the full ones) -> reproduce/"
	@echo "make lint   ruff"

$(STAMP): pyproject.toml setup.py edgestream/data/_wirefast.c
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "edgestream needs Python 3.11+ (set PYTHON=...)")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

jars: $(STAMP)
	@command -v java >/dev/null || { echo "java not found: install a JDK 17+ (needed by the Kafka broker)"; exit 1; }
	$(VENV)/bin/edgestream broker fetch >/dev/null

demo: jars
	$(VENV)/bin/edgestream demo

test: jars
	$(VENV)/bin/pytest $(PYTEST_ARGS)

bench: jars
	$(PY) benchmarks/run_all.py

REPRODUCE_ARGS ?= --quick
reproduce: $(STAMP)
	$(VENV)/bin/edgestream reproduce $(REPRODUCE_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check edgestream tests benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache build
	rm -f edgestream/data/_wirefast*.so
