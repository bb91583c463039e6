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
# # 03 · Eval: base model vs fine-tuned, side by side
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/qlora-t4/notebook-suite/blob/v0.1.0/notebooks/03_eval.ipynb) [![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/qlora-t4/notebook-suite/blob/v0.1.0/notebooks/03_eval.ipynb)
#
# Third notebook of the suite. It generates answers to the held-out eval prompts with the base
# model and with the base model plus the adapter from 02, scores both with the task metrics
# (exact match, ROUGE-L, chrF or your own, with bootstrap intervals) and the eval loss, writes
# `eval_report.json`, and ends with a short chat with the tuned model.

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

# %% tags=["parameters"]
base_model = "auto"  # auto: the model 02 trained on (its checkpoint's run configuration); another one is refused
data_dir = "auto"  # output of 01; auto: found in the working dir or among Kaggle inputs
adapter_dir = "auto"  # output of 02; auto: found the same way
output_dir = "auto"  # auto: <working dir>/eval
seed = 0
smoke = False
precision = "auto"  # auto: 02's (fp16 on a T4), or this machine's rule where it lacks that one (fp32 on a CPU)
attn_implementation = "auto"  # auto: sdpa where the model class supports it, else eager (Gemma-2); FA2 from cc 8.0 if installed
max_new_tokens = "auto"  # auto: 1.5x the longest reference answer (in tokens) + 4 for the stop, 16 to 1024
n_samples = 64  # prompts to generate on; the eval loss always uses the whole eval split
generate_batch_size = 16  # prompts generated at once; the plan says whether they fit the GPU, and the most that do
eval_batch_tokens = "auto"  # padded tokens the eval loss scores at once; auto: 16,384, or the most that fit
guard = "abort"  # abort: stop the run when most tuned generations are garbage; flag: only report; off
breaker_min_samples = 16  # the circuit breaker decides after this many tuned generations: never with fewer (smoke has 8)
breaker_max_share = 0.5  # ... and trips when more than this share is degenerate
metrics = "auto"  # auto: exact_match, rouge_l and chrf, primary by answer length; or e.g. "rouge_l,chrf", "auto,mymod:score"
n_bootstrap = 1000  # resamples for the 95% intervals
chat_prompts = "auto"  # a list of prompts for the chat at the end; auto: the first eval questions

# %% [markdown]
# ## Preflight
# The GPUs, the precision rule and the packages; its rows head the plan's table below, made before the model loads.

# %%
from nbutils.runtime.preflight import preflight

env = preflight(show=False)

# %% [markdown]
# ## The model 02 trained, as it trained it
# First the output folder's lock (one run per folder, as in 02) and the earlier `eval_report.json` removed: it is
# written again, last. The checkpoint must match its checksums (sizes, SHA-256, step) and be the one 02's summary
# describes; a damaged final checkpoint falls back to the newest Trainer checkpoint that verifies, and says so. Its `run_config.json` names the base model, the 4-bit
# config and the precision 02 used: the base model is loaded exactly that way below.

# %%
from pathlib import Path

from nbutils.runtime import environment
from nbutils.train import checkpoints, recipe, reports

out = reports.begin(environment.stage_dir("eval", output_dir), "eval")  # the lock, before anything loads
data_dir = environment.find_upstream("data_prep", data_dir)
adapter_dir = environment.find_upstream("train_qlora", adapter_dir)
ckpt, summary = checkpoints.for_eval(Path(adapter_dir))
trained = recipe.from_checkpoint(ckpt, base_model, precision, env.precision, data_dir)  # 01's data must be 02's
print(f"adapter {ckpt} (step {checkpoints.checkpoint_step(ckpt)}) on {trained.base_model}: "  # a fallback's own step
      f"{'4-bit' if trained.quantization else 'full-precision'} base, computing in {trained.precision}")

# %% [markdown]
# ## The eval prompts
# The held-out split 01 wrote, rendered with the same chat template; `max_new_tokens` follows the
# longest reference answer, so generation stops near where a good answer would.

# %%
from nbutils import defaults
from nbutils.data import splits
from nbutils.eval import evaluation, report
from nbutils.eval.degeneration import CircuitBreaker
from nbutils.train import modeling

eval_ds = splits.load_split(data_dir, "eval")
tokenizer = recipe.trained_tokenizer(ckpt, data_dir)  # saved with the adapter: training's template, 01's tokens
evaluation.check_guard(guard)  # abort, flag or off, refused now rather than read as flag
prompts, refs = evaluation.prompts_and_references(eval_ds, tokenizer, limit=8 if smoke else n_samples)
new_token_limit, why = defaults.max_new_tokens(max_new_tokens, tokenizer, refs)  # the parameter may say "auto"
print(f"{len(prompts)} prompts from {data_dir}; up to {new_token_limit} new tokens each ({why})")

# %% [markdown]
# ## The plan, checked before the model loads
# One table: this machine (preflight's rows), then the memory plan from the model's config alone: the 4-bit
# weights and the adapter, then the larger of generating (the cache of `generate_batch_size` prompts) and scoring
# the eval loss (`eval_batch_tokens` padded tokens at a time). The loss is scored with lm_head applied to a chunk of
# positions at a time, as 02 trains: the batch x length x vocabulary logits never exist (for Qwen2.5's 151,936-token
# vocabulary, 32 rows of 512 tokens would need 23 GiB of them), except for a model that soft-caps its logits
# (Gemma-2), scored from its whole logits, which the plan then counts. What does not fit stops here, naming the
# parameter to change and the largest value that fits.

# %%
from nbutils.eval import evalplan

plan = evalplan.plan_eval(trained, env, [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts],
                          list(eval_ds["length"]), new_token_limit, generate_batch_size, eval_batch_tokens,
                          attn_implementation=attn_implementation)

# %% [markdown]
# ## Base model first
# The same prompts and the same greedy decoding for both models, so the difference is the adapter.
# Generations run under the degeneration guard: a row that loops or turns to token soup is
# stopped where it degenerates (healthy rows are untouched), so nobody waits for garbage.
# The base model is expected to do badly here: it is only flagged, never aborted.

# %%
model = tuned_model = None  # run again in this kernel: the models loaded before go first, not beside the new one
modeling.free_memory()
model = modeling.load_base(trained.base_model, trained.precision, trained.quantization, attn_implementation,
                           preferred_attention=env.attention)
model.eval()
base, base_out = evaluation.score(model, tokenizer, eval_ds, prompts, refs, new_token_limit,
                                  guard="off" if guard == "off" else "flag", metrics=metrics,
                                  batch_size=plan.generate_batch_size, batch_tokens=plan.eval_batch_tokens)
print(report.model_line("base", base))

# %% [markdown]
# ## Then with the adapter
# With `guard="abort"` the circuit breaker raises after `breaker_min_samples` generations if
# most are degenerate, naming likely causes (EOS never learnt, wrong chat template, fp16
# overflow), so a batch run stops instead of burning its remaining hours.

# %%
from peft import PeftModel

tuned_model = PeftModel.from_pretrained(model, ckpt)  # the base model above, with the adapter on top
tuned_model.eval()
breaker = CircuitBreaker(breaker_min_samples, breaker_max_share) if guard == "abort" else None
tuned, tuned_out = evaluation.score(tuned_model, tokenizer, eval_ds, prompts, refs, new_token_limit,
                                    guard="off" if guard == "off" else "flag", breaker=breaker, metrics=metrics,
                                    batch_size=plan.generate_batch_size, batch_tokens=plan.eval_batch_tokens)
print(report.model_line("tuned", tuned))

# %% [markdown]
# ## Task metrics
# Exact match scores an answer in a sentence as 0, so longer answers are judged with ROUGE-L
# (rouge-score) and chrF (sacrebleu) too. Each figure has a 95% bootstrap interval over the
# samples, and win/tie/loss counts how often the tuned model beat the base on the same prompt.
# With a few dozen samples the intervals are wide: read them before trusting a small gain.

# %%
import pandas as pd
from IPython.display import Image, display

from nbutils.eval import metrics as task_metrics

scores = task_metrics.compare(metrics, {"base": [o["text"] for o in base_out], "tuned": [o["text"] for o in tuned_out]},
                              refs, n_boot=n_bootstrap, seed=seed)
report.metric_chart(scores, out / "metrics.png")
display(pd.DataFrame(task_metrics.summary_rows(scores)), Image(str(out / "metrics.png")))

# %% [markdown]
# ## Report files
# `samples.html` lists every sample (degenerate rows in red, correct ones in green), `reasons.png` counts
# degenerate generations by reason, and `eval_report.json` holds both models' figures and names the checkpoint they
# are about (step and content hash: 04 refuses a report of another one). The report is written last: 04 (and
# `find_upstream`) take its presence to mean the folder is complete.

# %%
COLUMNS = ["model", "prompt", "reference", "output", "verdict"]
rows = evaluation.sample_rows(prompts, refs, base_out, tuned_out)
report.write_pages(out, rows, COLUMNS, {"base": base["reasons"], "tuned": tuned["reasons"]})
result = {"n_samples": len(prompts), "guard": guard, "base": base, "tuned": tuned, "metrics": scores,
          "memory_plan": plan.memory, "samples": rows}
print(f"wrote {evaluation.write_report(out, result, ckpt)} ({len(rows)} sample rows), samples.html and reasons.png")

# %% [markdown]
# ## The samples, and why some degenerated
# The first twelve rows of `samples.html`, and the reasons chart.

# %%
from IPython.display import HTML

display(HTML(report.samples_table_html(rows[:12], COLUMNS)), Image(str(out / "reasons.png")))

# %% [markdown]
# ## Base against tuned, side by side

# %%
pd.DataFrame({m: report.side_by_side(result[m]) for m in ("base", "tuned")}).round(4)  # the primary metric first

# %% [markdown]
# ## Chat with your model
# A few prompts under the chat template saved with the checkpoint, answered by the tuned model.
# Interactively the answer streams token by token; in a batch run it prints whole. Put your own
# questions in `chat_prompts`, or call `chat.chat(tuned_model, tokenizer, ["..."])` in a new cell.

# %%
from nbutils.eval import chat

questions = chat.questions(eval_ds, chat_prompts)  # auto: the first eval questions
answers = chat.chat(tuned_model, tokenizer, questions, new_token_limit)
