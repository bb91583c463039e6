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
# # 04 · Export: a model people can use
#
# [![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/qlora-t4/notebook-suite/blob/v0.1.0/notebooks/04_export.ipynb) [![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=https://github.com/qlora-t4/notebook-suite/blob/v0.1.0/notebooks/04_export.ipynb)
#
# Fourth notebook of the suite. It exports what 02 trained, but only when 03 showed it is worth it:
# a **gate** reads 03's report; then a **merged fp16 model** (the base reloaded in fp16, the adapter
# merged in, verified against base + adapter), the **adapter alone** with a model card, an optional
# **push to the Hugging Face Hub** (private by default) and a **GGUF** file for llama.cpp and Ollama
# with its Modelfile, verified by reloading it. A **disk plan** made before anything is written keeps
# the output within the disk and Kaggle's limit. Steps that cannot run here (no token, no internet)
# say why and skip.

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
# `"auto"` lets the notebook choose; each comment says what it picks.
#
# **05's adapter** is exported instead of 02's when `adapter_dir` and `eval_dir` both name 05's output folder
# (`preference/`; on Kaggle attach 05's output as an input and give its path under `/kaggle/input/`): 05's report
# stands in for 03's at the gate.
#
# **The GGUF** is converted from the merged fp16 model: with `export_merged=False` and `gguf_type` set, the merged
# model is made in the temp folder for the conversion and not kept. Where the fp16 merge fits nowhere, the memory
# plan stops the notebook: set `export_merged=False` and `gguf_type=""` (the adapter alone). The embedded default's
# toy tokenizer never yields a GGUF. **To download** the files: on Kaggle, open the saved
# version's page, Output tab, `export/` (a file, or the whole output as a zip), or run
# `kaggle kernels output <your-username>/qlora-04-export -p DIR`; on Colab, the Files pane or a Drive `output_dir`.

# %% tags=["parameters"]
base_model = "auto"  # auto: the model 02 trained on (its checkpoint's run configuration); another one is refused
data_dir = "auto"  # output of 01; auto: found in the working dir or among Kaggle inputs
adapter_dir = "auto"  # output of 02; auto: found the same way; 05's output folder exports 05's adapter
eval_dir = "auto"  # output of 03; auto: found the same way; with 05's adapter, 05's output folder too (its report)
output_dir = "auto"  # auto: <working dir>/export
gate_metric = "auto"  # auto: 03's primary metric; or exact_match, rouge_l, chrf, a module:function 03 computed
min_improvement = 0.0  # the tuned model must beat the base by more than this on gate_metric
max_degenerate_rate = 0.2  # ... and have fewer degenerate generations than this share
force = False  # export even when the gate refuses (it says so)
export_merged = True  # the fp16 base with the adapter merged in: loads without peft, needs RAM for the whole model
export_adapter = True  # the adapter alone: megabytes, loads on top of the base model
verify_prompts = 3  # eval prompts on which the merged model's logits are compared with base + adapter
max_shard_size = "2GB"  # safetensors shard size of the merged model
hub_repo = ""  # "<user>/<model>": push there with the HF_TOKEN secret; "": no push
hub_private = True
hub_what = "adapter"  # adapter, merged, or both (the merged model then goes to "<hub_repo>-merged")
gguf_type = "q8_0"  # converted from the merged model (see above); q8_0, f16, bf16; q4_k_m, q5_k_m, q6_k (builds llama-quantize); "": none
gguf_lora = True  # with gguf_type: the adapter alone as a GGUF LoRA too (llama.cpp --lora), megabytes
llama_cpp_dir = "auto"  # a llama.cpp checkout to use; auto: the attached dataset's, a checkout, or the pinned one
verify_runtime = "auto"  # run each GGUF in llama.cpp itself against the merged model; auto: where it is built or can be (a C++ compiler, minutes once); False: skip

# %% [markdown]
# ## Preflight
# The GPUs, the precision rule and the packages; its rows head the memory plan's table below.

# %%
from nbutils.runtime.preflight import preflight

env = preflight(load_in_4bit=False, show=False)

# %% [markdown]
# ## The gate
# First the output folder's lock: one run per folder (a second one is refused at once, naming this one), and the
# earlier `export_summary.json` goes (this run writes it again, last). A model is exported only when 03's report
# says the tuned model beats the base on the chosen metric and rarely degenerates, and only when that report is
# about the checkpoint exported here (its step and content hash): a report of another checkpoint is refused, naming
# the notebook to rerun. Otherwise the run stops here with the reason; `force=True` exports a model that fails the
# gate anyway and says so.

# %%
from pathlib import Path

from nbutils.export import gate
from nbutils.runtime import environment
from nbutils.train import checkpoints, reports

out = reports.begin(environment.stage_dir("export", output_dir), "export")  # the lock, before anything is written
data_dir = environment.find_upstream("data_prep", data_dir)
adapter_dir = environment.find_upstream("train_qlora", adapter_dir)
eval_dir = environment.find_upstream("eval", eval_dir)
ckpt, _ = checkpoints.for_eval(Path(adapter_dir))  # the checkpoint that verifies against its checksums, as in 03
decision = gate.check(eval_dir, gate_metric, min_improvement, max_degenerate_rate, force=force, checkpoint=ckpt)

# %% [markdown]
# ## The check prompts
# What 02 trained on (the checkpoint's run configuration: another base model or other data is refused), and a few
# eval prompts the merged model is checked on, rendered with the checkpoint's own tokenizer. The memory plan below
# is sized on the longest of them.

# %%
from nbutils.data import splits
from nbutils.eval import evaluation
from nbutils.train import recipe

trained = recipe.from_checkpoint(ckpt, base_model, data_dir=data_dir)  # what 02 trained on; another base or data is refused
base_model = trained.base_model
tokenizer = recipe.trained_tokenizer(ckpt, data_dir)  # saved with the adapter: training's template, 01's tokens
eval_split = splits.load_split(data_dir, "eval")
prompts, references = evaluation.prompts_and_references(eval_split, tokenizer, limit=verify_prompts)
chats = evaluation.prompt_messages(eval_split, limit=verify_prompts)  # the same prompts as messages, for llama.cpp
print(f"{len(prompts)} check prompts from {data_dir}")

# %% [markdown]
# ## Memory plan
# Merging needs the base model in fp16, not the 4-bit weights used in training: merging into quantized weights is
# lossy, and a base stored quantized (a `-bnb-4bit` repo) is refused here for a merge or a GGUF. fp16 is 2 bytes per
# parameter (a 7B model: about 14 GB), more than a T4's 15 GB once loading overhead counts, so a large model merges
# in CPU RAM (Kaggle gives 29 GB, free Colab 12.7 GB). The check after the merge runs base + adapter exactly, in
# fp32, one module's weights upcast at a time: the plan counts the largest module in fp32 and the logits of the
# longest text a check runs (a prompt; with a GGUF, a prompt and its answer). One table, from the config alone,
# before anything loads; when it fits nowhere, export the adapter only.

# %%
from nbutils.export import merge

# the longest text a check runs: the prompts, and with a GGUF its check's prompt + answer texts (scored whole)
checked = prompts + ([p + r for p, r in zip(prompts, references)] if gguf_type else [])
memory_plan = merge.memory_plan(base_model, merge.check_tokens(tokenizer, checked), int(trained.lora.get("r", 16)),
                                len(prompts))
print(merge.plan_table(memory_plan, env.rows()))
merge.check_fits(memory_plan, export_merged, gguf_type)  # a merge is wanted and fits nowhere (or cannot be made): stop now

# %% [markdown]
# ## Disk plan
# Before anything is written: the size of every artifact (from the parameter count and the dtypes),
# against the free space where it goes and the platform's limit (Kaggle keeps 20 GiB of
# `/kaggle/working`). The output keeps what fits in the order of value (adapter, GGUF, merged); big
# intermediates go to the temp folder. An 8B model is 15 GiB merged plus 8 GiB as q8_0: on Kaggle the
# merged model then stays in the temp folder instead of filling the disk at the end of the run.

# %%
from nbutils.export import diskplan

disk = diskplan.for_export(out, ckpt, memory_plan["params"], export_adapter, export_merged, gguf_type, gguf_lora,
                           base_model)  # a base not cached yet is downloaded first: its room counts
print(diskplan.text(disk))

# %% [markdown]
# ## What every export carries
# The model card's facts (data, training run, 03's figures) and where each export is pushed.

# %%
from nbutils.export import card, hub

repos = hub.targets(hub_repo, hub_what)
facts = card.collect_facts(data_dir, adapter_dir, eval_dir, base_model, checkpoint=ckpt, tokenizer=tokenizer)
print(f"model card facts from 01, 02 and 03; push to {', '.join(repos.values()) if repos else 'nowhere (hub_repo is empty)'}")

# %% [markdown]
# ## Merged fp16 model
# The adapter merged into the fp16 base one LoRA layer at a time, saved as safetensors shards with the tokenizer,
# its chat template and a generation config. Each layer's merge is proved in the weights: merged minus base must be
# the adapter's update (scale x B @ A, in fp32) within fp16 rounding, so a merge that lost the adapter fails however
# weak the adapter is (one whose every change is below fp16 rounding cannot live in an fp16 model and fails too).
# Then the folder is reloaded with `AutoModelForCausalLM`: its merged weights must be those bit for bit, and its
# logits on a few eval prompts are compared with exact base + adapter (unmerged, in fp32): the largest difference
# must stay within 4 x what fp16 arithmetic alone moves this model's logits (measured on the same prompts), so a
# 30-layer model gets the room its depth needs and another base fails. NaN or inf anywhere (fp16 overflow) fails.

# %%
from nbutils.train import atomic

merged = None
if disk.path("merged"):  # written under a temporary name, swapped in whole once saved and verified
    with atomic.folder(disk.path("merged"), "the merged model", disk.items["merged"].size) as folder:
        merged = merge.export_merged(base_model, ckpt, folder, prompts, memory_plan["device"], max_shard_size=max_shard_size)
        (folder / "README.md").write_text(card.model_card(facts, "merged", repos.get("merged", "")))
    print(f"merged model in {disk.path('merged')}: max |logit diff| {merged['max_abs_diff']:.4g} on {merged['prompts']} prompts "
          f"(tolerance {merged['tolerance']:.4g}: {merge.NOISE_FACTOR:g} x the fp16 noise of base + adapter, "
          f"{merged['fp16_noise']:.4g}), same greedy tokens: {merged['same_argmax']}; weights: "
          f"{merged['weights']['checked']} LoRA layers equal base + adapter within fp16 rounding, "
          f"{merged['weights']['moved']} weights moved by it")
else:
    print(f"[merged] skipped: {disk.items['merged'].reason if 'merged' in disk.items else 'export_merged=False'}")

# %% [markdown]
# ## Adapter only
# The light option: the LoRA weights, tokenizer and chat template, the run's configuration and a
# model card, a few megabytes. Loading it needs the base model too.

# %%
from nbutils.export import adapter

adapter_export = None
if disk.path("adapter"):
    adapter_export = adapter.export_adapter(ckpt, disk.path("adapter"), card.model_card(facts, "adapter", repos.get("adapter", "")))
    print(f"adapter in {adapter_export['dir']}: {adapter_export['size_mb']} MB, {len(adapter_export['files'])} files "
          f"({', '.join(adapter_export['files'])})")
else:
    print("[adapter] skipped: export_adapter=False")

# %% [markdown]
# ## Push to the Hugging Face Hub
# With `hub_repo` set and an `HF_TOKEN` secret (a write token), the chosen folders go to a
# private repo unless `hub_private=False`. The token is read with `get_secret` and never printed
# or written. Without a token or internet the step says why and skips.

# %%
pushed = [hub.push(str(disk.path(name)), repo, private=hub_private) for name, repo in repos.items() if disk.path(name)]
if not repos:
    print("[hub] skipped: hub_repo is empty: set it to '<your-username>/<model-name>' to push")
for name in (n for n in repos if not disk.path(n)):
    print(f"[hub] {name} not pushed: it was not written here (see the disk plan)")

# %% [markdown]
# ## GGUF for llama.cpp and Ollama
# llama.cpp's own converter (from the attached dataset, so it works with the internet off) turns the
# merged model into one `.gguf` file that carries the tokenizer, the chat template and every stop token
# (EOS, end of turn, `generation_config.eos_token_id`): a model that loses them talks on forever in
# Ollama. The file is then reloaded and compared with the merged model on the check prompts (logits,
# greedy tokens, perplexity on the eval texts) before it is kept, and run in llama.cpp itself (built once from
# the same pinned sources): its tokens of the prompts, its rendering of the chat template, its greedy answers
# and where they stop, its logits and the adapter GGUF on a GGUF of the base, all against the merged model. A
# GGUF that fails there is kept but marked unverified, with the reason. Beside it: an Ollama `Modelfile` with
# the trained chat template and one `PARAMETER stop` per stop token (as llama.cpp confirmed them), and the
# adapter alone as a GGUF LoRA. The last lines printed are the commands to run it.

# %%
from nbutils.export import ggufbuild

gguf_export = None
if gguf_type:
    gguf_export = ggufbuild.export(disk, gguf_type, tokenizer, prompts, [p + r for p, r in zip(prompts, references)],
                                   base_model, ckpt, facts, llama_cpp_dir, gguf_lora, memory_plan["device"] or "cpu",
                                   chats=chats, answers=references, verify_runtime=verify_runtime)
    print(ggufbuild.report(gguf_export))
else:
    print("[gguf] skipped: gguf_type is empty (set e.g. gguf_type='q8_0' to convert it from the merged model)")

# %% [markdown]
# ## Summary
# `export_summary.json` records the checkpoint exported (step and content hash), the gate, the memory plan, the
# verification, what was written and pushed, the GGUF's checks and commands, and the disk plan: what was kept where,
# what was dropped and why (secrets scrubbed). It is written last, once every file it lists (each with its size and
# SHA-256) is in place and verified; an earlier export's folders that this run did not write are removed first.

# %%
from nbutils.export import summary as export_summary

result = {"checkpoint": reports.identity(ckpt), "gate": {**decision.__dict__, "passed": decision.passed},
          "memory_plan": memory_plan, "merged": merged, "adapter": adapter_export, "pushed": pushed, "gguf": gguf_export,
          "disk_plan": export_summary.disk_plan(disk, gguf_export), "facts": facts}
export_summary.write_summary(out, result, export_summary.written(disk, merged, adapter_export, gguf_export))
print(f"[export] gate {'forced' if decision.forced else 'passed'}; merged: "
      f"{'max |logit diff| ' + format(merged['max_abs_diff'], '.4g') if merged else 'no'}; adapter: "
      f"{str(adapter_export['size_mb']) + ' MB' if adapter_export else 'no'}; pushed: {pushed or 'nothing'}; "
      f"GGUF: {(gguf_export or {}).get('file') or 'none'}; all in {out / 'export_summary.json'}")
