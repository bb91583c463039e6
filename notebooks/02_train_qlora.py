# ---
# jupyter:
#   accelerator: GPU
#   colab:
#     gpuType: T4
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: accelerator,colab
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Train QLoRA: a 4-bit base model plus a small trainable adapter
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/qlora-t4/notebook-suite/blob/v0.1.0/notebooks/02_train_qlora.ipynb) [![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/qlora-t4/notebook-suite/blob/v0.1.0/notebooks/02_train_qlora.ipynb)
#
# Second notebook of the suite. QLoRA keeps the base model frozen in 4-bit (nf4) and trains
# low-rank adapters (LoRA) on top, so a 7B model fits a 16 GB T4. This notebook reads the data
# 01 wrote (and the model 01 named), trains, and saves a checkpoint that 03 and 04 load: adapter,
# tokenizer and the run configuration.
#
# Top to bottom: the parameters, one plan checked before anything loads, the recipe (4-bit config, LoRA
# config, `Trainer`, `TrainingArguments`, `trainer.train()`), the run and its learning curves.

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
# The model is named once, in 01. A parameter the suite can choose says `"auto"`, in every notebook: its comment
# says what auto picks, and the plan below prints what it picked and why. `smoke=True` trains 10 steps, evaluating
# and saving every 5: the whole chain in a minute.
#
# **How long.** `max_steps="auto"` trains `num_epochs` passes over your data, so a run covers all of it; the plan
# says how many steps one epoch is and, after the first steps, how long that takes. Epochs are the default because
# a fixed step count says nothing about how much of the data a run sees: 80 steps of batch 16 are 13% of 10,000
# records. A number of steps is allowed; the plan warns when it stops before one epoch.
#
# **The loss** (`chunked_loss="auto"`): the plain loss where the whole logits fit the GPU (the fastest; they are
# what overflows a T4 first), else liger-kernel's fused kernels where installed, else the chunked loss (pure torch,
# the same value and gradients, 0.72x the plain loss's tokens/s on an H200). The plan's `loss` row says which and why.

# %% tags=["parameters"]
base_model = "auto"  # auto: the model 01 named (its manifest); another one must share its tokenizer
data_dir = "auto"  # output of 01; auto: found in the working dir or among Kaggle inputs
output_dir = "auto"  # auto: <working dir>/train_qlora
seed = 0
smoke = False
precision = "auto"  # auto: bf16 from compute capability 8.0 up, fp16 on a T4, fp32 on CPU
load_in_4bit = True
attn_implementation = "auto"  # auto: sdpa where the model class supports it, else eager (Gemma-2); FA2 from cc 8.0 if installed
max_steps = "auto"  # auto: num_epochs passes over the data (at least 80 steps for a toy model); or a number of steps
num_epochs = 1.0  # passes over the data when max_steps is auto
learning_rate = "auto"  # auto: 2e-4 for real 0.5B-8B models, 3e-3 for toy ones like the embedded default
lora_r = 16  # LoRA rank; alpha follows it (a scale of 1: see the LoRA config below)
lora_dropout = 0.0
use_rslora = False
per_device_batch_size = "auto"  # auto: the batch size 01 planned for (its manifest); another is allowed, the plan says what it changes
grad_accum = 1
chunked_loss = "auto"  # auto: plain where the whole logits fit the GPU, else liger where it runs, else chunked (see above)
eval_steps = 20
save_steps = 20  # a multiple of eval_steps, so every checkpoint has an eval loss
keep_checkpoints = 2  # Trainer checkpoints kept on disk: the newest that verify; lower it on a small disk
time_budget_min = "auto"  # auto: this platform's session limit less a margin for the save (nbutils/runtime/limits.py)
time_plan = True  # time the first steps, then print the run's expected wall time, sessions and what to change to fit
resume = True  # continue from the latest complete checkpoint in output_dir or an attached earlier output
progress = "auto"  # auto: plain log lines in a batch run, widgets plus the lines interactively; or widgets/log
multi_gpu = "auto"  # auto: DDP over 2+ GPUs when one holds the model, else split; or ddp / split / single
num_processes = "auto"  # processes this notebook starts for DDP: auto is one per GPU; 2 on the CPU runs gloo (as tests do)
probe_prompts = 4  # at each evaluation, generate on this many eval prompts; stop if most degenerate twice in a row

# %% [markdown]
# ## The plan, checked before anything loads
# One table: the GPUs and the precision rule (fp16 on a T4, never its emulated bf16), the model and data from 01,
# the loss and why, the batch size, the memory plan from the config alone, one GPU or several, the learning rate,
# the steps (and one epoch's), the time budget, the disk. A WARNING row says what may not be what you meant (a run
# over part of the data). Every problem is listed at once, not at hour three.

# %%
from nbutils.train import planning

plan = planning.plan_run(
    base_model=base_model, data_dir=data_dir, output_dir=output_dir, smoke=smoke, precision=precision,
    load_in_4bit=load_in_4bit, attn_implementation=attn_implementation, multi_gpu=multi_gpu,
    num_processes=num_processes, per_device_batch_size=per_device_batch_size, grad_accum=grad_accum, lora_r=lora_r,
    chunked_loss=chunked_loss, learning_rate=learning_rate, max_steps=max_steps, num_epochs=num_epochs,
    eval_steps=eval_steps, save_steps=save_steps, keep_checkpoints=keep_checkpoints, time_budget_min=time_budget_min,
    resume=resume, progress=progress)

# %% [markdown]
# ## The QLoRA recipe: a frozen 4-bit base, small trainable adapters
# Both configurations are here to change. The base (`AutoModelForCausalLM`) loads in 4-bit, then gets the
# adapters: LoRA weights stay fp32 so the fp16 gradient scaler works on a T4, and gradient checkpointing uses
# `use_reentrant=False` (the reentrant variant drops gradients of frozen inputs). These cells only define
# functions: each training process runs them itself (see "More than one GPU").

# %%
from nbutils.train import modeling


def load_model():
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    from nbutils.data import chatformat
    from nbutils.train import recipe

    bnb_config = BitsAndBytesConfig(
        load_in_4bit=True,  # frozen base weights in 4 bits: a 7B model takes ~4 GB of GPU memory instead of 14
        bnb_4bit_quant_type="nf4",  # NormalFloat4: 16 levels placed where normally distributed weights fall
        bnb_4bit_use_double_quant=True,  # quantize the per-block scales too: ~0.4 bit per weight saved
        bnb_4bit_compute_dtype=modeling.DTYPES[plan.precision],  # matmuls run in this: fp16 on a T4, bf16 from cc 8.0
    ) if load_in_4bit else None
    lora_config = LoraConfig(
        r=lora_r,  # rank of each adapter: capacity vs size (8-64 is usual)
        lora_alpha=lora_r,  # output scaled by alpha / r: 1 at any rank (the QLoRA paper used r=64, alpha=16: 1/4)
        target_modules="all-linear",  # every linear layer of every block: better than attention alone
        # but none in the image encoder of a multimodal model (Gemma-3 4B+): text never reaches it, so its adapters
        # get no gradient (a DDP run stops at step 2) yet count and get saved; None for a text-only model
        exclude_modules=modeling.text_only_exclude(plan),
        lora_dropout=lora_dropout,  # 0 for short runs; 0.05-0.1 against overfitting a small dataset
        use_rslora=use_rslora,  # scale by alpha / sqrt(r) instead: high ranks (64+) keep learning as fast
        task_type="CAUSAL_LM",
    )
    tokenizer = chatformat.load_tokenizer(plan.base_model)  # the pad token 01 chose, never EOS
    recipe.same_tokenizer(tokenizer, plan.manifest, plan.base_model)  # refused if it changed on the hub since 01
    model = modeling.load_base(plan.base_model, plan.precision, bnb_config, attn_implementation,
                               device_map=plan.device_map, preferred_attention=plan.env.attention)
    model = modeling.attach_lora(model, lora_config, seed=seed)
    print(modeling.trainable_line(model))
    return model, tokenizer


# %% [markdown]
# ## The Trainer
# transformers' `Trainer`: the model, the arguments (next cell), 01's batches (length-grouped, or packed with a
# per-example mask) and the suite's callbacks: checkpoints marked complete once verified, a save before the time
# budget runs out, a stop on NaN keeping the last good checkpoint, one progress line per interval, and a probe
# that stops training when generations turn to garbage twice in a row. The loss is cross-entropy on the answer
# tokens (01's labels); with the chunked loss, a subclass computes it without the full logits (same gradients).

# %%
from nbutils.data import batching
from nbutils.train import loss as lm_loss


def make_trainer(model, tokenizer, run):
    kind = lm_loss.choose(chunked_loss, model=model, plain_fits=plan.loss == "plain")  # the plan's loss, checked on the model
    Trainer = lm_loss.trainer_class(kind)
    return Trainer(
        model=model,
        args=training_arguments(),
        processing_class=tokenizer,  # saved into every checkpoint with its chat template
        train_dataset=batching.rows(plan.train_ds, plan.batching),  # packed into blocks when 01's plan packs
        eval_dataset=batching.rows(plan.eval_ds, plan.batching),
        data_collator=batching.make_collator(plan.batching, tokenizer.pad_token_id, modeling.attention_of(model)),
        callbacks=run.callbacks,  # the suite's: verified checkpoints, time budget, NaN guard, progress line, probe
    )


# %% [markdown]
# ## Training arguments
# Every argument of the HF Trainer's run, with its reason. Built inside each process: `TrainingArguments` sets up
# the device (CUDA) as it is created. The suite rotates checkpoints itself, keeping the newest `keep_checkpoints`
# that verify, so the Trainer's own rotation (`save_total_limit`) stays off.

# %%
def training_arguments():
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(plan.out / "trainer"),  # Trainer checkpoints; the final adapter goes to checkpoint/ beside it
        max_steps=plan.max_steps, num_train_epochs=num_epochs,  # the plan's count: auto is num_epochs passes, in steps
        per_device_train_batch_size=plan.per_device_batch_size,  # 01's unless given; the plan says whether it fits
        per_device_eval_batch_size=plan.per_device_batch_size,
        gradient_accumulation_steps=grad_accum,  # effective batch = per-device batch x accumulation x processes
        learning_rate=plan.learning_rate,  # auto: 2e-4 for real models, higher for toy ones (see the plan)
        lr_scheduler_type="cosine",  # decay to zero over the run: the last steps refine rather than jump
        warmup_steps=5,  # a few small steps first, while Adam's moment estimates are still noise
        optim="adamw_torch",  # on the LoRA weights only (a few MB of state); unlike paged 8-bit optimizers it resumes exactly
        fp16=plan.precision == "fp16",  # the precision rule: fp16 on a T4 (its bf16 is emulated, slow or broken),
        bf16=plan.precision == "bf16",  # bf16 from compute capability 8.0, fp32 on the CPU
        eval_strategy="steps", eval_steps=plan.eval_steps,  # the eval loss, and the degeneration probe, every eval_steps
        eval_on_start=True,  # the loss the model starts from: the curve's diagnosis measures the fall from there
        save_strategy="steps", save_steps=plan.save_steps,  # as evaluation: every checkpoint has an eval loss
        save_total_limit=None,  # rotation is the suite's: it keeps the newest keep_checkpoints that verify
        logging_steps=10,
        seed=seed, data_seed=seed,  # the LoRA initialisation and the shuffling: same seed, same run
        train_sampling_strategy="random" if plan.packed else "group_by_length",  # similar lengths per batch: less padding
        length_column_name="length",  # the token counts 01 stored, so grouping reads no token ids
        remove_unused_columns=False,  # the collator needs the "length" column
        include_num_input_tokens_seen="non_padding",  # tokens/s in the log counts real tokens, not padding
        use_liger_kernel=plan.loss == "liger",  # liger's fused kernels where the plan found them (a GPU with liger-kernel)
        ddp_find_unused_parameters=False,  # under DDP every LoRA weight gets a gradient: skip the search for unused ones
        use_cpu=plan.env.gpu_count == 0,
        disable_tqdm=plan.progress == "log",  # a batch run shows no widget: the suite prints one line per interval
        dataloader_num_workers=0,  # the batches are tokenized already; workers would only fork the kernel
        report_to=[],  # no tracker unless you add one ("wandb", "tensorboard")
    )


# %% [markdown]
# ## Train, save, verify
# The run takes the output folder's lock before the model loads (one run per folder: a second one is refused in
# seconds, naming the holder), checks the disk, and resumes from the newest
# checkpoint that verifies and was trained with the same settings (another run's is refused, naming what
# differs). The first steps are timed on this hardware and batch plan (about 5% of the steps, never redone: the
# run saves there and resumes at once); then one table says how long the whole run takes, whether the time
# budget stops it, how many sessions and how much of the weekly GPU quota it needs, and what to change to fit
# ([docs/planning.md](https://github.com/qlora-t4/notebook-suite/blob/main/docs/planning.md)). Then `trainer.train()` does the rest. The final checkpoint (adapter, tokenizer, `run_config.json`: the base model,
# this 4-bit config, this LoRA config and the training arguments, which 03 and 04 load exactly) is written
# atomically, then checked file by file and reloaded to generate a few tokens. `training_summary.json`, written
# last, says why training stopped and where the checkpoint is.

# %%
from nbutils.train import argcheck, checkpoints, planning


def train_on_this_process():
    from nbutils.eval import evaluation
    from nbutils.train import training

    args = training_arguments()  # checked before the model loads: a mistake costs seconds, not hours
    argcheck.validate(argcheck.of_arguments(args), n_train=plan.n_train_rows,  # rows as batched: packed blocks
                      gpu_capability=plan.env.gpu_capability, resume=resume)
    training.lock(plan.out, args.process_index == 0)  # one run per output folder, before anything loads
    model, tokenizer = load_model()
    run = training.Run(plan.out, plan.record(smoke=smoke, time_budget_min=plan.time_budget_min),
                       time_budget_min=time_budget_min, keep_checkpoints=keep_checkpoints, resume=resume,
                       probe=evaluation.training_probe(plan.eval_ds, tokenizer, probe_prompts), progress=plan.progress,
                       memory_estimate_gb=plan.memory["allocated_gb"], time_plan=time_plan)
    trainer = make_trainer(model, tokenizer, run)
    with run.session(trainer) as resume_from:
        if not run.finished:  # a rerun of a finished run has nothing left to train
            trainer.train(resume_from_checkpoint=resume_from)
    if run.is_main:
        ckpt = run.save_final(model, tokenizer)
        assert ckpt is not None, f"no usable checkpoint: {run.result.stop_detail}"
        check = checkpoints.verify(ckpt, plan.precision)
        assert check["ok"], f"checkpoint {ckpt} failed verification: {check['problems']}"
        run.write_summary(ckpt, plan.memory)  # the stage's marker, last: 03 starts from a verified run
        print(f"[checkpoint] {ckpt}: verified (every file against its checksums; reloaded, it generates "
              f"{check['generated']!r})")
    return model, tokenizer


# %% [markdown]
# ## More than one GPU
# Kaggle's 2xT4 and rented multi-GPU machines train data-parallel: one process per GPU, each holding its own
# 4-bit copy; only the LoRA gradients are synchronised, the effective batch is per-device batch x accumulation x
# processes, and only the first process writes files and prints the log. From this notebook, accelerate's
# notebook launcher starts the processes by forking this kernel, so no cell above touches the GPU: the plan reads
# the GPUs through `nvidia-smi`, and peft, bitsandbytes and the Trainer are imported inside the functions. From a
# shell, run the notebook's `.py` as a script with the same parameter names:
#
#     accelerate launch --multi_gpu --num_processes 2 -m nbutils.train.launch notebooks/02_train_qlora.py --max_steps 200
#     torchrun --nproc_per_node 2 -m nbutils.train.launch notebooks/02_train_qlora.py --config run.yaml
#
# A model too large for one T4: `multi_gpu="split"` (or `auto`, when the plan says so) spreads its layers over
# all GPUs in one process: it fits, but is no faster (the GPUs take turns). With one process the run happens in
# this kernel, and `model` stays here to play with.

# %%
import json

from nbutils.train import launch

model = tokenizer = trained = None  # a rerun (train longer, Run All) frees the last run's model first: two do not fit a T4
modeling.free_memory()
trained = launch.run_in_processes(train_on_this_process, plan.launch.processes)
if trained is not None:
    model, tokenizer = trained
summary = json.loads((plan.out / "training_summary.json").read_text())  # written by the first process
print(f"step {summary['global_step']} ({summary['stopped_reason']}) on {summary['world_size']} process(es): "
      f"train loss {summary['train_loss']:.4f}, eval loss {summary['eval_loss']:.4f}")
if summary["measured_peak_gb"] is not None:  # on a GPU: torch's counter beside the plan, both without the CUDA context
    print(f"memory: peak allocated {summary['measured_peak_gb']:.2f} GB, planned {plan.memory['allocated_gb']:.2f} GB "
          f"(the plan's {plan.memory['estimate_gb']:.2f} GB less the CUDA context, which torch does not count)")
if summary["time_plan"]:  # the time plan beside what the run took: its error shows after every run
    timing = summary["time_plan"]
    print(f"time: planned {timing['predicted_s']:.0f} s, took {timing['actual_s']:.0f} s ({timing['error']:+.1%})")
else:
    print(f"time: no plan ({summary['time_plan_skipped']})")

# %% [markdown]
# ## Learning curves
# Train and eval loss over the steps, with a one-line diagnosis (learning, overfitting, too little, diverging).

# %%
from IPython.display import Image, display

display(Image(str(plan.out / "learning_curves.png")))
print(summary["diagnosis"])

# %% [markdown]
# ## When a run stops early
# `stopped_reason` in `training_summary.json` says why training ended, and what to do next:
#
# | stopped_reason | what happened | what to do |
# |---|---|---|
# | `max_steps`, `completed` | the run finished | run 03 |
# | `time_budget` | saved before the session limit | resume (below): it continues from the last verified checkpoint |
# | `nan` | the loss became NaN; the last good checkpoint is the final one | lower `learning_rate`, or check the data for empty answers; in fp16 on a T4 (Gemma-2/3) `precision="fp32"` |
# | `degenerate` | the probe's generations turned to loops or garbage twice in a row | check 01's rendered examples (does each answer end with its end-of-turn token?), lower the learning rate |
# | `disk_full` | a save did not fit | lower `keep_checkpoints` or free space, then resume (below) |
#
# **Resume**: run this notebook again with `resume=True` (the default) and the same settings; it continues from
# the newest checkpoint that verifies.
# - Kaggle: open the notebook (Edit), then Add Input > Notebooks > Your Work > this notebook: the output of its
#   last saved version mounts under `/kaggle/input/`, where the run finds its checkpoints. Save Version > Save &
#   Run All. 03 and 04 then take this new version as their input.
# - Colab: files go with the runtime, so mount Drive before the first run (Files pane > Mount Drive): the run then
#   writes under `MyDrive/qlora-notebooks/`; in the new runtime mount it again and run all.
# - On your machine: run it again with the same `output_dir`.
#
# A resume refuses, naming each difference, when a setting that changes the trained weights differs from the
# checkpoint's: the base model, 01's data, the precision, the 4-bit or LoRA config, the learning rate and its
# schedule, the batch size, accumulation or number of processes, the seed. Training longer (a larger `max_steps`
# or `num_epochs`) is allowed. Then set a new `output_dir` to keep both runs, or `resume=False` to start over (the
# old checkpoints are moved aside). A `smoke=True` run's checkpoints are never continued: a real run moves them
# aside itself and starts over; a smoke run in a real run's folder is refused (give it an `output_dir` of its own).
#
# What the checkpoint folder holds, and what 03 and 04 read from it:

# %%
ckpt_dir = plan.out / summary["checkpoint_dir"]
for f in sorted(ckpt_dir.iterdir()):
    print(f"{f.name:<32} {f.stat().st_size / 2**20:8.2f} MB")
