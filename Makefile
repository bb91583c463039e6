# Two commands do everything on a fresh clone: `make papermill-check` and `make test`.
# Both bootstrap .venv through `setup`, which re-runs only when the requirement files change.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# pytest keeps its rewritten test modules, and Python its compiled modules, as bytecode in __pycache__; an
# environment that turns bytecode off makes every pytest process compile them again (about 3 s each).
unexport PYTHONDONTWRITEBYTECODE
# The chain's notebooks, in order, from their one source (nbutils/chain.py: stdlib only, no venv needed).
NOTEBOOKS := $(shell $(PYTHON) -m nbutils.chain)
# papermill-check runs the chain in the project venv, then in each Kaggle image twin (kaggle-image/*.txt).
# TWINS=0 skips the twins for a quick local loop; CI runs them.
TWINS ?= 1
TWIN_STAGE := $(if $(filter 0,$(TWINS)),,kaggle-twin-dataset kaggle-twins)

.PHONY: setup test test-fast papermill-check lint sync bench gpu-proof clean map

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -r requirements.txt -r requirements-dev.txt
	@# pip compiles the bytecode in one process (half of the install's minute); compileall uses every core. Its exit
	@# status is ignored as pip ignores it: a few packages ship files that are not Python 3 (their tests' fixtures).
	$(PY) -m compileall -q -j 0 $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') >/dev/null || true
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

setup: $(STAMP)

# glibc returns every freed block over its mmap threshold (at most 32 MB by default) to the system, so each of the
# large vocabularies' logits tensors (hundreds of MB, allocated again every step) is page-faulted in anew: a third of
# a family twin's 05 run was kernel time. Kept in the heap instead, the tests and the chain run about 10% faster
# (make test: 911 -> 839 s on this 2-core machine). Performance only; the notebooks run the same code.
test test-fast papermill-check: export MALLOC_MMAP_THRESHOLD_ = 4294967296
test test-fast papermill-check: export MALLOC_TRIM_THRESHOLD_ = 17179869184

# The full gate (the README's test command): unit and integration tests, in TEST_WORKERS processes. Each test file
# stays in one process (--dist loadfile): a file's module fixtures (the fault-injection reference run, the family
# matrix) are built once, in the order tests/conftest.py gives (the family matrix first; xdist's reordering by test
# count would start it late). pytest exits 5 when it collects nothing, which make counts as a failure like any other.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Unit tests alone (no notebook execution, no multi-process runs, no fault injection, no twins): the quick loop,
# spread over FAST_WORKERS processes (pytest-xdist; the session fixtures' caches are built under a file lock).
FAST_WORKERS ?= 2
test-fast: setup
	$(PY) -m pytest -q -m "not integration" -n $(FAST_WORKERS)

papermill-check: setup $(TWIN_STAGE)
	$(PY) -m nbutils.harness check $(if $(TWIN_STAGE),--twin all)

# ruff, the line budget (tools/line_budget.py), the notebooks named alike everywhere with no relative link in a
# notebook (tools/notebook_names.py) and pylint's duplicate-code finder (settings: pyproject.toml; it
# parses every file, so in TEST_WORKERS processes: the similarities are gathered from all of them, as in one).
# The notebooks stay out of the duplicate finder: the only code they repeat is the bootstrap cell, on purpose.
lint: setup
	$(PY) -m ruff check nbutils tests bench tools $(addsuffix .py,$(NOTEBOOKS))
	$(PY) tools/line_budget.py nbutils bench tests tools
	$(PY) tools/notebook_names.py
	$(PY) -m pylint -j $(TEST_WORKERS) nbutils bench tests tools

sync: setup
	$(PY) -m jupytext --to ipynb $(addsuffix .py,$(NOTEBOOKS))

map: setup  ## the package map: subpackages, their modules, one line each
	$(PY) -m nbutils

bench: setup
	$(PY) -m bench

# The GPU path in one command, on real-shaped models under a T4's conditions (docs/planning.md). A bench, never a
# test: without CUDA it says what it needs and exits 0.
gpu-proof: setup
	$(PY) -m bench.gpu_proof

clean:
	rm -rf runs build

# --- Kaggle and Colab: kaggle-metadata, kaggle-bundle, kaggle-push, kaggle-dataset, kaggle-wheelhouse-check
include mk/kaggle.mk
