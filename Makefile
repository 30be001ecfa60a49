# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: demo test test-quick test-long bench bench-quick bench-loaded clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e ".[test,integrations,ray]"
	touch $(STAMP)

# the demo needs the package alone (no test or integration frameworks): a lighter install
DEMO_STAMP := $(VENV)/.installed-demo

$(DEMO_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(PY) -m resumable_data.demo

# the whole suite, long variants included at 5x the CI-sized runs (RD_RELIABILITY_SCALE; pytest
# run by hand defaults to 10x); --durations names the long poles in every log
RD_RELIABILITY_SCALE ?= 5
test: $(STAMP)
	RD_RELIABILITY_SCALE=$(RD_RELIABILITY_SCALE) $(PY) -m pytest -q -n 2 --durations=15

# while developing: without the long variants (about 2 minutes)
test-quick: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not slow"

# the long variants at 20x (interrupt points, epochs, SIGKILLs, state-machine examples): a nightly job
test-long: $(STAMP)
	RD_RELIABILITY_SCALE=20 $(PY) -m pytest -q -n 2 --durations=25

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) pyproject.toml constraints.txt
	$(PIP) install -q -c constraints.txt -e ".[test,integrations,bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.run
	$(PY) -m benchmarks.readme

bench-quick: $(BENCH_STAMP)
	$(PY) -m benchmarks.run --quick

bench-loaded: $(BENCH_STAMP)
	$(PY) -m benchmarks.run --load 2
	$(PY) -m benchmarks.readme

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
