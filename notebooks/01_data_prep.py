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
raw_data = "embedded"  # JSONL file(s) of instruction/input/output records, comma-separated
output_dir = ""  # empty: <working dir>/data_prep (found there by 02 and 03)
seed = 0
smoke = False
max_seq_len = 256
eval_fraction = 0.1

# %% [markdown]
# ## Preflight
# One table of where we run and with what, and a clear error now for anything that would
# otherwise fail hours later.

# %%
from nbutils.preflight import preflight

env = preflight(load_in_4bit=False)

# %% [markdown]
# ## Prepare the data
# The tokenizer's chat template decides how a conversation looks to the model; the EOS token
# ends every answer so the fine-tuned model learns to stop. Padding uses a different token,
# otherwise EOS would be masked out of the loss and the model would never stop generating.

# %%
from nbutils import data, embedded, environment, modeling

tokenizer = modeling.load_tokenizer(base_model)
out = environment.stage_dir("data_prep", output_dir)
inputs = [embedded.resolve_raw_data(p.strip()) for p in raw_data.split(",")]
manifest = data.prepare(inputs, out, tokenizer, max_seq_len=max_seq_len, eval_fraction=eval_fraction,
                        seed=seed, max_records=200 if smoke else None)
print(f"wrote {out}")
manifest["counts"], manifest["splits"], manifest["token_lengths"]

# %% [markdown]
# ## What the model will see
# One training example exactly as tokenized; the part the loss ignores (the prompt) is shown
# in brackets.

# %%
row = data.load_split(out, "train")[0]
shown = [tokenizer.decode([t]) if lab != data.IGNORE_INDEX else f"[{tokenizer.decode([t])}]"
         for t, lab in zip(row["input_ids"], row["labels"])]
print("".join(shown))
