# Two entry points that work on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint clean

setup: $(STAMP)

# torch is pinned to the CPU build that this machine class keeps on disk; a plain `torch`
# requirement would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: setup
	$(VENV)/bin/kernelgate demo examples/softmax

# One pytest worker a core: most tests wait on a candidate's worker process, and the red-team
# calibration is one test an entry so that the workers share it. --durations keeps the slowest
# tests in the CI log, so that a test that grows slow is seen.
test: setup
	$(PY) -m pytest -q -n auto --dist worksteal --durations=25

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
