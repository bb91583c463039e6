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
# # 02 · Train QLoRA: a 4-bit base model plus a small trainable adapter
#
# Second notebook of the suite. QLoRA keeps the base model frozen in 4-bit (nf4) and trains
# low-rank adapters (LoRA) on top, so a 7B model fits a 16 GB T4. This notebook reads the data
# written by 01, trains, and saves a checkpoint that 03 (and you) can load: adapter, tokenizer
# and the run configuration.

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
base_model = "embedded"  # hub id or local path; "embedded" means the offline tiny model
data_dir = ""  # output of 01; empty: found in the working dir or among Kaggle inputs
output_dir = ""  # empty: <working dir>/train_qlora
seed = 0
smoke = False
precision = "auto"  # auto: bf16 from compute capability 8.0 up, fp16 on a T4, fp32 on CPU
load_in_4bit = True
max_steps = 150
num_epochs = 1.0
learning_rate = 3e-3
lora_r = 16
per_device_batch_size = 16
grad_accum = 1

# %% [markdown]
# ## Preflight

# %%
from nbutils.preflight import preflight

env = preflight(precision=precision, load_in_4bit=load_in_4bit)

# %% [markdown]
# ## Load the data and the model
# The model loads in 4-bit with the compute dtype of the precision rule. LoRA goes on every
# linear layer (alpha = r); its weights stay fp32 so the fp16 gradient scaler works on a T4.

# %%
from nbutils import data, environment, modeling, training

data_dir = environment.find_upstream("data_prep", data_dir)
out = environment.stage_dir("train_qlora", output_dir)
train_ds, eval_ds = data.load_split(data_dir, "train"), data.load_split(data_dir, "eval")
tokenizer = modeling.load_tokenizer(base_model)
model = modeling.load_base(base_model, env["precision"], load_in_4bit, env["attention"])
model = modeling.attach_lora(model, r=lora_r, seed=seed)
modeling.trainable_summary(model)

# %% [markdown]
# ## Train

# %%
cfg = training.TrainConfig(max_steps=10 if smoke else max_steps, num_epochs=num_epochs, learning_rate=learning_rate,
                           per_device_batch_size=per_device_batch_size, grad_accum=grad_accum, lora_r=lora_r,
                           precision=env["precision"], seed=seed)
result = training.train(model, tokenizer, train_ds, eval_ds, cfg, out, plan=data.load_manifest(data_dir)["batching"])
print(f"step {result['global_step']}: train loss {result['train_loss']:.3f}, eval loss {result['eval_loss']:.3f}")

# %% [markdown]
# ## Save a complete checkpoint
# Adapter, tokenizer and the run configuration (parameters, package versions, data hash)
# together: a checkpoint without its tokenizer cannot be used.

# %%
run_config = {"parameters": {"base_model": base_model, "seed": seed, "smoke": smoke, "lora_r": lora_r,
                             "learning_rate": learning_rate, "max_steps": cfg.max_steps},
              "versions": {k: v for k, v in env.items() if k.startswith("version.")},
              "data_manifest_hash": data.load_manifest(data_dir)["content_hash"]}
ckpt = training.save_checkpoint(model, tokenizer, out, run_config)
training.write_summary(out, result, cfg, ckpt)
