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
# # 03 · Eval: base model vs fine-tuned, side by side
#
# Third notebook of the suite. It generates answers to the held-out eval prompts with the base
# model and with the base model plus the adapter from 02, scores both with the task metric
# (exact match) and the eval loss, and writes `eval_report.json`.

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

# %% tags=["parameters"]
base_model = "embedded"  # must be the base model the adapter was trained on
data_dir = ""  # output of 01; empty: found in the working dir or among Kaggle inputs
adapter_dir = ""  # output of 02; empty: found the same way
output_dir = ""  # empty: <working dir>/eval
seed = 0
smoke = False
precision = "auto"
load_in_4bit = True
max_new_tokens = 32
n_samples = 64  # prompts to generate on; the eval loss always uses the whole eval split

# %% [markdown]
# ## Preflight

# %%
from nbutils.preflight import preflight

env = preflight(precision=precision, load_in_4bit=load_in_4bit)

# %% [markdown]
# ## Base model first
# The same prompts and the same greedy decoding for both models, so the difference is the adapter.

# %%
import json
from pathlib import Path

from nbutils import data, environment, evaluation, modeling

data_dir = environment.find_upstream("data_prep", data_dir)
adapter_dir = environment.find_upstream("train_qlora", adapter_dir)
out = environment.stage_dir("eval", output_dir)
eval_ds = data.load_split(data_dir, "eval")
tokenizer = modeling.load_tokenizer(base_model)
prompts, refs = evaluation.prompts_and_references(eval_ds, tokenizer, limit=8 if smoke else n_samples)
model = modeling.load_base(base_model, env["precision"], load_in_4bit, env["attention"])
model.eval()
base_out = evaluation.generate(model, tokenizer, prompts, max_new_tokens)
base = {"task_metric": evaluation.exact_match([o["text"] for o in base_out], refs),
        "eval_loss": evaluation.eval_loss(model, eval_ds, tokenizer.pad_token_id)}
base

# %% [markdown]
# ## Then with the adapter

# %%
from peft import PeftModel

summary = json.loads((Path(adapter_dir) / "training_summary.json").read_text())
ckpt = Path(adapter_dir) / summary["checkpoint_dir"]  # relative, so it works where the folder is mounted
assert summary["checkpoint_complete"], f"{ckpt} is not a complete checkpoint: re-run 02 (it resumes)"
model = PeftModel.from_pretrained(model, ckpt)
model.eval()
tuned_out = evaluation.generate(model, tokenizer, prompts, max_new_tokens)
tuned = {"task_metric": evaluation.exact_match([o["text"] for o in tuned_out], refs),
         "eval_loss": evaluation.eval_loss(model, eval_ds, tokenizer.pad_token_id)}
tuned

# %% [markdown]
# ## Report

# %%
report = {"n_samples": len(prompts), "base": base, "tuned": tuned,
          "samples": [{"prompt": p, "reference": r, "base": b["text"], "tuned": t["text"]}
                      for p, r, b, t in zip(prompts, refs, base_out, tuned_out)][:20]}
evaluation.write_report(out, report)
for p, r, b, t in list(zip(prompts, refs, base_out, tuned_out))[:5]:
    print(f"{p.splitlines()[0][:60]!r}\n  reference {r!r} | base {b['text'][:40]!r} | tuned {t['text']!r}")
