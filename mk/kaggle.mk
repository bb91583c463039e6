# Kaggle and Colab targets. Included from the Makefile, which defines $(PY) and `setup`.
# Nothing here talks to Kaggle except kaggle-push, which needs credentials and says so without them.
KAGGLE_PYTHON ?= 3.11

.PHONY: kaggle-metadata kaggle-bundle kaggle-push kaggle-dataset kaggle-wheelhouse-check

kaggle-metadata: setup  ## rewrite kaggle-metadata/<slug>/kernel-metadata.json (after editing nbutils/settings.py)
	$(PY) -m nbutils.kaggle metadata

kaggle-bundle: setup  ## build/kaggle/<slug>/: kernel-metadata.json + the .ipynb without outputs, for `kaggle kernels push -p`
	$(PY) -m nbutils.kaggle bundle

kaggle-push: setup  ## bundle, then push 01 -> 02 -> 03 -> 04, waiting for each run (KAGGLE_PUSH_WAIT=0 to not wait)
	$(PY) -m nbutils.kaggle push

kaggle-dataset: setup  ## build/kaggle-dataset/: nbutils wheel + offline wheelhouse for Kaggle's Python (no torch)
	KAGGLE_PYTHON=$(KAGGLE_PYTHON) $(PY) -m nbutils.kaggle dataset

# Proof that the dataset alone is enough: a fresh venv with only torch (as on Kaggle), no network,
# runs the notebooks' bootstrap cell and imports everything. Slow (a few minutes): not part of `make test`.
kaggle-wheelhouse-check: kaggle-dataset
	$(PY) -m nbutils.kaggle wheelhouse-check
