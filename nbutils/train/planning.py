"""02's plan, made before anything loads: one table, and every problem found listed at once.

Where it runs (preflight), the model (01's manifest names it; a given one must use the same tokenizer), the data
01 wrote, the loss, the memory plan (whether this batch fits the GPU, the largest batch and the longest sequence
that do), one GPU or several, the learning rate, the steps and the disk the checkpoints need. Nothing here loads
weights, imports bitsandbytes or touches CUDA: with several GPUs the notebook forks its kernel afterwards
(nbutils.train.launch), and each training process builds the recipe itself.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from nbutils import defaults
from nbutils.data import chatformat, splits
from nbutils.runtime import environment, limits, modelsource
from nbutils.runtime.preflight import Environment, fp16_warning, inspect
from nbutils.train import argcheck, diskspace, launch, memory, modeling, recipe
from nbutils.train import loss as lm_loss

SMOKE = {"max_steps": 10, "eval_steps": 5, "save_steps": 5}  # smoke=True: the whole chain in a minute


class PlanError(ValueError):
    """What the plan found wrong, every problem with what to do (the table above it shows the numbers)."""


@dataclass
class RunPlan:
    """What 02's later cells read: plan.base_model, plan.train_ds, plan.max_steps, plan.learning_rate ..."""

    env: Environment
    base_model: str
    base_model_why: str
    data_dir: Path
    out: Path
    manifest: dict
    train_ds: object
    eval_ds: object
    model_config: object
    attention: str
    loss: str
    memory: dict
    launch: launch.Launch
    learning_rate: float
    learning_rate_why: str
    max_steps: int
    eval_steps: int
    save_steps: int
    keep_checkpoints: int | None
    progress: str
    checkpoint_need_mb: float = 0.0
    problems: list[str] = field(default_factory=list)
    per_device_batch_size: int = 16
    batch_why: str = "given"
    steps_per_epoch: int = 0  # optimizer steps in one pass over the training rows (0: not counted)
    steps_why: str = "given"
    time_budget_min: float | None = None
    time_budget_why: str = "given"
    warnings: list[str] = field(default_factory=list)  # shown in the table; the run goes ahead
    loss_setting: object = "auto"  # chunked_loss as given: the table says whether auto chose the loss

    @property
    def precision(self) -> str:
        return self.env.precision

    @property
    def batching(self) -> dict:
        return self.manifest["batching"]

    @cached_property
    def n_train_rows(self) -> int:
        """Training rows as the Trainer batches them (packed blocks hold several records): counted once per plan."""
        return train_rows(self.train_ds, self.batching)

    @property
    def packed(self) -> bool:
        return self.batching["strategy"] == "packed"

    @property
    def device_map(self) -> str | None:
        return "split" if self.launch.mode == "split" else None

    def record(self, **extra) -> dict:
        """What every checkpoint records beyond what the model and the Trainer carry (recipe.run_config)."""
        return {"base_model": self.base_model, "precision": self.precision, "max_seq_len": self.manifest["max_seq_len"],
                "data_manifest_hash": self.manifest.get("content_hash"), "versions": dict(self.env.versions), **extra}

    def rows(self) -> dict:
        """The table's rows after preflight's: the model, the data, the loss, memory, mode, schedule, disk."""
        m, b = self.manifest, self.batching
        epoch = f"; one epoch = {self.steps_per_epoch} steps" if self.steps_per_epoch else ""
        budget = ("none: no session limit here" if self.time_budget_min is None else
                  f"{self.time_budget_min:g} min ({self.time_budget_why}): a save, then a stop, before it runs out")
        return {
            "base_model": f"{self.base_model} ({self.base_model_why})",
            "model_attention": self.attention + ("; each layer's seq x seq scores counted in memory.layer_backward"
                                                 if self.attention == "eager" else ""),
            "data": f"{len(self.train_ds)} train / {len(self.eval_ds)} eval from {self.data_dir}; max_seq_len "
                    f"{m['max_seq_len']}; batching {b['strategy']}",
            "loss": self.loss_why,
            "batch": f"{self.per_device_batch_size} per device ({self.batch_why})",
            **{f"memory.{k}": v for k, v in _memory_rows(self.memory).items()},
            "mode": f"{self.launch.mode}: {self.launch.why}",
            "learning_rate": f"{self.learning_rate:g} ({self.learning_rate_why})",
            "steps": f"{self.max_steps} ({self.steps_why}){epoch}; eval every {self.eval_steps}, save every "
                     f"{self.save_steps}, keep {self.keep_checkpoints}",
            "time_budget": budget,
            "output": f"{self.out}: checkpoints need ~{self.checkpoint_need_mb:,.0f} MB, "
                      f"{diskspace.free_mb(self.out):,.0f} MB free",
        }

    @property
    def loss_why(self) -> str:
        shape = memory.Shape.from_config(self.model_config)
        plain = memory.logits_bytes(self.per_device_batch_size, self.memory["seq_len"], shape.vocab, shape.hidden)
        return lm_loss.describe(self.loss, self.loss_setting, plain / memory.GB, self.memory.get("whole_logits_fit"))

    def table(self) -> str:
        warnings = {f"WARNING{i or ''}": w for i, w in enumerate(self.warnings)}
        rows = {**self.env.rows(), **self.rows(), **warnings, "problems": len(self.problems) or "none"}
        width = max(len(k) for k in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows.items())


def progress_mode(progress: str = "auto") -> str:
    """'log' (plain lines: step, loss, tokens/s, ETA) in a batch run, where widgets show nothing;
    'both' (widgets and the lines) in an interactive session: a local papermill run looks
    interactive (papermill sets nothing the kernel can see), and the lines keep its log readable."""
    if progress not in ("auto", "widgets", "log", "both"):
        raise ValueError(f"progress={progress!r} is not one of auto, widgets, log, both")
    if progress != "auto":
        return progress
    from nbutils.runtime.environment import detect_platform

    return "log" if detect_platform().is_batch else "both"


def _memory_rows(plan: dict) -> dict:
    rows = {k: f"{v:.3f} GB" for k, v in plan["parts_gb"].items()}
    rows["peak"] = f"{plan['estimate_gb']:.2f} GB at batch {plan['batch_size']} x seq {plan['seq_len']}"
    if plan.get("gpu_memory_gb"):
        rows["gpu"] = (f"{plan['gpu_memory_gb']:g} GB ({plan.get('checked_against', 'this GPU')}): "
                       f"{'fits' if plan['fits'] else 'DOES NOT FIT'}; largest batch that fits "
                       f"{plan['largest_batch_that_fits']}; longest sequence {plan['longest_seq_that_fits']}")
    else:
        rows["gpu"] = "no GPU: the plan is what a GPU run would need"
    return rows


def memory_problem(plan: dict, mode: str, chunk_hint: bool = True) -> str | None:
    """The plan's verdict as a problem naming what to change and the largest value that fits (None: it fits, or
    several GPUs hold it together, or there is no GPU to check). `chunk_hint`: the chunked loss is open to this model
    and not already asked for, so naming it can help."""
    if not plan.get("gpu_memory_gb") or plan["fits"] or (mode == "split" and plan.get("split_fits", False)):
        return None
    batch, gpu = plan["batch_size"], f"the {plan['gpu_memory_gb']:g} GB GPU"
    split = mode == "split" and "split_largest_batch" in plan  # neither one GPU nor all of them together hold it
    if split:
        gpu = (f"{plan['gpu_count']} GPUs of {plan['gpu_memory_gb']:g} GB together (split, "
               f"{plan['split_estimate_gb']:.1f} GB on the GPU that holds the loss)")
    most = max(plan["largest_batch_that_fits"], plan["split_largest_batch"] if split else 0)
    if most:
        where = (f" over the GPUs together ({plan['largest_batch_that_fits']} on one GPU, where each GPU trains "
                 "its own copy: DDP, faster)" if split and plan["largest_batch_that_fits"] else "")
        return (f"per_device_batch_size={batch} does not fit {gpu} (plan {plan['estimate_gb']:.1f} GB at "
                f"{plan['seq_len']} tokens, {plan['loss']} loss): the largest that fits is {most}{where}"
                + (" (or chunked_loss=\"auto\": the whole logits are most of it)"
                   if plan["loss"] == "plain" and chunk_hint else ""))
    return (f"not even per_device_batch_size=1 fits {gpu} at {plan['seq_len']} tokens (plan {plan['estimate_gb']:.1f} "
            f"GB at batch {batch}): at batch {batch} the longest sequence that fits is "
            f"{plan['split_longest_seq'] if split else plan['longest_seq_that_fits']} "
            "(max_seq_len in 01), or use a smaller model")


def _base_model(manifest: dict, given: str) -> tuple[str, str]:
    """01's model unless another with the same tokenizer is given; reachable, or the suite's message now."""
    name, why = recipe.base_model_for_training(
        manifest, given, tokenizer_fingerprint=lambda other: chatformat.fingerprint(chatformat.load_tokenizer(other)))
    modelsource.check(name)
    return name, why


def batch_size(value, manifest: dict) -> tuple[int, str]:
    """02's per-device batch size: "auto" is the one 01 planned for (its manifest); another value is allowed, and
    the why says what it changes (01 measured the padding and capped max_seq_len at its own)."""
    planned = manifest["batching"]["batch_size"]
    if defaults.is_auto(value):
        return planned, "auto: the batch size 01 planned for (its manifest)"
    value = int(value)
    if value == planned:
        return value, "given; the one 01 planned for"
    return value, (f"given; 01 planned for {planned}: its padding figures (batching) and its cap on max_seq_len were "
                   f"measured at {planned}, the memory plan above is for {value}"
                   + ("; the memory row says whether max_seq_len still fits" if value > planned else ""))


def steps_per_epoch(n_rows: int, per_device_batch_size: int, grad_accum: int, world_size: int) -> int:
    """Optimizer steps in one pass over n_rows, counted as the Trainer does: each process's share in batches, then
    one step every grad_accum batches."""
    batches = math.ceil(math.ceil(n_rows / max(1, world_size)) / max(1, per_device_batch_size))
    # the Trainer's last step of an epoch takes the batches left over (fewer than grad_accum), so it rounds up
    return max(1, math.ceil(batches / max(1, grad_accum)))


def epoch_warning(max_steps: int, per_epoch: int, n_rows: int) -> str | None:
    """The plan's warning when max_steps stops before one pass over the data (None when it covers one)."""
    if max_steps >= per_epoch:
        return None
    return (f"max_steps={max_steps} covers {max_steps / per_epoch:.0%} of one epoch: one pass over the {n_rows:,} "
            f"training rows is {per_epoch:,} steps. Set max_steps=\"auto\" (num_epochs passes) or a larger number, "
            "unless a run over part of the data is what you want")


def _budget_why(value) -> str:
    if not defaults.is_auto(value):
        return "given"
    return f"auto: {limits.for_platform().platform}'s session limit less {limits.MARGIN_MIN:g} min for the save"


def planned_length(manifest: dict) -> int:
    """The longest row 02 trains on: the longest record, or the block that records pack into when 01's plan packs
    (a packed row fills up to its block size whatever the longest record is)."""
    if manifest["batching"]["strategy"] == "packed":
        return max(manifest["batching"]["block_size"], manifest["token_lengths"]["max"])
    return manifest["token_lengths"]["max"]


def train_rows(train_ds, batching_plan: dict) -> int:
    """How many rows the Trainer batches: the records, or the blocks they pack into when 01's plan packs."""
    if batching_plan["strategy"] != "packed":
        return len(train_ds)
    from nbutils.data import batching

    return len(batching.pack_lengths(list(train_ds["length"]), batching_plan["block_size"]))


def plan_run(*, base_model="auto", data_dir="auto", output_dir="auto", smoke: bool = False, precision: str = "auto",
             load_in_4bit: bool = True, attn_implementation: str = "auto", multi_gpu: str = "auto", num_processes="auto",
             per_device_batch_size="auto", grad_accum: int = 1, lora_r: int = 16, chunked_loss="auto",
             learning_rate="auto", max_steps="auto", num_epochs: float = 1.0, eval_steps: int = 20, save_steps: int = 20,
             keep_checkpoints: int | None = 2, time_budget_min="auto", resume: bool = True, progress: str = "auto",
             show: bool = True) -> RunPlan:
    """Plan 02's run from its parameters; print one table; raise PlanError listing every problem found."""
    env, problems = inspect(precision, load_in_4bit)
    data_dir = environment.find_upstream("data_prep", data_dir)
    manifest = splits.load_manifest(data_dir)
    name, why = _base_model(manifest, base_model)
    model_config = modelsource.load_config(name)
    batch, batch_why = batch_size(per_device_batch_size, manifest)
    gpu, gpu_why = memory.planning_gpu(env.gpu_memory_gb)
    seq = planned_length(manifest)
    # precision="fp32" computes in fp32 on the GPU too: its activations planned at 4 bytes ("auto" is 16-bit there)
    cb = 4 if str(precision).lower() == "fp32" else 2
    # the attention the load picks (eager for Gemma-2: its seq x seq scores counted, as 01's cap counts them)
    attention = modeling.choose_attention(model_config, attn_implementation, env.attention)
    same = dict(compute_bytes=cb, attention=attention)
    whole = memory.plan(model_config, seq, batch, lora_r, gpu, env.gpu_count, loss="plain", **same)
    # the whole logits only on a GPU that holds them: on a CPU the chunks are the faster (3.96x at a 128k vocabulary,
    # `python -m bench throughput_bench`), and the T4 a dry run plans for fits whenever anything does
    plain_fits = whole.get("fits") if env.gpu_count else None
    loss = lm_loss.choose(chunked_loss, cuda=env.gpu_count > 0, model_config=model_config, plain_fits=plain_fits)
    mem = whole if loss == "plain" else memory.plan(model_config, seq, batch, lora_r, gpu, env.gpu_count, loss=loss,
                                                    **same)
    mem["checked_against"], mem["whole_logits_fit"] = gpu_why, plain_fits
    try:
        run_launch = launch.decide(multi_gpu, num_processes, env.gpu_count, memory_plan=mem)
    except ValueError as e:
        problems.append(str(e))
        run_launch = launch.Launch("single", 1, 1, "blocked: see the problems")
    lr, lr_why = defaults.learning_rate(learning_rate, model_config)
    train_ds = splits.load_split(data_dir, "train")
    n_rows = train_rows(train_ds, manifest["batching"])
    per_epoch = steps_per_epoch(n_rows, batch, grad_accum, run_launch.world_size)
    steps, steps_why = (SMOKE["max_steps"], "smoke") if smoke else defaults.max_steps(max_steps, per_epoch, num_epochs,
                                                                                        model_config)
    every = SMOKE if smoke else {"eval_steps": eval_steps, "save_steps": save_steps}
    plan = RunPlan(env, name, why, Path(data_dir), environment.stage_dir("train_qlora", output_dir), manifest,
                   train_ds, splits.load_split(data_dir, "eval"), model_config, attention, loss, mem, run_launch,
                   lr, lr_why, steps, every["eval_steps"], every["save_steps"], keep_checkpoints, progress_mode(progress),
                   per_device_batch_size=batch, batch_why=batch_why, steps_per_epoch=per_epoch, steps_why=steps_why,
                   time_budget_min=limits.budget_min(time_budget_min), loss_setting=chunked_loss,
                   time_budget_why=_budget_why(time_budget_min))
    warnings = [None if smoke or steps <= 0 else epoch_warning(steps, per_epoch, n_rows),
                fp16_warning(model_config, env.precision, env.gpu_capability)]
    plan.warnings = [w for w in warnings if w]
    plan.n_train_rows = n_rows  # counted above: the checks and 02's argument check read it, not count it again
    plan.problems = problems + _checks(plan, grad_accum, num_epochs, resume)
    if show and int(os.environ.get("RANK", "0")) == 0:  # one table, not one per process
        print(plan.table())
    if plan.problems:
        raise PlanError("02's plan found problems, before anything loaded:\n- " + "\n- ".join(plan.problems))
    return plan


def _checks(plan: RunPlan, grad_accum: int, num_epochs: float, resume: bool) -> list[str]:
    """The parameters against the data and the model (argcheck's rules), and the disk against the checkpoints."""
    values = {"per_device_train_batch_size": plan.per_device_batch_size, "gradient_accumulation_steps": grad_accum,
              "world_size": plan.launch.world_size, "max_steps": plan.max_steps, "num_train_epochs": num_epochs,
              "eval_strategy": "steps", "save_strategy": "steps", "eval_steps": plan.eval_steps,
              "save_steps": plan.save_steps}
    found = [] if plan.max_steps > 0 else [f"max_steps={plan.max_steps}: use \"auto\" (num_epochs passes over the data) "
                                           "or a positive number of steps"]
    found += argcheck.problems(values, n_train=plan.n_train_rows,  # rows as batched: packed blocks hold several
                               gpu_capability=plan.env.gpu_capability,
                               resume=resume, max_seq_len=plan.manifest["max_seq_len"],
                               model_max_positions=getattr(plan.model_config, "max_position_embeddings", None))
    plan.checkpoint_need_mb = diskspace.needed_mb(plan.memory["checkpoint_mb"], plan.keep_checkpoints)
    disk = diskspace.check(plan.out, plan.checkpoint_need_mb, plan.keep_checkpoints)
    # auto already took the chunks where they help; a model they cannot serve (Gemma-2's soft-capped logits) gets none
    chunk_hint = not defaults.is_auto(plan.loss_setting) and lm_loss.unsupported(plan.model_config) is None
    too_big = memory_problem(plan.memory, plan.launch.mode, chunk_hint)
    return found + ([disk] if disk else []) + ([too_big] if too_big else [])
