"""05's plan, made before anything loads: the SFT adapter and its recipe, the data, the memory, the steps; one table.

05 starts from 02's adapter: its checkpoint names the base model, the 4-bit config and the precision
(`recipe.from_checkpoint`), and the policy is that adapter, trainable. The reference policy of DPO, KTO and GRPO
(beta > 0) is the same adapter, frozen: trl copies it into a second adapter named "ref" when the trainer is built
(`check_reference` proves the copy equals 02's file and is frozen). ORPO needs no reference.
The rows each method trains on and holds out, and the steps and lengths the data asks for:
`nbutils.train.preferencedata`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from nbutils import defaults
from nbutils.data import pairs as prefdata
from nbutils.runtime import modelsource
from nbutils.runtime.preflight import Environment, accelerators, inspect
from nbutils.train import atomic, checkpoints, diskspace, evalmemory, memory, modeling, recipe, reports, runlock
from nbutils.train import loss as lm_loss
from nbutils.train import preferencedata as rowsplan

METHODS = ("dpo", "orpo", "kto", "grpo")
WITH_REFERENCE = ("dpo", "kto")  # and GRPO when beta > 0
LR_TINY, LR_REAL = 2e-3, 2e-5  # LoRA preference tuning: about a tenth of SFT's rate (toy: 3e-3 -> 2e-3)
SMOKE = {"max_steps": 4, "save_steps": 2}
# A smoke run reads this many records: enough to train its steps and show every figure, few enough that the
# held-out passes (two sequences per pair, policy and reference, a 150k-token vocabulary) take seconds on a CPU.
SMOKE_RECORDS = {"train": 64, "held_out": 8}


class PreferencePlanError(ValueError):
    """What the plan found wrong, every problem with what to do."""


@dataclass
class PreferencePlan:
    """What 05's later cells read: plan.method, plan.recipe, plan.sft_checkpoint, plan.train_rows ..."""

    env: Environment
    method: str
    recipe: recipe.Recipe
    sft_checkpoint: Path
    data_dir: Path
    out: Path
    train_rows: list[dict]
    eval_rows: list[dict]
    counts: dict
    memory: dict
    learning_rate: float
    learning_rate_why: str
    max_steps: int
    save_steps: int
    max_length: int
    sft_settings_hash: str = ""
    steps_why: str = ""
    max_completion_length: int = 0  # GRPO's rollouts and its held-out reward's samples; 0 for the others
    max_completion_length_why: str = ""
    data_manifest_hash: str = ""  # 02's: the 01 output this adapter's line trained on (recipe refuses another)
    problems: list[str] = field(default_factory=list)
    gpu_note: str = ""  # the GPU 05 kept when several were visible (one_gpu)

    @property
    def precision(self) -> str:
        return self.recipe.precision

    @property
    def judge_batch_tokens(self) -> int:
        """Padded positions the judge pass scores at once (answer log-probabilities, the eval loss): what the plan
        found fits with the loss the model's scoring uses."""
        return self.memory.get("judge_batch_tokens", evalmemory.BATCH_TOKENS)

    def held_out_rows(self) -> list[dict]:
        """Held-out rows in the method's shape: KTO trains on unpaired rows, so its eval loss reads them unpaired."""
        return prefdata.unpaired(self.eval_rows) if self.method == "kto" else self.eval_rows

    def record(self, **extra) -> dict:
        """What every checkpoint records beyond the model and the trainer (the resume compares it): the training rows'
        content (a file fixed with the same number of records trains another policy), and extra (the notebook's
        beta, GRPO's rollout settings ...)."""
        return {"base_model": self.recipe.base_model, "precision": self.precision, "method": self.method,
                "sft_settings_hash": self.sft_settings_hash, "data_manifest_hash": self.data_manifest_hash,
                "data_counts": {k: v for k, v in self.counts.items() if k != "inputs"},  # where the files lie is no setting
                "preference_data_hash": prefdata.content_hash(self.train_rows),
                "versions": dict(self.env.versions), **extra}

    def rows(self) -> dict:
        m = self.memory
        return {
            "method": self.method,
            **({"gpu": self.gpu_note} if self.gpu_note else {}),
            "policy": f"02's adapter {self.sft_checkpoint}, trainable",
            "reference": "02's adapter again, frozen (adapter 'ref')" if self.method in WITH_REFERENCE
            else "none (ORPO needs none)" if self.method == "orpo" else "02's adapter, frozen, when beta > 0",
            "base_model": f"{self.recipe.base_model}: {'4-bit' if self.recipe.quantization else 'full precision'}, "
                          f"computing in {self.precision}",
            "data": f"{self._train_size()} train / {len(self.eval_rows)} held out; " + ", ".join(
                f"{k} {v}" for k, v in self.counts.items() if k != "inputs"),
            **({"data.overlap": f"{n} held-out records share a training record's prompt: quarantined "
                                "(held-out-overlap), the held-out figures measure prompts never trained on"}
               if (n := self.counts.get("reasons", {}).get("held-out-overlap")) else {}),
            **{f"data.{i}": f"{p}: {how}" for i, (p, how) in enumerate(self.counts.get("inputs", {}).items(), 1)},
            **{f"memory.{k}": f"{v:.3f} GB" for k, v in m["parts_gb"].items()},
            "memory.peak": f"{m['estimate_gb']:.2f} GB ({m['what']}"
                           + ("; eager attention: its scores counted)" if m.get("attention") == "eager" else ")") + (
                f"; {m['gpu_memory_gb']:g} GB GPU: {'fits' if m['fits'] else 'DOES NOT FIT'}; largest batch that fits "
                f"{m['largest_batch_that_fits']}" if m.get("gpu_memory_gb")
                else "; no GPU: the plan is what a GPU run would need"),
            "learning_rate": f"{self.learning_rate:g} ({self.learning_rate_why})",
            "steps": f"{self.max_steps} ({self.steps_why}); save every {self.save_steps}",
            **({"max_completion_length": f"{self.max_completion_length} ({self.max_completion_length_why})"}
               if self.method == "grpo" else {}),
            "output": str(self.out),
        }

    def _train_size(self) -> str:
        """KTO trains on rows, a pair giving two, while the held-out side and the counts are records: both units."""
        if self.method != "kto":
            return str(len(self.train_rows))
        records = len({(r.get("source"), r.get("line")) for r in self.train_rows})
        return f"{len(self.train_rows)} rows from {records} records (a pair gives two rows)"

    def table(self) -> str:
        rows = {**self.env.rows(), **self.rows(), "problems": len(self.problems) or "none"}
        width = max(len(k) for k in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows.items())


def learning_rate(value, model_config) -> tuple[float, str]:
    """value unless "auto"; else a tenth of SFT's usual LoRA rate for real models, 2e-3 for toy ones."""
    if value != "auto":
        return float(value), "given"
    n = defaults.body_parameters(model_config)
    if n < defaults.TINY_PARAMS:
        return LR_TINY, f"auto: {n / 1e6:.1f}M block parameters, a toy model: {LR_TINY:g}"
    return LR_REAL, f"auto: {n / 1e9:.2f}B block parameters: {LR_REAL:g}, LoRA preference tuning's usual range"


def one_gpu(accels: list) -> tuple[list, str, list[str]]:
    """(the GPUs to plan with, the table's line, problems): 05 trains in this process on one GPU. Several visible make
    transformers wrap the model in nn.DataParallel, which trl's DPO, KTO and GRPO trainers refuse once the model has
    loaded, and with which ORPO trains twice the planned batch. So with several visible and CUDA_VISIBLE_DEVICES
    unset, the first becomes the only one; this runs before anything in the kernel initialises CUDA (preflight reads
    the GPUs through nvidia-smi and a child process). A value the user set is left alone (several GPUs in it: a
    problem), as is a process a launcher placed (LOCAL_RANK)."""
    if len(accels) < 2 or "LOCAL_RANK" in os.environ:
        return accels, "", []
    if (visible := os.environ.get("CUDA_VISIBLE_DEVICES")) is not None:
        return accels, "", [f"CUDA_VISIBLE_DEVICES={visible!r} shows {len(accels)} GPUs, and 05 trains on one (trl's "
                            "DPO, KTO and GRPO trainers refuse several in one process): set it to one of them "
                            "(os.environ['CUDA_VISIBLE_DEVICES'] = '0' in a cell above this one), or unset it and 05 "
                            "takes the first"]
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # nvidia-smi's order, the one preflight lists them in
    os.environ["CUDA_VISIBLE_DEVICES"] = str(accels[0].index)
    return accels[:1], (f"one of the {len(accels)} visible: {accels[0].name} (CUDA_VISIBLE_DEVICES="
                        f"{accels[0].index} set); 05 trains in one process, on one GPU"), []


def plan_preference(*, method: str, data_dir: Path, adapter_dir: Path, out: Path, preference_data: str = "embedded",
                    preference_eval: str = "auto", eval_fraction: float = 0.1, seed: int = 0, smoke: bool = False,
                    precision: str = "auto", per_device_batch_size: int = 16, grad_accum: int = 1,
                    num_generations: int = 4, max_completion_length="auto", max_length: int = 256, max_steps="auto",
                    learning_rate_value="auto", save_steps: int = 8, keep_checkpoints: int = 2,
                    lora_r: int | None = None, show: bool = True, split: str | None = None,
                    attn_implementation: str = "auto", reward_functions: str = "") -> PreferencePlan:
    """Plan 05's run from its parameters; print one table; raise PreferencePlanError listing every problem.

    split: the split read from a saved HF dataset folder that holds several (named in the table's data row);
    attn_implementation: 05's, resolved as the load resolves it (eager, Gemma-2's: its scores planned)."""
    if method not in METHODS:
        raise PreferencePlanError(f"method={method!r} is not one of {', '.join(METHODS)}")
    gpus, gpu_note, problems = one_gpu(accelerators())  # first: before anything could initialise CUDA
    ckpt, sft_summary = checkpoints.for_eval(Path(adapter_dir))
    env, found = inspect("auto" if defaults.is_auto(precision) else precision, True, None, gpus)
    rec = recipe.from_checkpoint(ckpt, "auto", precision, env.precision, data_dir)
    modelsource.check(rec.base_model)
    tokenizer = recipe.trained_tokenizer(ckpt, data_dir)  # 02's, saved with the adapter: 01's tokens and template
    config = modelsource.load_config(rec.base_model)
    train, held, counts = rowsplan.read_data(method, Path(data_dir), Path(out), tokenizer, preference_data,
                                             preference_eval, eval_fraction, seed, max_length,
                                             SMOKE_RECORDS if smoke else None, split)
    completion, completion_why = rowsplan.completion_length(method, max_completion_length, tokenizer, train)
    r = int(lora_r or rec.lora.get("r", 16))
    gpu, _ = memory.planning_gpu(env.gpu_memory_gb)
    # GRPO's prompts are 01's, measured as trl renders them: the longest kept is the one generation starts from
    prompt = (counts.get("longest_prompt") or max_length) if method == "grpo" else max_length
    mem = plan_memory(config, method, prompt, per_device_batch_size, r, num_generations, completion, gpu,
                      compute_bytes(rec, precision, env), modeling.choose_attention(config, attn_implementation,
                                                                                    env.attention))
    lr, lr_why = learning_rate(learning_rate_value, config)
    steps, steps_why = _schedule(method, max_steps, smoke, len(train), per_device_batch_size, grad_accum,
                                 num_generations, config)
    plan = PreferencePlan(env, method, rec, ckpt, Path(data_dir), Path(out), train, held, counts, mem, lr, lr_why,
                          steps, SMOKE["save_steps"] if smoke else save_steps, max_length,
                          sft_summary.get("settings_hash", ""), steps_why, completion, completion_why,
                          recipe.read_run_config(ckpt).get("data_manifest_hash") or "", [], gpu_note)
    answers = rowsplan.long_answer_problems(reward_functions, [t["answer"] for t in train]) if method == "grpo" else []
    plan.problems = problems + found + rowsplan.fit_problems(method, train, held, preference_data,
                                                             per_device_batch_size, counts) + answers + \
        rowsplan.grpo_batch_problems(method, per_device_batch_size, grad_accum, num_generations) + \
        rowsplan.length_problems(counts, max_length) + _checks(plan, per_device_batch_size, keep_checkpoints)
    if show and int(os.environ.get("RANK", "0")) == 0:
        print(plan.table())
    if plan.problems:
        raise PreferencePlanError("05's plan found problems, before anything loaded:\n- " + "\n- ".join(plan.problems))
    return plan


def _schedule(method: str, max_steps, smoke: bool, rows: int, batch: int, grad_accum: int, num_generations: int,
              model_config) -> tuple[int, str]:
    """(max_steps, why): preferencedata.auto_steps, with the passes over the training rows it makes."""
    steps, why = rowsplan.auto_steps(method, max_steps, SMOKE if smoke else None, rows, batch, grad_accum,
                                     num_generations, model_config)
    unit = "prompts" if method == "grpo" else "rows"
    return steps, f"{why}; {rowsplan.epochs(method, steps, rows, batch, grad_accum, num_generations):.2f} epochs of " \
                  f"{rows} training {unit}"


def compute_bytes(rec: recipe.Recipe, precision: str, env: Environment) -> int:
    """The compute dtype's bytes as 05 runs on a GPU: 4 in fp32 (given, or 02 trained with precision="fp32" and
    "auto" keeps it), else 2. Without a GPU the recipe's precision is the CPU's fp32, but the plan is what a GPU
    run would need: the precision given, or 02's."""
    here = rec.precision if env.gpu_count else (rec.trained_precision if defaults.is_auto(precision) else precision)
    return 4 if here == "fp32" else 2


def judge_pass(model_config, method: str, lora_r: int, max_length: int, reward_samples: int = 4,
               tokens: int = evalmemory.BATCH_TOKENS, compute_bytes: int = 2, attention: str = "sdpa") -> dict:
    """The judge pass after training (nbutils.eval.judge): the SFT adapter loaded beside the trained one, then 03's
    generation (a batch of prompts; GRPO's held-out reward samples reward_samples completions for each of a batch
    of prompts) and the scoring of answers, `tokens` padded positions at a time, with the loss the scoring uses for
    this model: in chunks, or from its whole logits where they are not lm_head's output (Gemma-2's soft-capping:
    `loss.unsupported`), as 03 plans it; prompts and answers at most max_length tokens each, scored in rows of
    max_length; compute_bytes and attention (eager: its scores) as the training plan's."""
    shape = memory.Shape.from_config(model_config)
    loss = lm_loss.without_whole_logits(model_config)
    rows = max(evalmemory.GENERATE_ROWS, evalmemory.SAMPLED_PROMPTS * reward_samples if method == "grpo" else 0)
    moment = max(evalmemory.generation(shape, rows, max_length, max_length, compute_bytes, attention),
                 evalmemory.scoring(shape, tokens, loss, compute_bytes, attention, max_length))
    return {"bytes": evalmemory.adapters(shape, lora_r) + moment, "tokens": tokens, "loss": loss,
            "what": f"judged against the SFT adapter: {rows} x ({max_length} + {max_length}) tokens generated, "
                    f"{tokens:,} scored at once ({loss} logits)"}


def plan_memory(model_config, method: str, max_length: int, batch: int, lora_r: int, num_generations: int,
                max_completion_length: int, gpu_memory_gb: float | None, compute_bytes: int = 2,
                attention: str = "sdpa") -> dict:
    """memory.plan_preference with the judge pass scoring as many padded positions at once as fit beside the
    trained model (at most evalmemory.BATCH_TOKENS, at least one max_length row: 03's "auto"), recorded as
    judge_batch_tokens for the judge's cells; compute_bytes 4 for fp32, attention the one the model loads with."""
    same = dict(compute_bytes=compute_bytes, attention=attention)

    def plan_at(tokens: int) -> dict:
        return memory.plan_preference(model_config, method, max_length, batch, lora_r, num_generations,
                                      max_completion_length, gpu_memory_gb,
                                      judge_pass(model_config, method, lora_r, max_length, tokens=tokens, **same), **same)

    tokens, _ = evalmemory.batch_tokens("auto", lambda n: plan_at(n).get("judge_fits", True), max_length)
    return {**plan_at(tokens), "judge_batch_tokens": tokens, **same}


def _checks(plan: PreferencePlan, batch: int, keep: int = 2) -> list[str]:
    found = []
    unbuilt = plan.counts.get("pairs") == rowsplan.NOT_EMBEDDED  # fit_problems says why: no rows follow from it
    if plan.method != "grpo" and not plan.eval_rows and not unbuilt:
        found.append("no held-out pairs: set preference_eval, or eval_fraction above 0")
    # trl would stop on a bare StopIteration at its first batch (GRPO's rows are 01's: none left is length_problems')
    if plan.method != "grpo" and not plan.train_rows and not unbuilt:
        prompts = len({json.dumps(r["prompt"]) for r in plan.eval_rows})
        found.append(f"no training rows: the held-out side took all {len(plan.eval_rows)} (held out by prompt, and they "
                     f"share {prompts} prompt{'s' * (prompts != 1)}): give preference_eval (a held-out file), lower "
                     "eval_fraction, or add records with other prompts")
    m = plan.memory
    if m.get("gpu_memory_gb") and not m["fits"]:
        fix = (f"the largest that fits is {m['largest_batch_that_fits']}" if m["largest_batch_that_fits"] else
               "not even one fits: lower max_length" + (" or max_completion_length" if plan.method == "grpo" else ""))
        found.append(f"per_device_batch_size={batch} does not fit the {m['gpu_memory_gb']:g} GB GPU (plan "
                     f"{m['estimate_gb']:.1f} GB): {fix}" if m["judge_fits"] else
                     f"the judge pass after training does not fit the {m['gpu_memory_gb']:g} GB GPU (plan "
                     f"{m['estimate_gb']:.1f} GB): lower max_length")
    need = diskspace.needed_mb(plan.memory["checkpoint_mb"], keep)  # as 02's plan: keep_checkpoints + 2 checkpoints
    disk = diskspace.check(plan.out, need, keep)
    return found + ([disk] if disk else [])


def _live(params: dict, key: str, name: str, what: str):
    """The model's parameter of adapter `name` for an adapter file's key (the file's names carry no adapter name)."""
    live = key.replace(".weight", f".{name}.weight")
    found = [p for n, p in params.items() if n.endswith(live)]
    if len(found) != 1:
        raise AssertionError(f"the {what} adapter {name!r} has no tensor for {key}")
    return found[0]


def check_reference(model, sft_checkpoint: Path, name: str = "ref") -> str:
    """Prove the trainer's reference adapter is 02's adapter, frozen: every tensor equal to the file's."""
    from safetensors.torch import load_file

    saved = load_file(str(Path(sft_checkpoint) / "adapter_model.safetensors"))
    params = dict(model.named_parameters())
    for key, value in saved.items():
        live = _live(params, key, name, "reference")
        if live.requires_grad:
            raise AssertionError(f"the reference adapter {name!r} trains ({key}): it must stay frozen")
        if not bool((live.detach().float().cpu() == value.float()).all()):
            raise AssertionError(f"the reference adapter {name!r} differs from {sft_checkpoint} at {key}")
    return f"[reference] adapter {name!r}: {len(saved)} tensors equal to {sft_checkpoint.name}'s, frozen"


def judged_policy(model, run, ckpt: Path, name: str = "default") -> str:
    """Make the policy adapter hold the final checkpoint's weights before the judge scores it. After a NaN stop the
    final checkpoint is a copy of the last good Trainer checkpoint (training.save_final) while the model in memory
    holds the weights of the step that stopped: the report would describe weights other than the checkpoint it
    names. Other stops saved the model itself: nothing to do."""
    if getattr(run.result, "stopped_reason", None) != "nan":
        return ""
    import torch
    from safetensors.torch import load_file

    saved = load_file(str(Path(ckpt) / "adapter_model.safetensors"))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for key, value in saved.items():
            _live(params, key, name, "policy").copy_(value)
    return f"[judge] NaN stop: the policy adapter {name!r} reloaded from {ckpt} ({len(saved)} tensors), the checkpoint judged"


def prepare_kbit(model):
    """k-bit preparation before 02's adapter goes on (a 4-bit base): fp32 norms, input gradients, gradient
    checkpointing with use_reentrant=False (the reentrant variant drops the gradients of frozen inputs)."""
    if not getattr(model, "is_loaded_in_4bit", False):
        model.enable_input_require_grads()
        return model
    from peft import prepare_model_for_kbit_training

    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=True,
                                           gradient_checkpointing_kwargs={"use_reentrant": False})


def trainable_state(model) -> dict:
    """The trainable (LoRA) weights as they are, in fp32 copies: what 02's adapter holds, before trl's trainer casts
    them (see trainables_fp32)."""
    return {name: p.detach().float().clone() for name, p in model.named_parameters() if p.requires_grad}


def trainables_fp32(model, exact: dict | None = None) -> None:
    """The trainable (LoRA) weights in fp32: the fp16 gradient scaler refuses to unscale fp16 gradients. trl's
    trainers cast a 4-bit model's trainable adapter to bf16 as they are built (after copying it, exact, into the
    frozen reference): a cast back alone would start the policy from a bf16-rounded copy of 02's adapter while the
    reference stays exact. `exact` (trainable_state taken before the trainer was built) puts the exact values back."""
    import torch

    for name, p in model.named_parameters():
        if p.requires_grad:
            p.data = exact[name].to(p.device) if exact is not None and name in exact else p.data.to(torch.float32)


def finish(plan: PreferencePlan, run, ckpt: Path, report: dict) -> dict:
    """eval_report.json (03's shape) and training_summary.json, both naming the checkpoint they describe, then
    preference_summary.json, the stage's marker, last: it lists every file beside it that this run wrote (the
    quarantine, and the embedded pairs where it built them: GRPO builds none) with its size and SHA-256. Then the
    output_dir lock is released."""
    from nbutils.chain import MARKERS

    out = plan.out
    atomic.write_json(out / MARKERS["eval"], {**report, "checkpoint": reports.identity(ckpt),
                                              "written_by": "05_preference"})
    summary = run.write_summary(ckpt, plan.memory, release=False)
    keep = ("preference", "unpaired", "held_out_reward")
    result = {"method": plan.method, "sft_checkpoint": str(plan.sft_checkpoint), "data": plan.counts,
              **{k: summary[k] for k in ("global_step", "stopped_reason", "seconds", "train_loss", "diagnosis",
                                          "checkpoint_dir", "checkpoint_complete", "checkpoint")},
              "task_metric": {m: report[m]["task_metric"] for m in ("base", "tuned")},
              "degenerate_rate": {m: report[m]["degenerate_rate"] for m in ("base", "tuned")},
              **{k: report[k] for k in keep if k in report},
              "guard": getattr(run.result.trainer, "guard_stats", None),
              "memory_plan": plan.memory, "measured_peak_gb": summary["measured_peak_gb"]}
    read = ["quarantine.jsonl", *(n for n in rowsplan.EMBEDDED_FILES if plan.method != "grpo" and (out / n).exists())]
    files = [summary["checkpoint_dir"], MARKERS["eval"], MARKERS["train_qlora"], "learning_curves.png",
             "log_history.json", *read]
    try:
        return reports.write_summary(out, MARKERS["preference"], result, files)
    finally:
        runlock.release(out)
