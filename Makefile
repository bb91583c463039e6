# Two commands do everything on a fresh clone: `make papermill-check` and `make test`.
# Both bootstrap .venv through `setup`, which re-runs only when the requirement files change.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NOTEBOOKS := notebooks/01_data_prep notebooks/02_train_qlora notebooks/03_eval

.PHONY: setup test papermill-check lint sync bench clean

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

papermill-check: setup
	$(PY) -m nbutils.harness check

lint: setup
	$(PY) -m ruff check nbutils tests bench $(addsuffix .py,$(NOTEBOOKS))

sync: setup
	$(PY) -m jupytext --to ipynb $(addsuffix .py,$(NOTEBOOKS))

bench: setup
	$(PY) -m bench

clean:
	rm -rf runs build

# --- Kaggle and Colab -------------------------------------------------------------------------
.PHONY: kaggle-bundle kaggle-push kaggle-dataset kaggle-wheelhouse-check

kaggle-bundle: setup  ## build/kaggle/<slug>/: kernel-metadata.json + .ipynb, ready for `kaggle kernels push -p`
	$(PY) -m nbutils.kaggle bundle

kaggle-push: setup  ## push the bundles in chain order (needs Kaggle credentials; says what is missing)
	$(PY) -m nbutils.kaggle push

kaggle-dataset: setup  ## build/kaggle-dataset/: nbutils wheel + wheelhouse for internet-off runs
	$(PY) -m nbutils.kaggle dataset

# Proves the wheelhouse is complete: a clean venv with only torch (as on Kaggle) installs every pinned
# package from it with --no-index and nothing else.
kaggle-wheelhouse-check: kaggle-dataset
	rm -rf build/wheelhouse-venv
	$(PYTHON) -m venv build/wheelhouse-venv
	build/wheelhouse-venv/bin/pip install -q torch==2.13.0
	build/wheelhouse-venv/bin/pip install -q --no-index --find-links build/kaggle-dataset/wheels \
		$$($(PY) -c "from nbutils.install import PINS; print(' '.join(f'{k}=={v}' for k, v in PINS.items()))") \
		build/kaggle-dataset/nbutils-*.whl
	build/wheelhouse-venv/bin/python -c "import transformers, peft, bitsandbytes, accelerate, datasets, nbutils.install; print('wheelhouse OK')"
