# Two commands do everything on a fresh clone: `make papermill-check` and `make test`.
# Both bootstrap .venv through `setup`, which re-runs only when the requirement files change.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NOTEBOOKS := notebooks/01_data_prep notebooks/02_train_qlora notebooks/03_eval notebooks/04_export
# papermill-check runs the chain in the project venv, then in each Kaggle image twin (kaggle-image/*.txt).
# TWINS=0 skips the twins for a quick local loop; CI runs them.
TWINS ?= 1
TWIN_STAGE := $(if $(filter 0,$(TWINS)),,kaggle-dataset kaggle-twins)

.PHONY: setup test test-fast papermill-check lint sync bench clean map

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

setup: $(STAMP)

test: setup
	$(PY) -m pytest -q

papermill-check: setup $(TWIN_STAGE)
	$(PY) -m nbutils.harness check $(if $(TWIN_STAGE),--twin all)

lint: setup
	$(PY) -m ruff check nbutils tests bench $(addsuffix .py,$(NOTEBOOKS))

sync: setup
	$(PY) -m jupytext --to ipynb $(addsuffix .py,$(NOTEBOOKS))

map: setup  ## the package map: subpackages, their modules, one line each
	$(PY) -m nbutils

bench: setup
	$(PY) -m bench

clean:
	rm -rf runs build

# --- Kaggle and Colab: kaggle-metadata, kaggle-bundle, kaggle-push, kaggle-dataset, kaggle-wheelhouse-check
include mk/kaggle.mk
