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

# %%
# Bootstrap nbutils (attached Kaggle dataset's wheel, else GitHub; locally `make setup` did it), then the rest.
import glob, importlib.util, os, subprocess, sys  # noqa: E401, I001

if importlib.util.find_spec("nbutils") is None:
    root = os.environ.get("NBUTILS_INPUT_ROOT", "/kaggle/input")
    wheels = sorted(w for d in ("*", "*/*", "*/*/*") for w in glob.glob(f"{root}/{d}/nbutils-*.whl"))
    args = ["--no-index", wheels[-1]] if wheels else ["nbutils @ git+https://github.com/qlora-t4/notebook-suite@main"]
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *args], capture_output=True, text=True)
    print(pip.stdout + pip.stderr)  # printed: a subprocess' own output does not reach every notebook UI
    pip.check_returncode()
from nbutils.platform.install import ensure_packages  # noqa: E402

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
from nbutils.platform.preflight import check_disk, preflight

env = preflight(precision=precision, load_in_4bit=load_in_4bit, multi_gpu=multi_gpu, num_processes=num_processes,
                base_model=base_model, attn_implementation=attn_implementation)

# %% [markdown]
# ## Check the configuration before loading anything
# Strategy mismatches, a paged optimizer with resume, a batch larger than the data, bf16 on a
# T4 ... each is a clear message now instead of a crash at hour three. The memory plan says
# whether this batch size fits the GPU, the largest batch and the longest sequence that do, and so
# how to use several GPUs: data parallel (DDP) when one GPU holds the model, split across them when
# only all do. The loss never builds the full logits (batch x seq x vocab: 6 GB for Llama-3 at 2 x 2048);
# it is computed in chunks from the last hidden states (`chunked_loss`), and the plan counts one chunk.
# The disk check reads the filesystem of `output_dir` against the checkpoints the run will keep.

# %%
import json

from nbutils import defaults
from nbutils.data import splits
from nbutils.eval import evaluation
from nbutils.platform import environment
from nbutils.train import launch, loss, memory, modeling, trainconfig

data_dir = environment.find_upstream("data_prep", data_dir)
out = environment.stage_dir("train_qlora", output_dir)
manifest = splits.load_manifest(data_dir)
train_ds, eval_ds = splits.load_split(data_dir, "train"), splits.load_split(data_dir, "eval")
model_config = modeling.load_config(base_model)
loss_kind = loss.choose(chunked_loss, cuda=env.gpu_count > 0, model_config=model_config)  # no CUDA call here
plan = memory.plan(model_config, manifest["token_lengths"]["max"], per_device_batch_size, lora_r, env.gpu_memory_gb,
                   env.gpu_count, loss=loss_kind)
run = launch.decide(multi_gpu, num_processes, env.gpu_count, plan)
lr, lr_why = defaults.learning_rate(learning_rate, model_config)
cfg = trainconfig.TrainConfig(
    max_steps=10 if smoke else max_steps, num_epochs=num_epochs, learning_rate=lr, lora_r=lora_r,
    lora_dropout=lora_dropout, use_rslora=use_rslora, per_device_batch_size=per_device_batch_size,
    grad_accum=grad_accum, eval_steps=5 if smoke else eval_steps, save_steps=5 if smoke else save_steps,
    save_total_limit=save_total_limit,
    precision=env.precision, max_seq_len=manifest["max_seq_len"], time_budget_min=time_budget_min,
    resume=resume, seed=seed, world_size=run.world_size, chunked_loss=chunked_loss)
trainconfig.validate(cfg, n_train=len(train_ds), gpu_capability=env.gpu_capability,
                     model_max_positions=model_config.max_position_embeddings, data_max_seq_len=manifest["max_seq_len"])
print(memory.table(plan))
print(f"mode: {run.mode}, {run.why}; effective batch {cfg.effective_batch}")
print(f"learning rate {lr:g} ({lr_why})")
check_disk(out, plan["checkpoint_mb"], cfg.save_total_limit)  # the output_dir's disk, before any hour is spent

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
# The next three cells define the steps each process runs; the cell after them runs them.

# %% [markdown]
# ## Load the model
# The model loads in 4-bit (nf4, double quantization) with the compute dtype of the precision
# rule, on this process's own GPU. LoRA goes on every linear layer (alpha = r); its weights stay
# fp32 so the fp16 gradient scaler works on a T4. Gradient checkpointing uses `use_reentrant=False`.

# %%
def load_model():
    tokenizer = modeling.load_tokenizer(base_model)
    model = modeling.load_base(base_model, env.precision, load_in_4bit, env.attention,
                               device_map="split" if run.mode == "split" else None)
    model = modeling.attach_lora(model, r=lora_r, dropout=lora_dropout, use_rslora=use_rslora, seed=seed)
    print(modeling.trainable_summary(model))
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
    prompts, refs = evaluation.prompts_and_references(eval_ds, tokenizer, probe_prompts)
    probe = evaluation.probe(tokenizer, prompts, defaults.max_new_tokens("auto", tokenizer, refs)[0]) \
        if probe_prompts else None
    result = training.train(model, tokenizer, train_ds, eval_ds, cfg, out, plan=manifest["batching"],
                            run_config=run_config, probe=probe, progress=training.progress_mode(progress),
                            memory_estimate_gb=plan["estimate_gb"])
    if result.is_main and result.peak_memory_gb is not None:  # on a GPU: the measured peak beside the plan
        print(memory.table({**plan, "measured_peak_gb": result.peak_memory_gb}))
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
    training.write_summary(out, result, cfg, ckpt, plan)
    assert ckpt is not None, f"no usable checkpoint: {result.stop_detail}"
    check = training.checkpoints.verify(ckpt, base_model, load_in_4bit, env.precision)
    print("checkpoint", ckpt, "verified" if check["ok"] else f"DAMAGED {check['problems']}", check)
    assert check["ok"], f"checkpoint failed verification: {check['problems']}"


# %% [markdown]
# ## Run: here, or once per GPU
# With one process the steps run in this kernel (and `model` stays here to play with); with
# several, each process runs them on its own GPU and the first one writes the files.

# %%
def train_on_this_process():
    model, tokenizer = load_model()
    result, run_config = train_model(model, tokenizer)
    if result.is_main:
        save_and_verify(model, tokenizer, result, run_config)
    return model, tokenizer


trained = launch.run_in_processes(train_on_this_process, run.processes)
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
