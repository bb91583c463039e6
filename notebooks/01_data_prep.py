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
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/qlora-t4/notebook-suite/blob/v0.1.0/notebooks/01_data_prep.ipynb) [![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/qlora-t4/notebook-suite/blob/v0.1.0/notebooks/01_data_prep.ipynb)
#
# First notebook of the QLoRA suite (01 data prep → 02 train → 03 eval → 04 export, and 05 preference
# tuning after 02). It reads raw
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

# %% cellView="form" jupyter={"source_hidden": true} _kg_hide-input=true
# @title Install nbutils (this notebook's version: dataset wheel, else GitHub), then what the image lacks; never torch
import glob, importlib.util, os, subprocess, sys

if sys.version_info < (3, 11):  # the pinned packages need it
    raise RuntimeError(f"this kernel runs Python {sys.version_info[0]}.{sys.version_info[1]}; the notebooks need 3.11+: on Kaggle, Settings > Environment > Always use latest environment, then run this cell again")
if importlib.util.find_spec("nbutils") is None:  # locally `make setup` installed it
    root = os.environ.get("NBUTILS_INPUT_ROOT", "/kaggle/input")
    wheels = sorted(w for d in ("*", "*/*", "*/*/*") for w in glob.glob(f"{root}/{d}/nbutils-*.whl"))
    own = [w for w in wheels if os.path.basename(w).startswith("nbutils-0.1.0-")]
    # This notebook's nbutils from the dataset, else from GitHub, else (internet off) the dataset's other version
    for spec in [*own[-1:], "nbutils @ git+https://github.com/qlora-t4/notebook-suite@v0.1.0", *[w for w in wheels[-1:] if not own]]:
        wheel = ["--no-index", "-f", os.path.dirname(spec)] if spec.endswith(".whl") else []  # packaging sits beside it
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *wheel, spec, "packaging"],
                             capture_output=True, text=True)
        if pip.returncode == 0:
            break
    else:  # pip's own output does not reach every notebook UI: it goes into the error
        hint = "" if wheels or "resolve host" not in pip.stderr else "no internet and no qlora-nbutils dataset: Add Input > Datasets > qlora-nbutils, or Settings > Internet on (a phone-verified Kaggle account), then run this cell again. "
        raise RuntimeError(f"{hint}pip could not install nbutils ({spec}):\n{pip.stdout[-3000:]}{pip.stderr[-3000:]}")
from nbutils.runtime.install import ensure_packages
ensure_packages()  # installs only what is missing or too old, pinned; never torch

# %% [markdown]
# ## Parameters
# One cell, tagged `parameters`, so papermill (and Kaggle's batch run) can override any knob.
# `smoke=True` caps the work so a real model can go through the whole chain in minutes. A parameter the suite
# can choose says `"auto"`, here and in every notebook; its comment says what auto picks.
# `columns` maps chat roles to your data's columns: `"user=COL,assistant=COL"`, optionally `,system=COL`
# (explained here, not in the cell: papermill reads an `=` in a parameter's comment as a second assignment).

# %% tags=["parameters"]
base_model = "embedded"  # the model to fine-tune, named here once: hub id, local folder or Kaggle input; "embedded": the offline tiny model
raw_data = "embedded"  # comma-separated: JSONL/JSON/CSV/TSV/Parquet/HTML/SQL files, saved HF folders, hub ids owner/name[:config][@split]
output_dir = "auto"  # auto: <working dir>/data_prep (found there by 02 and 03)
seed = 0
smoke = False  # True: at most 200 records, shared by the inputs
format = "auto"  # auto sniffs each input and says what it chose; or jsonl, json, csv, tsv, parquet, html, sql, ...
columns = "auto"  # auto: detected (prompt/response, question/answer, ...); else roles to columns (see above)
max_seq_len = "auto"  # auto: covers 99% of records, capped by the model's positions and a T4's memory
eval_fraction = 0.1  # share held out for 02's eval loss and 03's scores: above 0, below 1
train_on_prompt = False  # False: completion-only labels (the prompt is masked out of the loss)
strict = False  # True: stop at the first bad record instead of quarantining it
truncate = False  # True: cut records longer than max_seq_len instead of keeping them out
batch_size = 16  # the per-device batch size 02 trains at (its "auto"); the batching plan and max_seq_len's cap are measured for it

# %% [markdown]
# ## Preflight
# One table of where we run and with what, and a clear error now for anything that would
# otherwise fail hours later.

# %%
from nbutils.runtime.preflight import preflight

env = preflight(load_in_4bit=False, gpu=False)  # 01 tokenizes on the CPU

# %% [markdown]
# ## Read, validate and tokenize
# Every record read is kept, or quarantined with its file, line and reason, or counted as a
# duplicate or as too long; the counts add up. Each record becomes chat messages and is rendered
# with the tokenizer's chat template (for base models without one, a plain `### User:` /
# `### Assistant:` template, set on the tokenizer so 02, 03 and the checkpoint use it too). Every
# answer is labelled through the token its turn ends with (`<|eot_id|>`, `<|im_end|>`,
# `<end_of_turn>`, or EOS), so the model learns to stop; the pad token is never EOS and never a new
# token. A template that marks no assistant turn, or a tokenizer whose ids run past the model's
# embedding, is refused here, naming the problem. A system message is merged into the first user turn
# where the template refuses it; where it refuses a conversation without a question (Gemma, Mistral), a plain
# `text` record trains as its text and EOS, and where it refuses answers before the first question, a greeting
# there is dropped (both counted in `role_fixes`). Labels cover the answers only (completion-only) unless
# `train_on_prompt=True`. `max_seq_len="auto"`
# covers 99% of the records, capped by the longest sequence a T4 (14.7 GB, as torch reports it) trains at
# `batch_size` with the loss 02 takes there (the chunked loss where the whole logits would not fit), and says how
# many it leaves out. The manifest records `base_model`: 02, 03 and 04 take it from there.

# %%
from nbutils import defaults, embedded
from nbutils.data import chatformat, splits
from nbutils.runtime import environment, modelsource
from nbutils.train import loss as lm_loss
from nbutils.train import memory

tokenizer = chatformat.load_tokenizer(base_model)  # a model that cannot be reached says here what to attach
config = modelsource.load_config(base_model)
chatformat.check_model(tokenizer, config)  # a template without an assistant marker, ids past the embedding: named now
# the loss 02 takes where the whole logits would not fit (plain for a model the chunks cannot serve, Gemma-2), so
# 02's plan fits at any length up to this cap
longest = memory.longest_sequence(config, batch_size, defaults.T4_MEMORY_GB, loss=lm_loss.without_whole_logits(config))
out = environment.stage_dir("data_prep", output_dir)
inputs = [embedded.resolve_raw_data(p.strip()) for p in raw_data.split(",")]
manifest = splits.prepare(inputs, out, tokenizer, base_model=base_model, max_seq_len=max_seq_len, seq_len_cap=longest,
                          eval_fraction=eval_fraction, seed=seed, max_records=200 if smoke else None,
                          train_on_prompt=train_on_prompt, fmt=format, strict=strict, truncate=truncate,
                          batch_size=batch_size, columns=splits.parse_columns(columns))

# %% [markdown]
# ## What was kept, and why the rest was not
# `quarantine.jsonl` in the output folder lists every record kept out, with its reason.

# %%
import pandas as pd
from IPython.display import display

counts = pd.Series({**manifest["counts"], **{f"split {k}": v for k, v in manifest["splits"].items()}}, name="records")
reasons = pd.Series(manifest["quarantine_reasons"], name="records kept out", dtype=int)
quarantined = pd.read_json(out / "quarantine.jsonl", lines=True) if manifest["quarantine_reasons"] else None
display(counts.to_frame())
if quarantined is None:
    print("no record kept out")
else:
    display(reasons.to_frame(), quarantined.head(10))  # the first ten, with file, line and reason

# %% [markdown]
# ## What the model will see
# A few training examples exactly as tokenized, special tokens included; [bracketed] text is
# masked out of the loss (label -100), the rest is what the model learns to write. Check that
# each answer ends with its end-of-turn token outside the brackets.

# %%
train = splits.load_split(out, "train")
for row in train.select(range(min(3, len(train)))):
    print(splits.render_masked(row, tokenizer), end="\n---\n")

# %% [markdown]
# ## Lengths and batching
# The histogram (also saved as `lengths.png`) shows where `max_seq_len` cuts. The batching plan
# compares how many of the tokens fed to the GPU are real, not padding, at `batch_size`: random
# batches, length-grouped batches (sorted within large random chunks, what the Trainer's
# `group_by_length` does) and packing several examples per row with a block-diagonal mask so
# they cannot see each other. Packing is chosen only when it clearly wins on long-tailed data;
# 02 batches the way the plan says.

# %%
from IPython.display import Image

display(Image(str(out / "lengths.png")))
batching_plan = manifest["batching"]
print(f"token lengths {manifest['token_lengths']}; chosen: {batching_plan['strategy']} (batch size {batching_plan['batch_size']})")
pd.Series(batching_plan["real_token_share"], name="real-token share").to_frame()
