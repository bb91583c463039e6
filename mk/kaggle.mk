# Kaggle and Colab targets. Included from the Makefile, which defines $(PY) and `setup`.
# Nothing here talks to Kaggle except kaggle-push, which needs credentials and says so without them.
# The wheelhouse's Python: this machine's (TWIN_PYTHON, nbutils.kaggle.dataset's too), which the twins and
# kaggle-wheelhouse-check install from build/kaggle-dataset/. Kaggle's image runs the Python in
# kaggle-image/freezes/kaggle.txt's header (3.12): KAGGLE_PYTHON=3.12 builds the upload, in build/kaggle-dataset-py3.12/.
TWIN_PYTHON := 3.11
KAGGLE_PYTHON ?= $(TWIN_PYTHON)

.PHONY: kaggle-metadata kaggle-bundle kaggle-push kaggle-dataset kaggle-twin-dataset kaggle-wheelhouse-check kaggle-twins kaggle-image-refresh

kaggle-metadata: setup  ## rewrite kaggle-metadata/<slug>/kernel-metadata.json (after editing nbutils/runtime/settings.py)
	$(PY) -m nbutils.kaggle metadata

kaggle-bundle: setup  ## build/kaggle/<slug>/: kernel-metadata.json + the .ipynb without outputs, for `kaggle kernels push -p`
	$(PY) -m nbutils.kaggle bundle

kaggle-push: setup  ## bundle, then push 01 -> 02 -> 03 -> 04 -> 05, waiting for each run (KAGGLE_PUSH_WAIT=0 to not wait)
	$(PY) -m nbutils.kaggle push

kaggle-dataset: setup  ## build/kaggle-dataset[-py<ver>]/: nbutils wheel + offline wheelhouse for $(KAGGLE_PYTHON) (no torch); seconds when only nbutils changed
	KAGGLE_PYTHON=$(KAGGLE_PYTHON) $(PY) -m nbutils.kaggle dataset

# The dataset the twins attach (build/kaggle-dataset/, for TWIN_PYTHON), whatever KAGGLE_PYTHON says.
kaggle-twin-dataset: setup
	KAGGLE_PYTHON=$(TWIN_PYTHON) $(PY) -m nbutils.kaggle dataset

# Proof that the dataset alone is enough: the notebooks' bootstrap cell, no network, in a fresh venv with only
# torch and in a pristine copy of each Kaggle image twin; then everything imports. Slow (minutes): not in `make test`.
kaggle-wheelhouse-check: kaggle-twin-dataset $(if $(filter 0,$(TWINS)),,kaggle-twins)
	TWINS=$(TWINS) $(PY) -m nbutils.kaggle wheelhouse-check

kaggle-twins: setup  ## one venv per kaggle-image/*.txt snapshot (cached by its hash), registered as kernel kaggle-<name>
	$(PY) -m nbutils.harness.twin build

# A snapshot from a real Kaggle session: run `!pip freeze > /kaggle/working/pip-freeze.txt` there, download it, then
#   make kaggle-image-refresh FREEZE=pip-freeze.txt NAME=numpy2-2026
kaggle-image-refresh: setup
	@test -n "$(FREEZE)" -a -n "$(NAME)" || { echo "usage: make kaggle-image-refresh FREEZE=pip-freeze.txt NAME=<snapshot>"; exit 2; }
	$(PY) -m nbutils.harness.twin refresh $(FREEZE) $(NAME)
