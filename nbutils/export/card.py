"""Model cards (README.md with Hub metadata) from what the chain wrote: 01's manifest, 02's summary, 03's report.

Everything goes through `secrets.redact` before it is written: a card is meant to be published.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbutils import chain
from nbutils.chain import MARKERS
from nbutils.export import modelfile
from nbutils.runtime import modelsource
from nbutils.runtime.secrets import redact
from nbutils.train import checkpoints

HYPER = ("max_steps", "num_epochs", "learning_rate", "lora_r", "lora_alpha", "lora_dropout", "use_rslora",
         "per_device_batch_size", "grad_accum", "max_seq_len", "seed", "precision", "load_in_4bit")
# card name -> key of run_config.json's "lora" (the LoraConfig; its target_modules, one name per layer, stay out)
LORA_KEYS = {"lora_r": "r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout", "use_rslora": "use_rslora"}


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _training(summary: dict, ckpt: Path, final: Path, train_dir: Path) -> dict:
    """The training figures of the checkpoint exported. 02's summary describes its final checkpoint; an earlier one
    (the final one failed verification) gets its own step and last eval loss, from its trainer_state.json, and no
    figure of the run's end (its train loss, why it stopped), which describe another model."""
    if ckpt.resolve() == final.resolve():
        return {k: summary.get(k) for k in ("global_step", "stopped_reason", "train_loss", "eval_loss")}
    state = _read(ckpt / "trainer_state.json")
    step = state.get("global_step") or checkpoints.checkpoint_step(ckpt)
    evals = [h["eval_loss"] for h in state.get("log_history") or [] if "eval_loss" in h and h.get("step", 0) <= (step or 0)]
    name = ckpt.relative_to(train_dir).as_posix() if ckpt.is_relative_to(train_dir) else str(ckpt)
    return {"global_step": step, "eval_loss": evals[-1] if evals else None, "checkpoint": name,
            "note": f"02's final checkpoint (step {summary.get('global_step')}) failed verification: this is {name}, "
                    f"the newest of its checkpoints that verifies, exported instead"}


def _loaded_as(run_config: dict) -> str | None:
    """How 02 loaded the base model, and so 03 (recipe.from_checkpoint): run_config.json's quantization (the
    BitsAndBytesConfig 02 built; None: full precision, in its precision). None where the checkpoint records none."""
    if "quantization" not in run_config:
        return None
    quant = run_config["quantization"] or {}
    if quant.get("load_in_4bit"):
        return f"4-bit ({quant.get('bnb_4bit_quant_type', 'fp4')})"  # fp4: BitsAndBytesConfig's own default
    if quant:
        return "8-bit" if quant.get("load_in_8bit") else f"quantized ({quant.get('quant_method', 'unknown method')})"
    return f"full-precision ({run_config.get('precision', 'fp32')})"


def _prompt_variant(ckpt: Path, tokenizer) -> dict:
    """The generation prompt the model was trained to continue, as apply_chat_template's extra arguments
    (modelfile.prompt_variant: Qwen3's enable_thinking=False), from `tokenizer` or else the one 02 saved beside the
    adapter; {} (the default prompt) where there is neither."""
    if tokenizer is None:
        if not (ckpt / "tokenizer_config.json").exists():
            return {}
        from nbutils.train import recipe

        try:
            tokenizer = recipe.trained_tokenizer(ckpt)
        except Exception:  # noqa: BLE001 -- 04 loaded this tokenizer before; a card of one that does not load says less
            return {}
    return modelfile.prompt_variant(tokenizer)


def collect_facts(data_dir: str | Path, adapter_dir: str | Path, eval_dir: str | Path, base_model: str,
                  checkpoint: str | Path | None = None, tokenizer=None) -> dict:
    """The facts a card states, read from the three upstream folders (missing files give missing facts), about the
    checkpoint exported (04's `ckpt`, from checkpoints.for_eval; None: 02's final one), which is not 02's final one
    when that failed verification. tokenizer: the checkpoint's, where the caller has it loaded (else read from it)."""
    manifest = _read(Path(data_dir) / MARKERS["data_prep"])
    summary = _read(Path(adapter_dir) / MARKERS["train_qlora"])
    report = _read(Path(eval_dir) / MARKERS["eval"])
    final = Path(adapter_dir) / summary.get("checkpoint_dir", "checkpoint")
    ckpt = Path(checkpoint) if checkpoint else final
    run_config = _read(ckpt / "run_config.json")
    params = run_config.get("parameters", {}) or summary.get("config", {})
    # LoRA rank, alpha, dropout, rsLoRA: from the LoraConfig the model trained with (02's cell, which a learner may
    # edit), the one record of them; checkpoints from before it was carried had lora_* among the parameters.
    lora = run_config.get("lora") or {}
    params = {**params, **{name: lora[key] for name, key in LORA_KEYS.items() if key in lora}}
    metrics = {}
    for name, m in (report.get("metrics") or {}).get("metrics", {}).items():
        metrics[name] = {k: {"mean": round(m[k]["mean"], 4), "ci": [round(v, 4) for v in m[k]["ci"]]}
                         for k in ("base", "tuned") if k in m}
        metrics[name]["win_tie_loss"] = m.get("win_tie_loss")
    return redact({
        "base_model": base_model, "base_loaded_as": _loaded_as(run_config),
        "prompt_variant": _prompt_variant(ckpt, tokenizer),
        "data": {"content_hash": manifest.get("content_hash"), "counts": manifest.get("counts"),
                 "splits": {k: v for k, v in (manifest.get("splits") or {}).items() if isinstance(v, (int, float))}},
        "hyperparameters": {k: params[k] for k in HYPER if k in params},
        "training": _training(summary, ckpt, final, Path(adapter_dir)),
        "eval": {"n_samples": report.get("n_samples"),
                 "primary_metric": (report.get("metrics") or {}).get("primary", "exact_match"), "metrics": metrics,
                 **{f"{m}_{k}": report.get(m, {}).get(k) for m in ("base", "tuned")
                    for k in ("task_metric", "eval_loss", "perplexity", "degenerate_rate", "eos_rate")}},
    })


def _front_matter(facts: dict, kind: str) -> str:
    base = facts["base_model"]
    library = {"adapter": "peft", "gguf": "gguf"}.get(kind, "transformers")
    lines = ["---", f"library_name: {library}", "pipeline_tag: text-generation",
             "tags: [qlora, lora, fine-tuned]"]
    if base and modelsource.REPO_ID.match(base):
        lines.append(f"base_model: {base}")  # a hub id links the card to its base model; a folder is no id
    return "\n".join(lines + ["---", ""])


def _eval_table(ev: dict) -> list[str]:
    rows = ["| metric | base | tuned | win/tie/loss |", "|---|---|---|---|"]
    for name, m in ev["metrics"].items():
        wtl = m.get("win_tie_loss") or {}
        cell = lambda e: f"{e['mean']:.3f} [{e['ci'][0]:.3f}, {e['ci'][1]:.3f}]"  # noqa: E731
        rows.append(f"| {name}{' (primary)' if name == ev['primary_metric'] else ''} | {cell(m['base'])} | "
                    f"{cell(m['tuned'])} | {wtl.get('win', '-')}/{wtl.get('tie', '-')}/{wtl.get('loss', '-')} |")
    for key, label in (("eval_loss", "eval loss"), ("perplexity", "perplexity"), ("degenerate_rate", "degenerate rate"),
                       ("eos_rate", "EOS rate")):
        b, t = ev.get(f"base_{key}"), ev.get(f"tuned_{key}")
        if b is not None and t is not None:
            rows.append(f"| {label} | {b:.4g} | {t:.4g} | |")
    return rows


def _runtime_line(runtime: dict | None) -> str:
    """What the card says of llama.cpp's runtime check of the GGUF (verified, failed with the reason, not run)."""
    if not runtime or not runtime.get("checked"):
        return f"**Not checked in llama.cpp**: {(runtime or {}).get('reason') or 'no runtime check ran'}."
    if not runtime.get("ok"):
        return f"**Unverified in llama.cpp**: {runtime.get('reason')}."
    lg = runtime["logits"]
    return (f"Verified in llama.cpp: the prompts' tokens, the chat template and the greedy tokens and stops are the "
            f"merged model's; on held-out text NMSE {lg['nmse']:.2e}, KL {lg['kl_mean']:.2e}, top-1 agreement "
            f"{lg['top1']:.1%}.")


def _gguf_usage(facts: dict, run: dict) -> tuple[list[str], str]:
    """How to run a GGUF export: the commands 04 printed, and what the file is."""
    usage = ["```sh", "# llama.cpp (chat in the terminal; the GGUF carries the chat template and stop tokens)",
             run["llama_cpp"], "# Ollama (the Modelfile beside the GGUF: template and one stop per stop token)",
             run["ollama"], "```"]
    return usage, (f"`{facts['base_model']}` with a QLoRA adapter merged in, as a {run['type']} GGUF for llama.cpp and "
                   f"Ollama; it stops on {', '.join(run['stops'])}.\n\n{_runtime_line(run.get('runtime'))}")


def _files(kind: str) -> list[str]:
    """Where an export's files come from and how to download them from Kaggle; what a GGUF needs."""
    slug = chain.by_notebook("04_export").slug
    gguf = ("This GGUF was converted from the merged fp16 model (with `export_merged=False`, one made in a temp "
            "folder and not kept)." if kind == "gguf" else "A GGUF for llama.cpp and Ollama is converted from the "
            "merged fp16 model: 04 writes one when `gguf_type` is set.")
    return ["## Files", "", f"- Written by 04_export into `export/`. On Kaggle: the saved version's page, Output tab "
            f"(one file, or the whole output as a zip), or `kaggle kernels output <your-username>/{slug} -p DIR`.",
            f"- {gguf}", ""]


def _measured_on(kind: str, run: dict | None, loaded_as: str | None) -> list[str]:
    """Where 03's tuned figures come from, for a card of another model than the one 03 ran: a merged or GGUF reader
    would otherwise take them for this file's own. loaded_as: the base as 02 and 03 loaded it (`_loaded_as`)."""
    if kind not in ("merged", "gguf"):
        return []
    this = "this fp16 merged model" if kind == "merged" else " ".join(["this", (run or {}).get("type") or "", "GGUF"])
    base = f"the {loaded_as} base model" if loaded_as else "the base model as 02 loaded it"
    return [f"The tuned figures were measured by notebook 03 on {base} with the adapter applied, "
            f"not on {this.replace('  ', ' ')}.", ""]


def _prompt_lines(facts: dict) -> list[str]:
    """The snippet's prompt: with the arguments of the generation prompt the model was trained to continue (Qwen3's
    enable_thinking=False writes the empty think block its answers followed), only where they are not the default."""
    variant = facts.get("prompt_variant") or {}
    extra = "".join(f", {k}={v!r}" for k, v in variant.items())
    note = [f"# {extra[2:]}: the prompt this model was fine-tuned and evaluated with"] if variant else []
    return [*note, 'text = tokenizer.apply_chat_template([{"role": "user", "content": "..."}], tokenize=False, '
                   f'add_generation_prompt=True{extra})']


def model_card(facts: dict, kind: str, repo_id: str = "", run: dict | None = None) -> str:
    """README.md for an 'adapter', 'merged' or 'gguf' export (run: the GGUF's type, stops and commands): usage,
    data, hyper-parameters, eval and degeneration figures."""
    name = repo_id or "this folder"
    base = facts["base_model"]
    if kind == "gguf":
        usage, what = _gguf_usage(facts, run or {})
    elif kind == "adapter":
        usage = ["```python", "from peft import AutoPeftModelForCausalLM", "from transformers import AutoTokenizer", "",
                 f'model = AutoPeftModelForCausalLM.from_pretrained("{name}")  # loads the base model {base} too',
                 f'tokenizer = AutoTokenizer.from_pretrained("{name}")', "```"]
        what = f"A LoRA adapter (QLoRA-trained) for `{base}`; the base model is not included."
    else:
        usage = ["```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
                 f'model = AutoModelForCausalLM.from_pretrained("{name}", dtype="float16")',
                 f'tokenizer = AutoTokenizer.from_pretrained("{name}")', *_prompt_lines(facts), "```"]
        what = f"`{base}` with a QLoRA adapter merged into its fp16 weights: loads without peft."
    ev, data = facts["eval"], facts["data"]
    lines = [_front_matter(facts, kind), f"# {repo_id or 'Fine-tuned model'}", "", what, "", "## Use", "", *usage, "",
             "## Data", "", f"- content hash: `{data.get('content_hash')}`",
             f"- counts: {json.dumps(data.get('counts'))}", f"- splits: {json.dumps(data.get('splits'))}", "",
             "## Training", "", "| hyper-parameter | value |", "|---|---|",
             *[f"| {k} | {v} |" for k, v in facts["hyperparameters"].items()],
             *[f"| {k} | {v} |" for k, v in facts["training"].items() if v is not None and k != "note"], "",
             *([facts["training"]["note"] + ".", ""] if facts["training"].get("note") else []),
             f"## Evaluation ({ev.get('n_samples')} held-out prompts, 95% bootstrap intervals)", "", *_eval_table(ev), "",
             *_measured_on(kind, run, facts.get("base_loaded_as")),
             "Degenerate rate: share of generations stopped or flagged as loops, token soup or empty output.", "",
             *_files(kind)]
    return redact("\n".join(lines))
