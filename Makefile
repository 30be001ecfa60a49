# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: demo test test-quick test-long bench bench-quick clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e ".[test,integrations]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m resumable_data.demo

# the whole suite, long variants included (about 4 minutes on 2 cores)
test: $(STAMP)
	$(PY) -m pytest -q -n 2

# while developing: without the long variants (about 2 minutes)
test-quick: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not slow"

test-long: test

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP) pyproject.toml constraints.txt
	$(PIP) install -q -c constraints.txt -e ".[test,integrations,bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.run
	$(PY) -m benchmarks.readme

bench-quick: $(BENCH_STAMP)
	$(PY) -m benchmarks.run --quick

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
