# ---
# jupyter:
#   accelerator: GPU
#   colab:
#     gpuType: T4
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: accelerator,colab
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Preference: DPO, ORPO, KTO or GRPO on top of the SFT adapter
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/qlora-t4/notebook-suite/blob/v0.1.0/notebooks/05_preference.ipynb) [![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/qlora-t4/notebook-suite/blob/v0.1.0/notebooks/05_preference.ipynb)
#
# Fifth notebook of the suite. After supervised fine-tuning (02), teach the model which answers people prefer:
# **DPO** (pairs: a chosen and a rejected answer), **ORPO** (pairs, no reference model), **KTO** (answers marked
# good or bad one by one), or **GRPO** (the model samples a group of answers per prompt and reward functions
# score them; rollouts run under the degeneration guard, so a looping answer stops early, gets the penalty and
# burns no tokens). The policy starts as 02's adapter; the reference is the same adapter, frozen. The result is
# judged against 02's adapter and written as 03 writes its report, so 04 can export it.
#
# Top to bottom: the parameters, one plan checked before anything loads, the recipe (trl's config and trainer),
# the run, the report against the SFT adapter.

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
# The model and its 4-bit recipe come from 02's checkpoint: there is no `base_model` here. `smoke=True` trains 4
# steps on 64 records and holds out 8 from a `preference_eval` file (else a tenth of the 64): the whole notebook in a
# minute.
# `"auto"` lets the notebook choose, as in every notebook; each comment says what it picks.

# %% tags=["parameters"]
method = "dpo"  # dpo | orpo | kto | grpo
data_dir = "auto"  # output of 01; auto: found in the working dir or among Kaggle inputs
adapter_dir = "auto"  # output of 02 (the SFT adapter this starts from); auto: found the same way
output_dir = "auto"  # auto: <working dir>/preference
preference_data = "embedded"  # JSONL/JSON/CSV/Parquet: pairs, message-list pairs, HH transcripts or KTO rows; embedded: pairs built from the embedded demo task (refused on your own data)
preference_eval = "auto"  # held-out file(s) of the same kinds; auto: eval_fraction of preference_data
eval_fraction = 0.1
seed = 0
smoke = False
precision = "auto"  # auto: 02's (fp16 on a T4), or this machine's rule where it lacks that one (fp32 on a CPU)
attn_implementation = "auto"  # auto: sdpa where the model class supports it, else eager (Gemma-2)
max_steps = "auto"  # auto: one epoch for real models (capped, preferencedata.MAX_AUTO_STEPS); the method's own for toy ones
learning_rate = "auto"  # auto: 2e-5 for real models (LoRA preference tuning), 2e-3 for toy ones
beta = 0.1  # DPO/KTO: how far the policy may move from the reference; ORPO: weight of its odds-ratio term; GRPO: KL weight
per_device_batch_size = 16  # pairs (DPO, ORPO), rows (KTO) or completions (GRPO: x grad_accum, whole groups)
grad_accum = 1
max_length = 256  # prompt + answer, in tokens (GRPO: the prompt); longer records are quarantined, never cut (a fifth or
# more: the plan stops, naming the max_length that keeps 99% of them)
reward_functions = "nbutils.eval.rewards:correct,nbutils.eval.rewards:well_formed,nbutils.eval.rewards:not_degenerate"
# (these examples fit short answers: on 01's data with longer reference answers the plan asks for a reward of your own)
num_generations = 4  # GRPO: completions per prompt, compared with each other
max_completion_length = "auto"  # GRPO: tokens per completion at most; auto: 1.5x the longest reference answer, 16 or more
guard = "flag"  # GRPO: flag runs rollouts under the degeneration guard (03's word); off only counts their tokens
save_steps = 8
keep_checkpoints = 2  # Trainer checkpoints kept on disk: the newest that verify
time_budget_min = "auto"  # auto: this platform's session limit less a margin for the save (nbutils/runtime/limits.py)
resume = True  # continue from the latest complete checkpoint in output_dir
eval_samples = 48  # held-out prompts generated on for the task metric (and GRPO's held-out reward); the preference
# figures score up to 4x as many held-out pairs (or KTO rows), which costs no generation
reward_samples = 4  # GRPO: completions sampled per held-out prompt for the mean reward
n_bootstrap = 1000

# %% [markdown]
# ## One run per output folder
# The output folder's lock comes first, before anything is read, loaded or written (as in 02): a second run into the
# same folder is refused at once, naming the run that holds it; a lock left by a run that died is taken over. The
# earlier `preference_summary.json` goes now: this run writes it again, last.

# %%
from nbutils.runtime import environment
from nbutils.train import reports

reports.begin(environment.stage_dir("preference", output_dir), "preference")

# %% [markdown]
# ## The plan, checked before anything loads
# One table: the GPU and the precision rule (05 trains in one process on one GPU: with several visible, as on
# Kaggle's "GPU T4 x2", it keeps the first, setting `CUDA_VISIBLE_DEVICES` before anything initialises CUDA), 02's
# adapter and the recipe it recorded (the 4-bit base, the precision), the data read and quarantined
# (`quarantine.jsonl`: file, line, reason; the counts add up; GRPO's prompts are measured as trl renders them), the
# memory plan for this method (two sequences per pair, the frozen reference adapter, GRPO's group of completions
# after its longest prompt, and their cache), the learning rate and the steps. Every problem is listed at once.

# %%
from nbutils.runtime import environment
from nbutils.train import preference

data_dir = environment.find_upstream("data_prep", data_dir)
adapter_dir = environment.find_upstream("train_qlora", adapter_dir)
plan = preference.plan_preference(
    method=method, data_dir=data_dir, adapter_dir=adapter_dir, out=environment.stage_dir("preference", output_dir),
    preference_data=preference_data, preference_eval=preference_eval, eval_fraction=eval_fraction, seed=seed,
    smoke=smoke, precision=precision, per_device_batch_size=per_device_batch_size, grad_accum=grad_accum,
    num_generations=num_generations, max_completion_length=max_completion_length, max_length=max_length, max_steps=max_steps,
    learning_rate_value=learning_rate, save_steps=save_steps, keep_checkpoints=keep_checkpoints,
    attn_implementation=attn_implementation, reward_functions=reward_functions)

# %% [markdown]
# ## The policy: 02's adapter on the base it was trained on
# The base loads exactly as 02 trained it (its 4-bit config and precision, from the checkpoint), gets the k-bit
# preparation (gradient checkpointing with `use_reentrant=False`), and 02's adapter goes on top, trainable, in fp32
# so the fp16 gradient scaler works on a T4. trl copies that adapter into a second one named "ref" for the frozen
# reference (DPO, KTO, GRPO with beta > 0): no second model in memory. Built inside a function, as in 02 (05 itself
# trains in one process, on one GPU).

# %%
from nbutils.train import modeling


def load_model():
    from peft import PeftModel

    from nbutils.train import recipe

    tokenizer = recipe.trained_tokenizer(plan.sft_checkpoint)  # 02's, saved with the adapter: 01's pad and template
    base = modeling.load_base(plan.recipe.base_model, plan.precision, plan.recipe.quantization, attn_implementation,
                              preferred_attention=plan.env.attention)
    base = preference.prepare_kbit(base)  # fp32 norms, input gradients, checkpointing without reentrancy
    model = PeftModel.from_pretrained(base, str(plan.sft_checkpoint), is_trainable=True)  # the policy starts as 02's
    preference.trainables_fp32(model)
    print(modeling.trainable_line(model))
    return model, tokenizer


# %% [markdown]
# ## The method's arguments
# trl's config for the method, each argument with its reason. The arguments every method shares come first; they
# are the ones 02 uses, for the same reasons.

# %%
def trainer_arguments():
    import math

    from trl import DPOConfig, GRPOConfig, KTOConfig
    from trl.experimental.orpo import ORPOConfig

    shared = dict(
        output_dir=str(plan.out / "trainer"),  # Trainer checkpoints; the final adapter goes to checkpoint/ beside it
        max_steps=plan.max_steps,
        per_device_train_batch_size=per_device_batch_size,  # the plan says whether it fits
        per_device_eval_batch_size=per_device_batch_size,
        gradient_accumulation_steps=grad_accum,
        learning_rate=plan.learning_rate,  # about a tenth of SFT's: the policy should move, not forget
        lr_scheduler_type="cosine",
        warmup_steps=2,
        optim="adamw_torch",  # on the LoRA weights only; resumes exactly
        fp16=plan.precision == "fp16", bf16=plan.precision == "bf16",  # the precision rule: fp16 on a T4
        activation_checkpointing=True,  # activations recomputed in backward: two sequences per pair still fit a T4
        activation_checkpointing_kwargs={"use_reentrant": False},  # the reentrant variant drops frozen inputs' gradients
        eval_strategy="no",  # 05 judges the result itself, against 02's adapter, after training
        save_strategy="steps", save_steps=plan.save_steps,
        save_total_limit=None,  # rotation is the suite's: it keeps the newest keep_checkpoints that verify
        logging_steps=1 if method == "grpo" else 2,  # GRPO: reward, its spread and the guard's figures every step
        seed=seed, data_seed=seed,
        use_cpu=plan.env.gpu_count == 0,
        disable_tqdm=True,  # the suite prints one line per interval
        dataloader_num_workers=0,
        report_to=[],
    )
    if method == "dpo":
        return DPOConfig(
            **shared,
            beta=beta,  # strength of the pull back to the reference (02's adapter): 0.1 is the usual value
            loss_type=["sigmoid", "sft"],  # DPO's loss plus the chosen answers' own loss (RPO): chosen stay likely
            max_length=plan.max_length,  # records longer than this were quarantined by the plan, never cut here
            precompute_ref_log_probs=False,  # the reference pass runs with each batch: nothing to redo on resume
        )
    if method == "orpo":
        return ORPOConfig(**shared, beta=beta, max_length=plan.max_length)  # beta weighs the odds-ratio term
    if method == "kto":
        return KTOConfig(
            **shared,
            beta=beta,
            # trl's equal weights: pairs give as many desirable rows as undesirable ones. For your own unbalanced KTO
            # rows, raise the rarer side's weight here (trl: desirable_weight x desirable rows over
            # undesirable_weight x undesirable rows between 1 and 4/3)
            desirable_weight=1.0, undesirable_weight=1.0,
            max_length=plan.max_length,  # the rows come shuffled by the plan: a row's KL completion is its neighbour's
        )
    return GRPOConfig(
        **shared,
        beta=beta,  # KL to the reference: keeps the policy near 02's adapter (0 skips the reference pass)
        num_generations=num_generations,  # completions per prompt; rewards are compared within the group
        # the final evaluation (eval loss) groups a prompt's completions within one eval batch of per_device_batch_size
        num_generations_eval=math.gcd(per_device_batch_size, num_generations),  # num_generations where it divides it
        max_completion_length=plan.max_completion_length,  # the longest a rollout may run (the guard stops loops sooner)
        temperature=1.0,  # sample: a group of identical completions teaches nothing
        use_vllm=False,  # generate with transformers: vLLM dropped the T4
        scale_rewards="group",  # rewards divided by the group's spread: one scale for every prompt
        log_completions=False,
    )


# %% [markdown]
# ## The trainer
# trl's trainer for the method, with the suite's callbacks: checkpoints marked complete once verified, a save
# before the time budget runs out, a stop on NaN keeping the last good checkpoint, one progress line per interval.
# GRPO's trainer is wrapped so its rollouts run under the degeneration guard (`nbutils.eval.rollouts`); its
# reward functions are the `module:function` names in `reward_functions`.

# %%
def make_trainer(model, tokenizer, run):
    from datasets import Dataset
    from trl import DPOTrainer, GRPOTrainer, KTOTrainer
    from trl.experimental.orpo import ORPOTrainer

    from nbutils.eval import rewards, rollouts
    from nbutils.train.preference import trainable_state, trainables_fp32

    columns = {"dpo": ("prompt", "chosen", "rejected"), "orpo": ("prompt", "chosen", "rejected"),
               "kto": ("prompt", "completion", "label"), "grpo": ("prompt", "answer")}[method]
    train = Dataset.from_list([{k: r[k] for k in columns} for r in plan.train_rows])
    held = plan.eval_rows[:16] if method == "grpo" else plan.held_out_rows()  # the run's final eval loss
    held = Dataset.from_list([{k: r[k] for k in columns} for r in held])
    exact = trainable_state(model)  # 02's adapter as it is: trl casts it to bf16 below
    if method == "grpo":
        Trainer = rollouts.for_guard(GRPOTrainer, guard)  # "flag": under the guard; "off": counted only
        trainer = Trainer(model=model, args=trainer_arguments(), train_dataset=train, eval_dataset=held,
                          processing_class=tokenizer, reward_funcs=rewards.load(reward_functions),
                          callbacks=run.callbacks)
    else:
        Trainer = {"dpo": DPOTrainer, "orpo": ORPOTrainer, "kto": KTOTrainer}[method]
        trainer = Trainer(model=model, args=trainer_arguments(), train_dataset=train, eval_dataset=held,
                          processing_class=tokenizer, callbacks=run.callbacks)
    trainables_fp32(trainer.model, exact)  # trl cast a 4-bit model's adapter to bf16: a T4's fp16 scaler fails
    return trainer


# %% [markdown]
# ## Train, save, verify
# As in 02: one run per output folder (a lock), resume from the newest checkpoint that verifies and was trained
# with the same settings (the data's content, beta and GRPO's rollout settings among them), `trainer.train()`, a save
# before `time_budget_min`, a stop on NaN. Before training, the
# reference adapter is checked tensor by tensor against 02's file. The final checkpoint is written atomically,
# checked file by file and reloaded to generate a few tokens.

# %%
from nbutils.train import checkpoints, training


def train_on_this_process():
    from nbutils.eval import rollouts

    model, tokenizer = load_model()
    grpo = rollouts.settings(trainer_arguments(), reward_functions, guard)  # GRPO's rollouts and rewards: {} otherwise
    run = training.Run(plan.out, plan.record(smoke=smoke, beta=beta, time_budget_min=time_budget_min, **grpo),
                       time_budget_min=time_budget_min, keep_checkpoints=keep_checkpoints, resume=resume,
                       progress="log", memory_estimate_gb=plan.memory["allocated_gb"])
    trainer = make_trainer(model, tokenizer, run)
    if "ref" in model.peft_config:
        print(preference.check_reference(model, plan.sft_checkpoint))
    with run.session(trainer) as resume_from:
        if not run.finished:
            trainer.train(resume_from_checkpoint=resume_from)
    ckpt = run.save_final(model, tokenizer)
    assert ckpt is not None, f"no usable checkpoint: {run.result.stop_detail}"
    check = checkpoints.verify(ckpt, plan.precision)
    assert check["ok"], f"checkpoint {ckpt} failed verification: {check['problems']}"
    print(f"[checkpoint] {ckpt}: verified; reloaded, it generates {check['generated']!r}")
    return model, tokenizer, run, ckpt


model, tokenizer, run, ckpt = train_on_this_process()

# %% [markdown]
# ## Against the SFT adapter
# 02's adapter is loaded again beside the trained one (adapter "sft"), and both answer the same held-out inputs:
# preference accuracy (the trained policy's implicit reward ranks the chosen answer above the rejected one; 0.5
# for the SFT adapter itself) and reward margins on held-out pairs (on KTO's unpaired rows, which have no pair to
# rank: the share whose reward has the sign of their label); for GRPO the mean reward of sampled
# completions on held-out prompts, with a paired bootstrap interval; for every method 03's task metric with
# intervals, win/tie/loss and degeneration rates. The judged policy is the final checkpoint's (after a NaN stop, the
# last good checkpoint's weights are loaded back first), and answers are scored in batches of the size the plan found
# fits (`plan.judge_batch_tokens`: smaller for a model whose whole logits are built, such as Gemma-2).

# %%
from nbutils import defaults
from nbutils.data import splits
from nbutils.eval import evaluation, rewards
from nbutils.eval import judge

print(preference.judged_policy(model, run, ckpt) or f"[judge] the policy is {ckpt}'s")
model.load_adapter(str(plan.sft_checkpoint), adapter_name=judge.SFT)
model.eval()
eval_ds = splits.load_split(data_dir, "eval")
limit = 8 if smoke else eval_samples
refs = evaluation.prompts_and_references(eval_ds, tokenizer, limit)[1]
new_tokens = defaults.max_new_tokens("auto", tokenizer, refs)[0]
report, sample_rows = judge.task_figures(model, tokenizer, eval_ds, limit, new_tokens, n_bootstrap, seed,
                                         batch_tokens=plan.judge_batch_tokens)
if method == "grpo":
    per_prompt = {}
    for name in (judge.SFT, "default"):
        with judge.adapter(model, name):  # each reward function called as trl calls it in training
            per_prompt[name] = judge.sampled_rewards(model, tokenizer, plan.eval_rows[:limit],
                                                     rewards.load(reward_functions), reward_samples,
                                                     plan.max_completion_length, seed)
    report["held_out_reward"] = judge.reward_figures(per_prompt[judge.SFT], per_prompt["default"], n_bootstrap, seed)
else:
    report.update(judge.held_out_figures(model, tokenizer, plan.eval_rows[:limit * 4], beta,  # pairs, KTO rows
                                         batch_tokens=plan.judge_batch_tokens, n_boot=n_bootstrap, seed=seed))
print(judge.summary_line(method, report))

# %% [markdown]
# ## Report files, summary last
# `eval_report.json` has 03's shape (`base` is 02's adapter, `tuned` this one), so 04 exports this adapter when
# given this folder as `adapter_dir` and `eval_dir`. `training_summary.json` says how training ended; both name the
# checkpoint they describe (step and content hash), and 04 refuses them for another one. Saving the final checkpoint
# removed the earlier reports first. `preference_summary.json`, written last, is what marks the folder complete: it
# lists every file beside it with its size and SHA-256.

# %%
summary = preference.finish(plan, run, ckpt, {**report, "samples": sample_rows})
print(f"step {summary['global_step']} ({summary['stopped_reason']}), {summary['seconds']:.0f} s; wrote "
      f"{', '.join(summary['files'])}")

# %% [markdown]
# ## Learning curves
# The method's loss over the steps, with the one-line diagnosis: on a log axis, or a linear one where a loss is zero
# or below, as GRPO's can be. GRPO's mean reward per step, from the trainer's log, is printed under the plot too.

# %%
import json

from IPython.display import Image, display

display(Image(str(plan.out / "learning_curves.png")))
print(summary["diagnosis"])
if method == "grpo":
    steps = [(h["step"], h["reward"]) for h in json.loads((plan.out / "log_history.json").read_text()) if "reward" in h]
    print("[grpo] mean reward by step: " + ", ".join(f"{s}: {r:.3f}" for s, r in steps))
