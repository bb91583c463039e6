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
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/qlora-t4/notebook-suite/blob/main/notebooks/02_train_qlora.ipynb) [![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/qlora-t4/notebook-suite/blob/main/notebooks/02_train_qlora.ipynb)
#
# Second notebook of the suite. QLoRA keeps the base model frozen in 4-bit (nf4) and trains
# low-rank adapters (LoRA) on top, so a 7B model fits a 16 GB T4. This notebook reads the data
# written by 01, trains, and saves a checkpoint that 03 (and you) can load: adapter, tokenizer
# and the run configuration.

# %% [markdown]
# ## Install
# On Kaggle and Colab this installs only what the image lacks, pinned, and never reinstalls
# torch. Locally (`make setup`) everything is already there and it does nothing.

# %% cellView="form" jupyter={"source_hidden": true} _kg_hide-input=true
# @title Install nbutils (the attached Kaggle dataset's wheel, else GitHub), then only what this image lacks; never torch
import glob, importlib.util, os, subprocess, sys

if importlib.util.find_spec("nbutils") is None:  # locally `make setup` installed it
    root = os.environ.get("NBUTILS_INPUT_ROOT", "/kaggle/input")
    wheels = sorted(w for d in ("*", "*/*", "*/*/*") for w in glob.glob(f"{root}/{d}/nbutils-*.whl"))
    wheel = ["--no-index", "-f", os.path.dirname(wheels[-1]), wheels[-1]] if wheels else []  # packaging sits beside it
    args = wheel or ["nbutils @ git+https://github.com/qlora-t4/notebook-suite@main"]
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *args, "packaging"], capture_output=True, text=True)
    if pip.returncode:  # pip's own output does not reach every notebook UI: it goes into the error
        raise RuntimeError(f"pip could not install nbutils ({args[-1]}):\n{pip.stdout[-3000:]}{pip.stderr[-3000:]}")
from nbutils.runtime.install import ensure_packages
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
attn_implementation = "auto"  # auto: sdpa where the model class supports it, else eager (Gemma-2); FA2 from cc 8.0 if installed
max_steps = 80  # -1 trains num_epochs instead
num_epochs = 1.0
learning_rate = "auto"  # auto: 2e-4 for real 0.5B-8B models, 3e-3 for toy ones like the embedded default
lora_r = 16  # LoRA rank; alpha is set equal to r
lora_dropout = 0.0
use_rslora = False
per_device_batch_size = 16
grad_accum = 1
chunked_loss = "auto"  # loss without the full logits: liger's fused kernels on a GPU if installed, else chunked; False: plain
eval_steps = 20
save_steps = 20  # a multiple of eval_steps, so every checkpoint has an eval loss
save_total_limit = 2  # Trainer checkpoints kept: the newest that verify, by step; lower it on a small disk
time_budget_min = 690.0  # Kaggle stops a session at 12 hours; stop and save 30 minutes before
resume = True  # continue from the latest complete checkpoint in output_dir or an attached earlier output
progress = "auto"  # auto: plain log lines in a batch run, widgets plus the lines interactively; or widgets/log
multi_gpu = "auto"  # auto: DDP over 2+ GPUs when one holds the model, else split; or ddp / split / single
num_processes = 0  # processes this notebook starts for DDP: 0 means one per GPU; 2 on the CPU runs gloo (as tests do)
probe_prompts = 4  # at each evaluation, generate on this many eval prompts; stop if most degenerate twice in a row

# %% [markdown]
# ## Preflight

# %%
from nbutils.runtime.preflight import check_disk, preflight

env = preflight(precision=precision, load_in_4bit=load_in_4bit, multi_gpu=multi_gpu, num_processes=num_processes,
                base_model=base_model, attn_implementation=attn_implementation)

# %% [markdown]
# ## The data from 01
# The prepared splits and their manifest: token lengths, `max_seq_len` and the batching plan 01 measured.

# %%
from nbutils.data import splits
from nbutils.runtime import environment

data_dir = environment.find_upstream("data_prep", data_dir)
out = environment.stage_dir("train_qlora", output_dir)
manifest = splits.load_manifest(data_dir)
train_ds, eval_ds = splits.load_split(data_dir, "train"), splits.load_split(data_dir, "eval")
print(f"{len(train_ds)} train / {len(eval_ds)} eval examples from {data_dir}; checkpoints go to {out}")

# %% [markdown]
# ## The loss, without the full logits
# Next-token cross-entropy never builds the full logits here (batch x seq x vocab: 6 GB for Llama-3 at
# 2 x 2048): it is computed in chunks from the last hidden states (`chunked_loss`), or by liger's fused
# kernels on a GPU where they are installed. Chosen from the model's config alone, with no CUDA call
# (see "More than one GPU"); each training process confirms the choice on its own device.

# %%
from nbutils.train import loss, memory, modeling

model_config = modeling.load_config(base_model)
loss_kind = loss.choose(chunked_loss, cuda=env.gpu_count > 0, model_config=model_config)
print(f"loss: {loss_kind} (chunked_loss={chunked_loss!r})")

# %% [markdown]
# ## Memory plan: will it fit?
# Read from the model's config alone, before any weight loads: whether this batch size fits the GPU,
# and the largest batch and longest sequence that do. With a chunked loss the plan counts one chunk.

# %%
memory_plan = memory.plan(model_config, manifest["token_lengths"]["max"], per_device_batch_size, lora_r,
                          env.gpu_memory_gb, env.gpu_count, loss=loss_kind)
print(memory.table(memory_plan))

# %% [markdown]
# ## One GPU or several
# Data parallel (DDP) when one GPU holds the model, split across them when only all do (see "More than
# one GPU" below).

# %%
from nbutils.train import launch

launch_plan = launch.decide(multi_gpu, num_processes, env.gpu_count, memory_plan=memory_plan)
print(f"mode: {launch_plan.mode}, {launch_plan.why}")

# %% [markdown]
# ## Learning rate
# `learning_rate="auto"` picks by model size: 2e-4 for real models, higher for toys like the embedded one.

# %%
from nbutils import defaults

lr, lr_why = defaults.learning_rate(learning_rate, model_config)
print(f"learning rate {lr:g} ({lr_why})")

# %% [markdown]
# ## Training configuration
# The choices, each with its reason:
# - optimizer: AdamW (`adamw_torch`), on the LoRA weights only: they are a few MB, so its two states cost
#   nothing, and unlike the paged 8-bit optimizers its state resumes exactly from a checkpoint;
# - loss: next-token cross-entropy on the answer tokens only (01's completion-only labels), averaged over
#   target tokens across gradient accumulation, so a batch of short answers weighs what it should;
# - `smoke=True` trains 10 steps, evaluating and saving every 5: the whole chain in a minute.
#
# The LoRA settings are not here: the `LoraConfig` in "The QLoRA recipe" below is their one source.

# %%
from nbutils.train import trainconfig

cfg = trainconfig.TrainConfig(
    max_steps=10 if smoke else max_steps, num_epochs=num_epochs, learning_rate=lr, optim="adamw_torch",
    per_device_batch_size=per_device_batch_size, grad_accum=grad_accum, world_size=launch_plan.world_size,
    eval_steps=5 if smoke else eval_steps, save_steps=5 if smoke else save_steps, save_total_limit=save_total_limit,
    precision=env.precision, max_seq_len=manifest["max_seq_len"], chunked_loss=chunked_loss,
    time_budget_min=time_budget_min, resume=resume, seed=seed)
print(f"effective batch {cfg.effective_batch} (per-device {cfg.per_device_batch_size} x grad_accum {cfg.grad_accum} x "
      f"{cfg.world_size} process(es)); {f'{cfg.max_steps} steps' if cfg.max_steps > 0 else f'{cfg.num_epochs:g} epoch(s)'}")

# %% [markdown]
# ## Checked before loading anything
# Strategy mismatches, a paged optimizer with resume, a batch larger than the data, bf16 on a T4 ...
# each is a clear message now instead of a crash at hour three.

# %%
trainconfig.validate(cfg, n_train=len(train_ds), gpu_capability=env.gpu_capability,
                     model_max_positions=model_config.max_position_embeddings, data_max_seq_len=manifest["max_seq_len"])
print("configuration checked: no problem found")

# %% [markdown]
# ## Disk
# The filesystem of `output_dir` against the checkpoints the run will keep, before any hour is spent.

# %%
checkpoint_need_mb = check_disk(out, memory_plan["checkpoint_mb"], cfg.save_total_limit)

# %% [markdown]
# ## More than one GPU
# Kaggle's 2xT4 and rented multi-GPU machines train data-parallel: one process per GPU, each
# holding its own 4-bit copy; only the LoRA gradients are synchronised, the effective batch is
# per-device batch x grad_accum x processes, and only the first process writes files and prints
# the log. From this notebook, accelerate's notebook launcher starts the processes by forking this
# kernel, so no cell above may touch the GPU: preflight reads it through `nvidia-smi`, and the
# Trainer (which imports bitsandbytes) is imported only inside the functions below. From a shell,
# run the notebook's `.py` as a script with the same parameter names:
#
#     accelerate launch --multi_gpu --num_processes 2 -m nbutils.train.launch notebooks/02_train_qlora.py --max_steps 200
#     torchrun --nproc_per_node 2 -m nbutils.train.launch notebooks/02_train_qlora.py --config run.yaml
#
# A model too large for one T4: `multi_gpu="split"` (or `auto`, when the plan says so) spreads
# its layers over all GPUs in one process: it fits, but is no faster (the GPUs take turns).
#
# The next four cells define the steps each process runs; the cell after them runs them.

# %% [markdown]
# ## The QLoRA recipe
# The base model stays frozen in 4-bit; only small low-rank adapters (LoRA) on its linear layers train.
# Both configurations are here to change. They are built inside a function, run by each training
# process, because peft imports bitsandbytes, which touches the GPU (see "More than one GPU").

# %%
def qlora_configs():
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    bnb_config = BitsAndBytesConfig(
        load_in_4bit=True,  # frozen base weights in 4 bits: a 7B model takes ~4 GB of GPU memory instead of 14
        bnb_4bit_quant_type="nf4",  # NormalFloat4: 16 levels placed where normally distributed weights fall
        bnb_4bit_use_double_quant=True,  # quantize the per-block scales too: ~0.4 bit per weight saved
        bnb_4bit_compute_dtype=modeling.DTYPES[env.precision],  # matmuls run in this: fp16 on a T4, bf16 from cc 8.0
    ) if load_in_4bit else None
    lora_config = LoraConfig(
        r=lora_r,  # rank of each adapter: capacity vs size (8-64 is usual)
        lora_alpha=lora_r,  # the adapter's output is scaled by alpha / r: 1 here, the usual QLoRA choice
        target_modules="all-linear",  # every linear layer of every block: better than attention alone
        lora_dropout=lora_dropout,  # 0 for short runs; 0.05-0.1 against overfitting a small dataset
        use_rslora=use_rslora,  # scale by alpha / sqrt(r) instead: high ranks (64+) keep learning as fast
        task_type="CAUSAL_LM",
    )
    return bnb_config, lora_config


# %% [markdown]
# ## Load the model
# `AutoModelForCausalLM`: the base model with its next-token head, what writing answers needs; it
# loads with the 4-bit config on this process's own GPU, then gets the adapters. LoRA
# weights stay fp32 so the fp16 gradient scaler works on a T4; gradient checkpointing uses
# `use_reentrant=False` (the reentrant variant drops gradients when the frozen inputs need none).

# %%
def load_model():
    bnb_config, lora_config = qlora_configs()
    tokenizer = modeling.load_tokenizer(base_model)
    model = modeling.load_base(base_model, env.precision, bnb_config or False, env.attention,
                               device_map="split" if launch_plan.mode == "split" else None)
    model = modeling.attach_lora(model, config=lora_config, seed=seed)
    print(modeling.trainable_line(model))
    return model, tokenizer


# %% [markdown]
# ## Train
# Batches follow the plan 01 measured (length-grouped, or packed with a per-example mask). A
# complete checkpoint is saved every `save_steps`; the run stops and saves before the time
# budget runs out, stops on a NaN loss keeping the last good checkpoint, and resumes from the
# latest complete checkpoint when there is one. At each evaluation a few probe prompts are
# generated under the degeneration guard; if most are garbage twice in a row, training stops
# (`stopped_reason="degenerate"`) and the checkpoint is kept. Every stop is agreed by all processes.

# %%
def train_model(model, tokenizer):
    from nbutils.train import training  # here, not above: the Trainer imports bitsandbytes (see "More than one GPU")

    run_config = training.run_config(cfg, env.versions, manifest, base_model=base_model, load_in_4bit=load_in_4bit, smoke=smoke)
    from nbutils.eval import evaluation

    prompts, refs = evaluation.prompts_and_references(eval_ds, tokenizer, probe_prompts)
    probe = evaluation.probe(tokenizer, prompts, defaults.max_new_tokens("auto", tokenizer, refs)[0]) \
        if probe_prompts else None
    result = training.train(model, tokenizer, train_ds, eval_ds, cfg, out, plan=manifest["batching"],
                            run_config=run_config, probe=probe, progress=training.progress_mode(progress),
                            memory_estimate_gb=memory_plan["estimate_gb"])
    if result.is_main and result.peak_memory_gb is not None:  # on a GPU: the measured peak beside the plan
        print(memory.table({**memory_plan, "measured_peak_gb": result.peak_memory_gb}))
    return result, run_config


# %% [markdown]
# ## Save, then verify the checkpoint
# Adapter, tokenizer and run configuration together, written atomically (a temp folder, fsync,
# then a rename; a manifest of every file's size and SHA-256, then a `COMPLETE` marker, are written
# last); then the checkpoint is checked file by file against its manifest and reloaded to generate
# a few tokens, so a broken save shows now. After a NaN stop the
# last good checkpoint becomes the final one. `training_summary.json` says why training stopped
# and where the checkpoint is (relative, so it still works where 03 mounts this folder).

# %%
def save_and_verify(model, tokenizer, result, run_config):
    from nbutils.train import training

    ckpt = training.save_checkpoint(model, tokenizer, out, run_config, result)
    assert ckpt is not None, f"no usable checkpoint: {result.stop_detail}"
    check = training.checkpoints.verify(ckpt, base_model, load_in_4bit, env.precision)
    assert check["ok"], f"checkpoint {ckpt} failed verification: {check['problems']}"
    training.write_summary(out, result, cfg, ckpt, memory_plan)  # the stage's marker, last: 03 starts from a verified run
    print(f"[checkpoint] {ckpt}: verified (every file against its manifest; reloaded, it generates {check['generated']!r})")


# %% [markdown]
# ## Run: here, or once per GPU
# With one process the steps run in this kernel (and `model` stays here to play with); with
# several, each process runs them on its own GPU and the first one writes the files.

# %%
import json


def train_on_this_process():
    model, tokenizer = load_model()
    result, run_config = train_model(model, tokenizer)
    if result.is_main:
        save_and_verify(model, tokenizer, result, run_config)
    return model, tokenizer


trained = launch.run_in_processes(train_on_this_process, launch_plan.processes)
if trained is not None:
    model, tokenizer = trained
summary = json.loads((out / "training_summary.json").read_text())  # written by the first process
print(f"step {summary['global_step']} ({summary['stopped_reason']}) on {summary['world_size']} process(es): "
      f"train loss {summary['train_loss']:.4f}, eval loss {summary['eval_loss']:.4f}")

# %% [markdown]
# ## Learning curves

# %%
from IPython.display import Image, display

display(Image(str(out / "learning_curves.png")))
print(summary["diagnosis"])
