# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Data prep: raw records in, chat-formatted training data out
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/qlora-t4/notebook-suite/blob/main/notebooks/01_data_prep.ipynb) [![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/qlora-t4/notebook-suite/blob/main/notebooks/01_data_prep.ipynb)
#
# First notebook of the QLoRA suite (01 data prep → 02 train → 03 eval). It reads raw
# instruction records, renders them with the model's chat template, tokenizes them with
# **completion-only labels** (the model is trained on the answer, not on the question) and
# writes a train/eval split plus a `manifest.json` that the next notebook reads.
#
# Run it as it is: every parameter defaults to the *embedded default*, a tiny model and task
# built offline in seconds, so the whole chain works without a GPU or internet.

# %% [markdown]
# ## Install
# On Kaggle and Colab this installs only what the image lacks, pinned, and never reinstalls
# torch. Locally (`make setup`) everything is already there and it does nothing.

# %%
# Bootstrap nbutils (from the attached Kaggle dataset's wheel, else from GitHub), then the pinned rest.
import glob  # noqa: E401
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("nbutils") is None:
    wheels = sorted(glob.glob(os.environ.get("NBUTILS_INPUT_ROOT", "/kaggle/input") + "/*/nbutils-*.whl"))
    src = [wheels[-1], "--no-index"] if wheels else ["nbutils @ git+https://github.com/qlora-t4/notebook-suite@main"]
    print("installing", src[0])
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *src], check=True)
from nbutils.install import ensure_packages

ensure_packages()  # installs only what is missing or too old, pinned; never torch

# %% [markdown]
# ## Parameters
# One cell, tagged `parameters`, so papermill (and Kaggle's batch run) can override any knob.
# `smoke=True` caps the work so a real model can go through the whole chain in minutes.

# %% tags=["parameters"]
base_model = "embedded"  # hub id or local path; "embedded" means the offline tiny model
raw_data = "embedded"  # input files (JSONL/JSON/CSV/TSV/Parquet/HTML/SQL/HF folder), comma-separated
output_dir = ""  # empty: <working dir>/data_prep (found there by 02 and 03)
seed = 0
smoke = False
format = "auto"  # auto sniffs each input and says what it chose
max_seq_len = 256
eval_fraction = 0.1
train_on_prompt = False  # False: completion-only labels (the prompt is masked out of the loss)
strict = False  # True: stop at the first bad record instead of quarantining it
truncate = False  # True: cut records longer than max_seq_len instead of keeping them out
batch_size = 16  # the per-device batch size 02 will use; the batching plan is measured for it

# %% [markdown]
# ## Preflight
# One table of where we run and with what, and a clear error now for anything that would
# otherwise fail hours later.

# %%
from nbutils.preflight import preflight

env = preflight(load_in_4bit=False)

# %% [markdown]
# ## Read, validate and tokenize
# Every record read is kept, or quarantined with its file, line and reason, or counted as a
# duplicate; the counts add up. The tokenizer's chat template decides what a conversation looks
# like to the model, EOS ends every answer so the model learns to stop, and padding uses a token
# other than EOS so the EOS is never masked out of the loss.

# %%
from nbutils import data, embedded, environment, modeling

tokenizer = modeling.load_tokenizer(base_model)
out = environment.stage_dir("data_prep", output_dir)
inputs = [embedded.resolve_raw_data(p.strip()) for p in raw_data.split(",")]
manifest = data.prepare(inputs, out, tokenizer, max_seq_len=max_seq_len, eval_fraction=eval_fraction, seed=seed,
                        max_records=200 if smoke else None, train_on_prompt=train_on_prompt, fmt=format,
                        strict=strict, truncate=truncate, batch_size=batch_size)

# %% [markdown]
# ## What was kept, and why the rest was not
# `quarantine.jsonl` in the output folder lists every record kept out, with its reason.

# %%
import pandas as pd
from IPython.display import display

counts = pd.Series({**manifest["counts"], **{f"split {k}": v for k, v in manifest["splits"].items()}}, name="records")
reasons = pd.Series(manifest["quarantine_reasons"], name="quarantined", dtype=int)
display(counts.to_frame(), reasons.to_frame() if len(reasons) else "no record quarantined")

# %% [markdown]
# ## What the model will see
# A few training examples exactly as tokenized; [bracketed] text is masked out of the loss.

# %%
train = data.load_split(out, "train")
for row in train.select(range(min(3, len(train)))):
    print(data.render_masked(row, tokenizer), end="\n---\n")

# %% [markdown]
# ## Lengths and batching
# The histogram shows where `max_seq_len` cuts. The batching plan compares how many of the
# tokens fed to the GPU are real (not padding) for random batches, length-grouped batches and
# packing with a per-example mask; 02 uses the chosen plan.

# %%
from IPython.display import Image, display

display(Image(str(out / "lengths.png")))
manifest["token_lengths"], manifest["batching"]
